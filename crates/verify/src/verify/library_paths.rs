//! A wheel's libraries find each other. A file that needs a library the wheel itself ships
//! (`libtorch_python.so` needs `libtorch.so.2.6` from `torch/lib`) finds it only through its own
//! search path: its DT_RPATH when it has no RUNPATH, then (outside the wheel's control)
//! `LD_LIBRARY_PATH`, then its DT_RUNPATH, then the system's directories. A wheel is installed
//! anywhere, so only an `$ORIGIN`-relative entry reaches its own copy; without one `import`
//! fails with `cannot open shared object file`, or binds another copy found on the system.
//!
//! The first build of Debian's torch tree went the whole way and made exactly such a wheel
//! (Debian's patches empty `CMAKE_INSTALL_RPATH` for `/usr/lib`): this check names the file, what
//! it misses and its search path, read from the audit's ELF files before anything is imported.
//!
//! Not modelled: a loader's DT_RPATH inherited by what it loads (glibc searches it when the needing
//! file has no RUNPATH). Build systems write RUNPATH today; a wheel whose files carry DT_RPATH is
//! reported as it reads, which may be stricter than the loader.

use super::checks::{item, Item, Status};
use super::load_check::linker::expand_search_entry;
use crate::binary::dynamic::Links;
use crate::binary::input::{FileAudit, Outcome};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

const NAME: &str = "library paths";

/// Where an audited file lies: a wheel member's path inside the wheel (`WHEEL!torch/lib/x.so`
/// gives `torch/lib/x.so`), else the path as walked.
fn location(audit_path: &str) -> PathBuf {
    PathBuf::from(crate::wheel::member_part(audit_path))
}

/// `p` with `.` and `..` resolved by name (no file system: wheel members are not files).
fn lexical(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// The directories a file at `file` searches for its libraries, in the loader's order, with
/// `$ORIGIN` resolved: DT_RPATH (only without a RUNPATH), then DT_RUNPATH.
fn search_dirs(file: &Path, links: &Links) -> Vec<PathBuf> {
    // A member at the wheel's root has an empty parent: `.` keeps `$ORIGIN/x` relative.
    let origin = match file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let rpath = if links.runpath.is_empty() {
        &links.rpath[..]
    } else {
        &[]
    };
    rpath
        .iter()
        .chain(&links.runpath)
        // An absolute entry reaches a wheel member never; an installed file, maybe. A relative
        // one without `$ORIGIN` is relative to the process's directory: never.
        .filter(|entry| entry.contains("ORIGIN") || Path::new(entry.as_str()).is_absolute())
        .map(|entry| lexical(&expand_search_entry(entry, origin)))
        .collect()
}

/// What one file's search path cannot reach.
struct Unreached<'a> {
    file: PathBuf,
    links: &'a Links,
    /// The libraries it needs that the wheel ships, by the directories that hold them.
    missing: BTreeMap<PathBuf, Vec<&'a str>>,
}

/// The verdict over every audited ELF file (a wheel's, or a directory's).
pub fn check(audits: &[FileAudit]) -> Item {
    let files: Vec<(PathBuf, &Links)> = audits
        .iter()
        .filter_map(|a| match &a.outcome {
            Outcome::Audited(e) => Some((location(&a.path), e.links.as_ref()?)),
            Outcome::Failed(_) => None,
        })
        .collect();
    let (reached, mut unreached) = resolve(&files);
    if unreached.is_empty() {
        return item(
            NAME,
            Status::Ok,
            match reached {
                0 => "no file needs another of its libraries".to_string(),
                n => format!("every need of its own libraries ({n}) is reached through $ORIGIN"),
            },
        );
    }
    // The worst file first.
    unreached.sort_by(|a, b| {
        let n = |u: &Unreached| u.missing.values().map(Vec::len).sum::<usize>();
        n(b).cmp(&n(a)).then(a.file.cmp(&b.file))
    });
    item(NAME, Status::Fail, failure(&unreached))
}

