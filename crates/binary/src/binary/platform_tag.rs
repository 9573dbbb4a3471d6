//! The manylinux platform tag (PEP 600) a wheel's ELF files allow, judged as auditwheel judges
//! it, from the knowledge base's copy of auditwheel's policies: the most compatible policy whose
//! symbol versions hold every version a file needs (`.gnu.version_r`, the dynamic loader's own
//! left out), and whose library list holds every library a file needs that the wheel does not
//! carry. Libraries left to a peer package are not the wheel's to carry: a torch extension needs
//! torch's `libc10.so` and `libtorch*.so` from the torch it is loaded into, which is what
//! `auditwheel repair --exclude` says for them.

use super::dynamic::{self, DynamicInfo};
use crate::kb::kb;
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::collections::BTreeSet;

/// ELF's machine number for x86_64, the one architecture the policies are kept for.
const EM_X86_64: u16 = 62;

/// What a wheel's files allow.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlatformTag {
    /// `manylinux_2_34_x86_64`, or `linux_x86_64` when no policy holds (not publishable on PyPI).
    pub tag: String,
    /// The policy the symbol versions alone allow (auditwheel's `sym_tag`).
    pub symbol_tag: String,
    /// The versions the next more compatible policy lacks: why the tag is not older.
    pub limited_by: Vec<String>,
    /// Libraries a file needs that no policy from the symbols' one on lists, the wheel does not
    /// carry and no peer provides: each keeps the wheel at `linux_x86_64`.
    pub external: Vec<String>,
    /// Libraries left to a peer package (torch's), as `auditwheel repair --exclude` leaves them.
    pub left_to_peer: Vec<String>,
}

/// Whether a library is torch's own (`libc10.so`, `libtorch_cpu.so`, `libtorch_cuda.so`, …),
/// which an extension takes from the torch it is loaded into.
pub fn is_torch_library_name(name: &str) -> bool {
    (name.starts_with("libtorch") || name.starts_with("libc10"))
        && (name.ends_with(".so") || name.contains(".so."))
}

/// auditwheel skips the dynamic loader's versions (`ld-linux-x86-64.so.2`): every glibc has them.
fn is_dynamic_loader(name: &str) -> bool {
    name.contains("ld-linux") || name == "ld64.so.1" || name == "ld64.so.2"
}

/// What a wheel's ELF files need, gathered one file at a time, so that a wheel's members are
/// never all held at once.
#[derive(Debug, Default)]
struct Needs {
    /// The base names of the files the wheel holds (a library it carries is not external).
    carried: BTreeSet<String>,
    versions: BTreeSet<String>,
    libraries: BTreeSet<String>,
}

impl Needs {
    fn add(&mut self, name: &str, info: &DynamicInfo<'_>) -> Result<()> {
        if info.machine != EM_X86_64 || !info.is_64 {
            bail!("{name} is not an x86_64 ELF file (machine {}): archsmith keeps the manylinux policies of x86_64 only", info.machine);
        }
        self.carried
            .insert(name.rsplit('/').next().unwrap_or(name).to_string());
        for need in (info.version_needs.iter()).filter(|n| !is_dynamic_loader(n.file)) {
            (self.versions).extend(need.versions.iter().map(|(v, _)| v.to_string()));
        }
        (self.libraries).extend(info.needed.iter().map(|l| l.to_string()));
        Ok(())
    }

    /// The tag; `peer` tells a library a peer package provides.
    fn tag(self, peer: &dyn Fn(&str) -> bool) -> PlatformTag {
        let kb = kb();
        let policies = kb.manylinux_policies();
        let allows_all = |p: &crate::kb::manylinux_policies::ManylinuxPolicyRow| {
            self.versions.iter().all(|v| kb.manylinux_allows(p, v))
        };
        let chosen = policies.iter().position(|p| allows_all(p));
        let symbol_tag = chosen.map_or_else(|| "linux_x86_64".to_string(), |i| policies[i].tag());
        // The versions that keep the tag from the next more compatible policy.
        let stricter = match chosen {
            Some(0) => None,
            Some(i) => Some(policies[i - 1]),
            None => policies.last().copied(),
        };
        let limited_by = stricter.map_or_else(Vec::new, |p| {
            (self.versions.iter())
                .filter(|v| !kb.manylinux_allows(p, v))
                .cloned()
                .collect()
        });
        let carried = &self.carried;
        let (left_to_peer, others): (Vec<String>, Vec<String>) = (self.libraries.into_iter())
            .filter(|l| !is_dynamic_loader(l) && !carried.contains(l))
            .partition(|l| peer(l));
        // The tag is the less compatible of the symbols' policy and the first policy, from that
        // one on, whose list holds every library left (libmvec is on the lists from 2_24).
        let lists = |l: &String, k: usize| policies[k].libraries.contains(l);
        let (tag, external) = match chosen {
            Some(i) => match (i..policies.len()).find(|&k| others.iter().all(|l| lists(l, k))) {
                Some(k) => (policies[k].tag(), Vec::new()),
                None => {
                    let off = others
                        .into_iter()
                        .filter(|l| !(i..policies.len()).any(|k| lists(l, k)));
                    ("linux_x86_64".to_string(), off.collect())
                }
            },
            None => ("linux_x86_64".to_string(), Vec::new()),
        };
        PlatformTag {
            tag,
            symbol_tag,
            limited_by,
            external,
            left_to_peer,
        }
    }
}

