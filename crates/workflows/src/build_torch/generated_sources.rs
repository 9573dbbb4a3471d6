//! Preflight for sources generated ahead of time against a library the build may not use. The
//! first one the whole build found: `torch/csrc/jit/serialization/mobile_bytecode_generated.h`
//! is flatc's output, checked in, and opens with a `static_assert` that the flatbuffers headers
//! it is compiled against are the release that generated it. Upstream compiles it against the
//! vendored `third_party/flatbuffers`; a tree that takes its libraries from the system (Debian's
//! strips `third_party/`) compiles it against the system's, and a different release fails at that
//! assertion hours in (step 797 of 2005 on 2 cores, docs/build-torch.md). Debian's packaging
//! regenerates the header with the system's `flatc` before building; this check says so in the
//! first second.

use super::preflight::Check;
use regex::Regex;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

const NAME: &str = "generated sources";

/// A flatbuffers release: major, minor, revision.
type Release = (u32, u32, u32);

fn show(r: Release) -> String {
    format!("{}.{}.{}", r.0, r.1, r.2)
}

/// The release a flatc-generated header was generated for (its `static_assert`).
pub fn generated_for(header: &str) -> Option<Release> {
    static RE: OnceLock<Regex> = OnceLock::new();
    let re = RE.get_or_init(|| {
        Regex::new(
            r"FLATBUFFERS_VERSION_MAJOR\s*==\s*(\d+)\s*&&\s*FLATBUFFERS_VERSION_MINOR\s*==\s*(\d+)\s*&&\s*FLATBUFFERS_VERSION_REVISION\s*==\s*(\d+)",
        )
        .expect("valid regex")
    });
    let c = re.captures(header)?;
    Some((c[1].parse().ok()?, c[2].parse().ok()?, c[3].parse().ok()?))
}

/// The release of a flatbuffers `base.h` (its `#define FLATBUFFERS_VERSION_*`).
pub fn headers_release(base_h: &str) -> Option<Release> {
    let get = |name: &str| -> Option<u32> {
        base_h.lines().find_map(|l| {
            let rest = l.trim().strip_prefix("#define")?.trim_start();
            let value = rest.strip_prefix(name)?;
            value
                .starts_with(char::is_whitespace)
                .then(|| value.trim().parse().ok())?
        })
    };
    Some((
        get("FLATBUFFERS_VERSION_MAJOR")?,
        get("FLATBUFFERS_VERSION_MINOR")?,
        get("FLATBUFFERS_VERSION_REVISION")?,
    ))
}

/// The include directories a system flatbuffers is found in, in the compiler's order after the
/// build's own: CMAKE_PREFIX_PATH's and CONDA_PREFIX's `include`, then the system's.
pub fn system_include_dirs(cmake_prefix_path: Option<&str>) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = cmake_prefix_path
        .unwrap_or_default()
        .split([':', ';'])
        .filter(|p| !p.is_empty())
        .map(|p| Path::new(p).join("include"))
        .collect();
    if let Some(conda) = std::env::var_os("CONDA_PREFIX") {
        dirs.push(Path::new(&conda).join("include"));
    }
    dirs.extend(["/usr/local/include", "/usr/include"].map(PathBuf::from));
    dirs
}

/// Generated headers under `torch/csrc`: files named `*_generated.h` that assert a flatbuffers
/// release, with it.
fn generated_headers(root: &Path) -> Vec<(PathBuf, Release)> {
    let csrc = root.join("torch/csrc");
    if !csrc.is_dir() {
        return Vec::new();
    }
    let mut out: Vec<(PathBuf, Release)> = ignore::WalkBuilder::new(&csrc)
        .standard_filters(false)
        .build()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with("_generated.h"))
        .filter_map(|e| {
            let text = std::fs::read_to_string(e.path()).ok()?;
            Some((e.into_path(), generated_for(&text)?))
        })
        .collect();
    out.sort();
    out
}