/// Each file's needs of libraries the wheel ships, against its search path: how many are
/// reached, and the files that miss some.
fn resolve<'a>(files: &'a [(PathBuf, &'a Links)]) -> (usize, Vec<Unreached<'a>>) {
    // Each file name the wheel ships, with the directories it is in.
    let mut shipped: BTreeMap<&str, BTreeSet<PathBuf>> = BTreeMap::new();
    for (file, _) in files {
        if let (Some(name), Some(dir)) = (file.file_name().and_then(|n| n.to_str()), file.parent())
        {
            shipped.entry(name).or_default().insert(dir.to_path_buf());
        }
    }
    let mut reached = 0usize;
    let mut unreached = Vec::new();
    for (file, links) in files {
        let dirs = search_dirs(file, links);
        let mut missing: BTreeMap<PathBuf, Vec<&str>> = BTreeMap::new();
        for needed in &links.needed {
            let Some(holders) = shipped.get(needed.as_str()) else {
                continue;
            };
            if holders.iter().any(|h| dirs.contains(h)) {
                reached += 1;
            } else if let Some(first) = holders.iter().next() {
                missing.entry(first.clone()).or_default().push(needed);
            }
        }
        if !missing.is_empty() {
            unreached.push(Unreached {
                file: file.clone(),
                links,
                missing,
            });
        }
    }
    (reached, unreached)
}

/// The failure's words: the worst file, what it misses, its search path, how many other
/// libraries are alike (copies of one library — a versioned name and its aliases, the same
/// SONAME in one directory — count once), and the fix.
fn failure(unreached: &[Unreached]) -> String {
    let libraries: BTreeSet<(PathBuf, String)> = unreached
        .iter()
        .map(|u| {
            let name = u.links.soname.clone().unwrap_or_else(|| {
                u.file
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default()
            });
            (
                u.file.parent().map(Path::to_path_buf).unwrap_or_default(),
                name,
            )
        })
        .collect();
    let first = &unreached[0];
    let needs = first
        .missing
        .iter()
        .map(|(dir, names)| format!("{} from {}", names.join(", "), dir.display()))
        .collect::<Vec<_>>()
        .join("; ");
    let search = match (first.links.rpath.is_empty(), first.links.runpath.is_empty()) {
        (true, true) => "it has no RUNPATH".to_string(),
        (_, false) => format!("its RUNPATH is `{}`", first.links.runpath.join(":")),
        (false, true) => format!("its RPATH is `{}`", first.links.rpath.join(":")),
    };
    let others = match libraries.len() {
        1 => String::new(),
        n => format!(" ({} more libraries likewise)", n - 1),
    };
    let example = first
        .missing
        .values()
        .flatten()
        .next()
        .copied()
        .unwrap_or_default();
    format!(
        "{} needs {needs}, but {search}{others}: loading it fails with `{example}: cannot open shared object file`, or binds another copy from the system. \
         Fix: link the libraries with an install RPATH of `$ORIGIN` (CMake's CMAKE_INSTALL_RPATH; a tree that sets it empty, as Debian's packaging does for /usr/lib, needs that line back), \
         or rewrite the built files' search path (`patchelf --set-rpath '$ORIGIN' …`)",
        first.file.display(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::binary::ElfAudit;

    fn lib(path: &str, soname: &str, needed: &[&str], runpath: &[&str]) -> FileAudit {
        FileAudit {
            path: format!("/w/x-1.0-cp313-cp313-linux_x86_64.whl!{path}"),
            outcome: Outcome::Audited(ElfAudit {
                links: Some(Links {
                    soname: Some(soname.into()),
                    needed: needed.iter().map(|s| s.to_string()).collect(),
                    rpath: Vec::new(),
                    runpath: runpath.iter().map(|s| s.to_string()).collect(),
                }),
                ..ElfAudit::default()
            }),
        }
    }

    #[test]
    fn origin_entries_resolve_inside_the_wheel() {
        let l = Links {
            runpath: vec![
                "$ORIGIN/lib".into(),
                "${ORIGIN}/../nvidia/x".into(),
                "/src/build/lib".into(),
            ],
            ..Links::default()
        };
        assert_eq!(
            search_dirs(Path::new("torch/_C.so"), &l),
            vec![
                PathBuf::from("torch/lib"),
                PathBuf::from("nvidia/x"),
                PathBuf::from("/src/build/lib")
            ]
        );
        // DT_RPATH is ignored when a RUNPATH is present.
        let l = Links {
            rpath: vec!["$ORIGIN".into()],
            runpath: vec!["/opt".into()],
            ..Links::default()
        };
        assert_eq!(
            search_dirs(Path::new("a/b.so"), &l),
            vec![PathBuf::from("/opt")]
        );
    }

    #[test]
    fn a_library_without_origin_in_its_runpath_fails_naming_what_it_misses() {
        // Debian's torch tree built as a wheel: `_C` reaches torch/lib, torch/lib's libraries
        // have no RUNPATH (three copies of each, as setuptools packs versioned names).
        let mut audits = vec![lib(
            "torch/_C.cpython-313-x86_64-linux-gnu.so",
            "_C.so",
            &["libtorch_python.so.2.6", "libc.so.6"],
            &["$ORIGIN/lib"],
        )];
        for name in [
            "libtorch_python.so",
            "libtorch_python.so.2.6",
            "libtorch_python.so.2.6.0",
        ] {
            audits.push(lib(
                &format!("torch/lib/{name}"),
                "libtorch_python.so.2.6",
                &["libtorch.so.2.6", "libc10.so.2.6", "libstdc++.so.6"],
                &[],
            ));
        }
        audits.push(lib(
            "torch/lib/libtorch.so.2.6",
            "libtorch.so.2.6",
            &["libc10.so.2.6"],
            &[],
        ));
        audits.push(lib("torch/lib/libc10.so.2.6", "libc10.so.2.6", &[], &[]));
        let v = check(&audits);
        assert_eq!(v.status, Status::Fail, "{v:?}");
        assert!(
            v.detail.starts_with("torch/lib/libtorch_python.so needs libtorch.so.2.6, libc10.so.2.6 from torch/lib, but it has no RUNPATH (1 more libraries likewise): loading it fails with `libtorch.so.2.6: cannot open shared object file`"),
            "{}",
            v.detail
        );
        assert!(v.detail.contains("CMAKE_INSTALL_RPATH"), "{}", v.detail);

        // The same wheel linked with `$ORIGIN`, as upstream's CMake does: every need reached.
        for a in &mut audits[1..] {
            if let Outcome::Audited(e) = &mut a.outcome {
                e.links.as_mut().unwrap().runpath = vec!["$ORIGIN".into()];
            }
        }
        let v = check(&audits);
        assert_eq!(v.status, Status::Ok, "{v:?}");
        assert_eq!(
            v.detail,
            "every need of its own libraries (8) is reached through $ORIGIN"
        );
    }

    #[test]
    fn a_build_tree_runpath_does_not_reach_the_installed_copy() {
        let audits = vec![
            lib(
                "pkg/_ext.so",
                "_ext.so",
                &["libpkg.so"],
                &["/tmp/build/lib"],
            ),
            lib("pkg/libpkg.so", "libpkg.so", &[], &[]),
        ];
        let v = check(&audits);
        assert_eq!(v.status, Status::Fail, "{v:?}");
        assert!(
            v.detail.starts_with(
                "pkg/_ext.so needs libpkg.so from pkg, but its RUNPATH is `/tmp/build/lib`:"
            ),
            "{}",
            v.detail
        );
        // Nothing shipped is needed: nothing to reach.
        let v = check(&[lib("pkg/_ext.so", "_ext.so", &["libc.so.6"], &[])]);
        assert_eq!(v.status, Status::Ok);
        assert_eq!(v.detail, "no file needs another of its libraries");
    }
}