/// The tag of the ELF files `files` (`(name in the wheel, info)`) of one wheel; `peer` tells a
/// library a peer package provides.
pub fn platform_tag(
    files: &[(String, DynamicInfo<'_>)],
    peer: &dyn Fn(&str) -> bool,
) -> Result<PlatformTag> {
    let mut needs = Needs::default();
    for (name, info) in files {
        needs.add(name, info)?;
    }
    Ok(needs.tag(peer))
}

/// The tag of the wheel at `path`, torch's libraries left to torch; its shared objects read one
/// at a time.
pub fn of_wheel(path: &std::path::Path) -> Result<PlatformTag> {
    let mut wheel = crate::wheel::Wheel::open(path)?;
    let names: Vec<String> = wheel
        .names()
        .filter(|n| super::input::is_shared_object_name(n))
        .map(str::to_string)
        .collect();
    let mut needs = Needs::default();
    for name in names {
        let bytes = wheel.read(&name)?;
        let info = dynamic::read(&bytes)
            .with_context(|| format!("{} in {}: not a readable ELF file", name, path.display()))?;
        needs.add(&name, &info)?;
    }
    Ok(needs.tag(&is_torch_library_name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::binary::dynamic::VersionNeed;

    fn file<'a>(needed: &[&'a str], needs: &[(&'a str, &[&'a str])]) -> (String, DynamicInfo<'a>) {
        let info = DynamicInfo {
            is_64: true,
            machine: EM_X86_64,
            needed: needed.to_vec(),
            version_needs: needs
                .iter()
                .map(|(f, vs)| VersionNeed {
                    file: f,
                    versions: vs.iter().map(|v| (*v, false)).collect(),
                })
                .collect(),
            ..Default::default()
        };
        ("pkg/_C.abi3.so".to_string(), info)
    }

    /// The tags auditwheel 6.8.2's policies give (its `sym_tag` for these version sets, read from
    /// its policy file: GLIBC_2.34 first in manylinux_2_34, GLIBCXX_3.4.30 in 2_35, …).
    #[test]
    fn the_most_compatible_policy_that_holds_every_version() {
        let none = |_: &str| false;
        let tag = |needs: &[(&str, &[&str])]| {
            let f = file(&["libc.so.6", "libstdc++.so.6"], needs);
            platform_tag(&[f], &none).unwrap()
        };
        let t = tag(&[("libc.so.6", &["GLIBC_2.2.5", "GLIBC_2.14", "GLIBC_2.17"])]);
        assert_eq!(t.tag, "manylinux_2_17_x86_64");
        assert_eq!(t.limited_by, ["GLIBC_2.14", "GLIBC_2.17"]);
        let t = tag(&[
            ("libc.so.6", &["GLIBC_2.2.5", "GLIBC_2.34", "GLIBC_2.32"]),
            ("libstdc++.so.6", &["GLIBCXX_3.4.21", "CXXABI_1.3.9"]),
            ("ld-linux-x86-64.so.2", &["GLIBC_2.99"]),
        ]);
        assert_eq!(t.tag, "manylinux_2_34_x86_64", "{t:?}");
        assert_eq!(t.limited_by, ["GLIBC_2.32", "GLIBC_2.34"]);
        assert_eq!(
            tag(&[("libstdc++.so.6", &["GLIBCXX_3.4.30"])]).tag,
            "manylinux_2_35_x86_64"
        );
        assert_eq!(
            tag(&[("libstdc++.so.6", &["CXXABI_TM_1"])]).tag,
            "manylinux_2_17_x86_64"
        );
        assert_eq!(
            tag(&[("libc.so.6", &["GLIBC_PRIVATE"])]).tag,
            "linux_x86_64"
        );
        // 2.37 is no version of any x86_64 policy's list: the newest policy takes it.
        assert_eq!(tag(&[("libc.so.6", &["GLIBC_2.37"])]).tag, "linux_x86_64");
        assert_eq!(
            tag(&[("libc.so.6", &["GLIBC_2.38"])]).tag,
            "manylinux_2_38_x86_64"
        );
    }

    #[test]
    fn libraries_outside_the_list_keep_a_wheel_at_linux_unless_a_peer_provides_them() {
        let f = file(
            &[
                "libc10.so",
                "libtorch_cpu.so",
                "libcudart.so.12",
                "libm.so.6",
                "libhelper.so",
            ],
            &[("libc.so.6", &["GLIBC_2.17"])],
        );
        let helper = file(&[], &[]);
        let helper = ("pkg.libs/libhelper.so".to_string(), helper.1);
        let t = platform_tag(&[f.clone(), helper], &is_torch_library_name).unwrap();
        assert_eq!(t.tag, "linux_x86_64");
        assert_eq!(t.symbol_tag, "manylinux_2_17_x86_64");
        assert_eq!(t.external, ["libcudart.so.12"]);
        assert_eq!(t.left_to_peer, ["libc10.so", "libtorch_cpu.so"]);
        // A library on the lists of later policies only moves the tag to the first of them.
        let mvec = file(&["libmvec.so.1"], &[("libc.so.6", &["GLIBC_2.17"])]);
        let t = platform_tag(&[mvec], &is_torch_library_name).unwrap();
        assert_eq!(
            (t.symbol_tag.as_str(), t.tag.as_str()),
            ("manylinux_2_17_x86_64", "manylinux_2_24_x86_64")
        );
        let every = |_: &str| true;
        assert_eq!(
            platform_tag(&[f], &every).unwrap().tag,
            "manylinux_2_17_x86_64"
        );
    }

    #[test]
    fn another_machine_is_refused_by_name() {
        let (n, mut info) = file(&[], &[]);
        info.machine = 183;
        let e = platform_tag(&[(n, info)], &|_| false)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("pkg/_C.abi3.so is not an x86_64 ELF file (machine 183)"),
            "{e}"
        );
    }
}