/// The flatbuffers headers the build compiles against: the vendored copy when the tree has it
/// (its include directory comes first), else the first system include directory with them.
fn flatbuffers_used(root: &Path, system_dirs: &[PathBuf]) -> Option<(PathBuf, Release)> {
    let vendored = root.join("third_party/flatbuffers/include/flatbuffers/base.h");
    std::iter::once(vendored)
        .chain(system_dirs.iter().map(|d| d.join("flatbuffers/base.h")))
        .find(|p| p.is_file())
        .and_then(|p| {
            let release = headers_release(&std::fs::read_to_string(&p).ok()?)?;
            Some((p, release))
        })
}

/// The generated headers of `root` against the flatbuffers the build will use. `flatc` finds the
/// flatc on PATH with its release, for the fix (asked only when the check fails).
pub fn check(
    root: &Path,
    system_dirs: &[PathBuf],
    flatc: impl FnOnce() -> Option<(PathBuf, Release)>,
) -> Check {
    let headers = generated_headers(root);
    let rel = |p: &Path| p.strip_prefix(root).unwrap_or(p).display().to_string();
    let Some(first) = headers.first() else {
        return Check::ok(NAME, "no flatc-generated headers in torch/csrc");
    };
    let Some((base, used)) = flatbuffers_used(root, system_dirs) else {
        return Check::warn(
            NAME,
            format!(
                "{} was generated for flatbuffers {}, and no flatbuffers headers were found (neither third_party/flatbuffers nor {})",
                rel(&first.0),
                show(first.1),
                system_dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ")
            ),
            format!(
                "bring third_party/flatbuffers (git submodule update --init third_party/flatbuffers), or install flatbuffers {} headers (Debian: libflatbuffers-dev)",
                show(first.1)
            ),
        );
    };
    let wrong: Vec<&(PathBuf, Release)> = headers.iter().filter(|(_, r)| *r != used).collect();
    if wrong.is_empty() {
        return Check::ok(
            NAME,
            format!(
                "{} generated for flatbuffers {}, the release of {}",
                headers
                    .iter()
                    .map(|(p, _)| rel(p))
                    .collect::<Vec<_>>()
                    .join(", "),
                show(used),
                base.display()
            ),
        );
    }
    let (header, made_for) = wrong[0];
    // debian/rules' own command (pytorch 2.6.0+dfsg-7).
    let regenerate = format!(
        "cd {dir} && flatc --cpp --gen-mutable --scoped-enums {fbs}",
        dir = rel(header.parent().unwrap_or(root)),
        fbs = header
            .file_name()
            .map(|n| n.to_string_lossy().replace("_generated.h", ".fbs"))
            .unwrap_or_default(),
    );
    let with_flatc = match flatc() {
        Some((path, r)) if r == used => {
            format!("with {} (flatc {}, matching)", path.display(), show(r))
        }
        Some((path, r)) => format!(
            "with a flatc {} (the one on PATH, {}, is {}; Debian: flatbuffers-compiler)",
            show(used),
            path.display(),
            show(r)
        ),
        None => format!("with flatc {} (Debian: flatbuffers-compiler)", show(used)),
    };
    Check::fail(
        NAME,
        format!(
            "{} was generated for flatbuffers {}, but the build compiles it against flatbuffers {} ({}): it fails at the header's static_assert `Non-compatible flatbuffers version included`, hours in",
            rel(header),
            show(*made_for),
            show(used),
            base.display()
        ),
        format!(
            "regenerate it in the tree, as Debian's packaging does: `{regenerate}` {with_flatc}; or compile against flatbuffers {} (the vendored third_party/flatbuffers at that release)",
            show(*made_for)
        ),
    )
}

