//! Which kernels a fatbin container holds: the `.text.NAME` sections of its first cubin, read on
//! request (one decompression per container asked for). Used to say *what* is at risk when a
//! library covers a GPU only in some of its containers (compilation units): the kernels of the
//! others cannot launch there.

use super::error::Error;
use super::fatbin::{self, Kind};
use super::{audit_elf, elf};
use std::collections::{BTreeMap, BTreeSet};

/// Kernel names (mangled, as in the cubin) of each container in `wanted`, from its first cubin.
/// Containers with no cubin (PTX only) get an empty list.
pub fn container_kernels(
    data: &[u8],
    wanted: &BTreeSet<usize>,
) -> Result<BTreeMap<usize, Vec<String>>, Error> {
    let mut out = BTreeMap::new();
    let audit = audit_elf(data)?;
    let Some(counted) = audit.counted() else {
        return Ok(out);
    };
    let file = elf::Elf::parse(data)?;
    let Some(sec) = file.section_by_name(counted.name.as_bytes())? else {
        return Ok(out);
    };
    for (index, container) in fatbin::containers(sec.data, sec.offset).enumerate() {
        if !wanted.contains(&index) {
            continue;
        }
        let container = container?;
        let mut names = Vec::new();
        for entry in container.entries() {
            let entry = entry?;
            let cubin = match entry.kind {
                Kind::Elf => entry.decompress()?.into_owned(),
                Kind::Concat => {
                    let Some(sub) = entry
                        .sub_entries()?
                        .into_iter()
                        .find(|s| s.kind == Kind::Elf)
                    else {
                        continue;
                    };
                    let blob = entry.decompress()?;
                    elf::range(
                        &blob,
                        sub.blob_offset,
                        sub.size,
                        "concatenated sub-entry",
                        sub.offset,
                    )?
                    .to_vec()
                }
                _ => continue,
            };
            names = kernel_names(&cubin)?;
            break;
        }
        out.insert(index, names);
    }
    Ok(out)
}

/// The kernels of one cubin: its `.text.NAME` sections.
pub fn kernel_names(cubin: &[u8]) -> Result<Vec<String>, Error> {
    let file = elf::Elf::parse(cubin)?;
    let mut names = Vec::new();
    for section in file.sections() {
        let section = section?;
        if let Some(name) = section.name.strip_prefix(b".text.") {
            names.push(String::from_utf8_lossy(name).into_owned());
        }
    }
    Ok(names)
}

/// A readable short name for a mangled kernel: the innermost identifier of `_Z<n>name…` or
/// `_ZN<n>a<n>b…E…` (`zgetf2_nopiv_batched_kernel`, `build_trsm_ptr_kernel`); the name itself
/// when it is not mangled.
pub fn short_name(mangled: &str) -> &str {
    let Some(rest) = mangled.strip_prefix("_Z") else {
        return mangled;
    };
    let mut rest = rest.strip_prefix('N').unwrap_or(rest);
    let mut last = None;
    loop {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            break;
        }
        let Ok(len) = rest[..digits].parse::<usize>() else {
            break;
        };
        let Some(ident) = rest.get(digits..digits + len) else {
            break;
        };
        last = Some(ident);
        rest = &rest[digits + len..];
    }
    last.unwrap_or(mangled)
}

#[cfg(test)]
mod tests {
    use super::short_name;

    #[test]
    fn short_names_of_mangled_kernels() {
        assert_eq!(
            short_name("_Z27zgetf2_nopiv_batched_kernelILi32ELi32EEviPP7double2iiiPii"),
            "zgetf2_nopiv_batched_kernel"
        );
        assert_eq!(
            short_name("_ZN2at6native52_GLOBAL__N__3a4d9763_19_LURecBlas3Kernel_cu_2a8e2ea221build_trsm_ptr_kernelIN3c107complexIfEEEEvPT_liiPS7_S8_ii"),
            "build_trsm_ptr_kernel"
        );
        assert_eq!(short_name("plain_c_kernel"), "plain_c_kernel");
        assert_eq!(short_name("_Z999x"), "_Z999x");
    }
}