/// `flatc --version` of the flatc on PATH (`flatc version 24.3.25`).
pub fn flatc_on_path() -> Option<(PathBuf, Release)> {
    let flatc = crate::process::which("flatc")?;
    let out = crate::process::Cmd::new(&flatc)
        .arg("--version")
        .read()
        .ok()?;
    let v = out.split_whitespace().last()?;
    let mut n = v.split('.').map(|x| x.parse::<u32>().ok());
    Some((flatc, (n.next()??, n.next()??, n.next()??)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GENERATED: &str = "// automatically generated by the FlatBuffers compiler, do not modify\n\n\
#ifndef FLATBUFFERS_GENERATED_MOBILEBYTECODE_TORCH_JIT_MOBILE_SERIALIZATION_H_\n\
#include \"flatbuffers/flatbuffers.h\"\n\n\
// Ensure the included flatbuffers.h is the same version as when this file was\n\
// generated, otherwise it may not be compatible.\n\
static_assert(FLATBUFFERS_VERSION_MAJOR == 23 &&\n              FLATBUFFERS_VERSION_MINOR == 3 &&\n              FLATBUFFERS_VERSION_REVISION == 3,\n             \"Non-compatible flatbuffers version included\");\n";

    fn base_h(v: Release) -> String {
        format!(
            "#ifndef FLATBUFFERS_BASE_H_\n#define FLATBUFFERS_VERSION_MAJOR {}\n#define FLATBUFFERS_VERSION_MINOR {}\n#define FLATBUFFERS_VERSION_REVISION {}\n#define FLATBUFFERS_STRING_EXPAND(X) #X\n",
            v.0, v.1, v.2
        )
    }

    fn tree(
        vendored: Option<Release>,
        system: Option<Release>,
    ) -> (tempfile::TempDir, Vec<PathBuf>) {
        let t = tempfile::tempdir().unwrap();
        let gen = t.path().join("tree/torch/csrc/jit/serialization");
        std::fs::create_dir_all(&gen).unwrap();
        std::fs::write(gen.join("mobile_bytecode_generated.h"), GENERATED).unwrap();
        if let Some(v) = vendored {
            let d = t
                .path()
                .join("tree/third_party/flatbuffers/include/flatbuffers");
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("base.h"), base_h(v)).unwrap();
        }
        let sys = t.path().join("usr/include");
        if let Some(v) = system {
            std::fs::create_dir_all(sys.join("flatbuffers")).unwrap();
            std::fs::write(sys.join("flatbuffers/base.h"), base_h(v)).unwrap();
        }
        (t, vec![sys])
    }

    #[test]
    fn reads_both_sides() {
        assert_eq!(generated_for(GENERATED), Some((23, 3, 3)));
        assert_eq!(headers_release(&base_h((24, 3, 25))), Some((24, 3, 25)));
        assert_eq!(
            headers_release("#define FLATBUFFERS_VERSION_MAJORX 1\n"),
            None
        );
    }

    #[test]
    fn the_system_release_against_a_stripped_tree_fails_with_the_regeneration() {
        let (t, sys) = tree(None, Some((24, 3, 25)));
        let c = check(&t.path().join("tree"), &sys, || {
            Some((PathBuf::from("/usr/bin/flatc"), (24, 3, 25)))
        });
        assert_eq!(c.status, super::super::preflight::Status::Fail, "{c:?}");
        assert!(c.detail.contains("torch/csrc/jit/serialization/mobile_bytecode_generated.h was generated for flatbuffers 23.3.3, but the build compiles it against flatbuffers 24.3.25"), "{}", c.detail);
        let fix = c.fix.unwrap();
        assert!(fix.contains("`cd torch/csrc/jit/serialization && flatc --cpp --gen-mutable --scoped-enums mobile_bytecode.fbs`"), "{fix}");
        assert!(
            fix.contains("with /usr/bin/flatc (flatc 24.3.25, matching)"),
            "{fix}"
        );
    }

    #[test]
    fn the_vendored_copy_comes_first_and_a_match_passes() {
        let (t, sys) = tree(Some((23, 3, 3)), Some((24, 3, 25)));
        let c = check(&t.path().join("tree"), &sys, || None);
        assert_eq!(c.status, super::super::preflight::Status::Ok, "{c:?}");
        assert!(c.detail.contains("flatbuffers 23.3.3"), "{}", c.detail);
        let (t, sys) = tree(None, None);
        let c = check(&t.path().join("tree"), &sys, || None);
        assert_eq!(c.status, super::super::preflight::Status::Warn, "{c:?}");
    }
}
