//! What each torch release's own libraries export, read from its PyPI wheel once and kept.
//!
//! A verdict over a range of releases ("loads on torch 2.11–2.15") must not need an env of each:
//! the symbols a release's `torch/lib/libtorch*.so` and `libc10*.so` export are read from the
//! Linux x86_64 wheel of PyPI's default variant — each library streamed through one ranged
//! download and inflated to a temporary file ([`crate::pypi::Pypi::span_to_file`], the zip directory read once), its dynamic
//! symbols read with [`crate::binary::dynamic`] — and kept as one gzip'd list per release under
//! [`crate::paths::torch_exports_dir`]. A later check, or one with no network, reads the list.
//! The release's CUDA is the knowledge base's `pypi_cuda` for it. Every library but
//! `libtorch_python` is the same file in each CPython's wheel of a release; that one binds CPython
//! and differs by a few names (8 of 2,441 for 2.15.0 between cp311 and cp315): the list is the
//! newest CPython's.

use crate::kb::kb;
use crate::version::Version;
use anyhow::{anyhow, bail, Context, Result};
use std::collections::HashSet;
use std::io::{BufRead, Write};
use std::path::PathBuf;

/// The first line of a kept list; a list of another format is read again from PyPI.
const FORMAT: &str = "archsmith torch exports 1";

/// The exports of one torch release's libraries.
#[derive(Debug, Clone)]
pub struct ReleaseExports {
    pub torch: Version,
    /// `torch.version.cuda` of PyPI's default wheel (the knowledge base's row).
    pub cuda: Option<Version>,
    /// The wheel the names were read from.
    pub wheel: String,
    /// Each library's file name and the names it exports (defined, not hidden).
    libs: Vec<(String, HashSet<Box<str>>)>,
}

impl ReleaseExports {
    /// The library of this release that exports `name`.
    pub fn exporter(&self, name: &str) -> Option<&str> {
        self.libs
            .iter()
            .find(|(_, names)| names.contains(name))
            .map(|(lib, _)| lib.as_str())
    }

    /// The libraries read, by file name.
    pub fn libraries(&self) -> impl Iterator<Item = &str> {
        self.libs.iter().map(|(l, _)| l.as_str())
    }

    /// What the library `lib` exports.
    pub fn names(&self, lib: &str) -> Option<&HashSet<Box<str>>> {
        self.libs.iter().find(|(l, _)| l == lib).map(|(_, n)| n)
    }

    /// The release's exports: the kept list, else read from PyPI (and kept). `say` is told
    /// before a release is downloaded.
    pub fn of(torch: &Version, say: &dyn Fn(&str)) -> Result<ReleaseExports> {
        let path = kept_path(torch);
        if let Ok(found) = read_kept(&path) {
            if &found.torch == torch {
                return Ok(found);
            }
        }
        say(&format!(
            "reading torch {torch}'s exports from its PyPI wheel (once; kept in {})",
            path.display()
        ));
        let found = from_pypi(torch)?;
        write_kept(&path, &found)?;
        Ok(found)
    }
}

/// The releases of the knowledge base that `spec` admits (`torch>=2.11,<2.16`, or the same
/// without the name), oldest first; an error saying which releases exist when none does.
pub fn releases_in(spec: &str) -> Result<Vec<Version>> {
    let text = spec.trim();
    let text = text.strip_prefix("torch").unwrap_or(text).trim();
    let specifiers: pep440_rs::VersionSpecifiers = text.parse().map_err(|e| {
        anyhow!(
            "--target {spec:?}: not a torch version range ({e}); write e.g. 'torch>=2.11,<2.16'"
        )
    })?;
    let known: Vec<Version> = kb().torch.iter().map(|r| r.version.clone()).collect();
    let mut admitted: Vec<Version> = known
        .iter()
        .filter(|v| {
            v.to_string()
                .parse::<pep440_rs::Version>()
                .is_ok_and(|pv| specifiers.contains(&pv))
        })
        .cloned()
        .collect();
    admitted.sort();
    if admitted.is_empty() {
        let (lo, hi) = (known.iter().min(), known.iter().max());
        bail!(
            "--target {spec:?} admits no torch release archsmith knows ({} … {}); widen the range",
            lo.map_or("?".into(), ToString::to_string),
            hi.map_or("?".into(), ToString::to_string)
        );
    }
    Ok(admitted)
}

fn kept_path(torch: &Version) -> PathBuf {
    crate::paths::torch_exports_dir().join(format!("torch-{torch}.exports.gz"))
}

/// Whether a file of torch's `lib/` is one of torch's own libraries (not libgomp, CUDA's, …).
fn is_torch_library(member: &str) -> bool {
    member.strip_prefix("torch/lib/").is_some_and(|name| {
        !name.contains('/') && crate::binary::platform_tag::is_torch_library_name(name)
    })
}

fn from_pypi(torch: &Version) -> Result<ReleaseExports> {
    let pypi = crate::pypi::Pypi::new();
    let files = pypi.files("torch")?;
    let wheel = crate::pypi::linux_wheel(&files, torch)
        .ok_or_else(|| anyhow!("PyPI has no Linux x86_64 wheel of torch {torch}"))?;
    let members = pypi.member_spans(wheel, is_torch_library)?;
    if members.is_empty() {
        bail!("{} holds no torch/lib/libtorch*.so", wheel.filename);
    }
    let scratch = tempfile::tempdir().context("creating a directory for torch's libraries")?;
    let mut libs = Vec::new();
    for (member, span) in &members {
        let file = scratch.path().join("lib.so");
        pypi.span_to_file(wheel, member, *span, &file)?;
        let names = exported_names(&file).with_context(|| {
            format!(
                "reading the dynamic symbols of {member} in {}",
                wheel.filename
            )
        })?;
        let _ = std::fs::remove_file(&file);
        let lib = member.rsplit('/').next().unwrap_or(member).to_string();
        libs.push((lib, names));
    }
    let cuda = kb().torch_row(torch).and_then(|r| r.pypi_cuda.clone());
    Ok(ReleaseExports {
        torch: torch.clone(),
        cuda,
        wheel: wheel.filename.clone(),
        libs,
    })
}

/// The names `path` exports to the dynamic linker: defined, at their default version.
fn exported_names(path: &std::path::Path) -> Result<HashSet<Box<str>>> {
    let file = std::fs::File::open(path)?;
    // SAFETY: the file is this process's own temporary copy; nothing else writes it.
    let map = unsafe { memmap2::Mmap::map(&file)? };
    let info = crate::binary::dynamic::read(&map)?;
    Ok(info
        .defined()
        .filter(|s| !s.hidden)
        .map(|s| Box::from(s.name))
        .collect())
}

fn write_kept(path: &std::path::Path, e: &ReleaseExports) -> Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| anyhow!("{} has no parent directory", path.display()))?;
    fs_err::create_dir_all(dir)?;
    let tmp = tempfile::NamedTempFile::new_in(dir)?;
    let mut gz = flate2::write::GzEncoder::new(
        std::io::BufWriter::new(tmp.as_file()),
        flate2::Compression::default(),
    );
    writeln!(gz, "{FORMAT}")?;
    writeln!(gz, "torch {}", e.torch)?;
    if let Some(c) = &e.cuda {
        writeln!(gz, "cuda {c}")?;
    }
    writeln!(gz, "wheel {}", e.wheel)?;
    for (lib, names) in &e.libs {
        writeln!(gz, "lib {lib}")?;
        let mut sorted: Vec<&str> = names.iter().map(|n| &**n).collect();
        sorted.sort_unstable();
        for n in sorted {
            writeln!(gz, " {n}")?;
        }
    }
    gz.finish()?.flush()?;
    tmp.persist(path)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

fn read_kept(path: &std::path::Path) -> Result<ReleaseExports> {
    let file = std::fs::File::open(path)?;
    let reader = std::io::BufReader::new(flate2::read::GzDecoder::new(file));
    let mut lines = reader.lines();
    let first = lines.next().transpose()?;
    if first.as_deref() != Some(FORMAT) {
        bail!("{} is not a list of this format", path.display());
    }
    let (mut torch, mut cuda, mut wheel) = (None, None, String::new());
    let mut libs: Vec<(String, HashSet<Box<str>>)> = Vec::new();
    for line in lines {
        let line = line?;
        if let Some(name) = line.strip_prefix(' ') {
            let (_, names) = libs
                .last_mut()
                .ok_or_else(|| anyhow!("{}: a name before any `lib`", path.display()))?;
            names.insert(name.into());
        } else if let Some(v) = line.strip_prefix("torch ") {
            torch = Some(v.parse::<Version>()?);
        } else if let Some(v) = line.strip_prefix("cuda ") {
            cuda = Some(v.parse::<Version>()?);
        } else if let Some(v) = line.strip_prefix("wheel ") {
            wheel = v.to_string();
        } else if let Some(v) = line.strip_prefix("lib ") {
            libs.push((v.to_string(), HashSet::new()));
        } else {
            bail!("{}: unexpected line {line:?}", path.display());
        }
    }
    Ok(ReleaseExports {
        torch: torch.ok_or_else(|| anyhow!("{}: no torch line", path.display()))?,
        cuda,
        wheel,
        libs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_torchs_own_libraries_are_read() {
        assert!(is_torch_library("torch/lib/libtorch_cpu.so"));
        assert!(is_torch_library("torch/lib/libc10_cuda.so"));
        assert!(!is_torch_library("torch/lib/libgomp-a34b3233.so.1"));
        assert!(!is_torch_library("torch/lib/libshm/libshm.so"));
        assert!(!is_torch_library(
            "torch/_C.cpython-312-x86_64-linux-gnu.so"
        ));
    }

    #[test]
    fn a_kept_list_reads_back_as_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.exports.gz");
        let e = ReleaseExports {
            torch: "2.15.0".parse().unwrap(),
            cuda: Some("13.2".parse().unwrap()),
            wheel: "torch-2.15.0-cp315-cp315-manylinux_2_28_x86_64.whl".into(),
            libs: vec![
                ("libc10.so".into(), ["_ZN3c105ErrorD2Ev".into()].into()),
                (
                    "libtorch_cpu.so".into(),
                    [
                        "aoti_torch_get_numel".into(),
                        "torch_call_dispatcher".into(),
                    ]
                    .into(),
                ),
            ],
        };
        write_kept(&path, &e).unwrap();
        let back = read_kept(&path).unwrap();
        assert_eq!(back.torch, e.torch);
        assert_eq!(back.cuda, e.cuda);
        assert_eq!(back.wheel, e.wheel);
        assert_eq!(
            back.exporter("aoti_torch_get_numel"),
            Some("libtorch_cpu.so")
        );
        assert_eq!(back.exporter("_ZN3c105ErrorD2Ev"), Some("libc10.so"));
        assert_eq!(back.exporter("memcpy"), None);
        std::fs::write(&path, b"not gzip").unwrap();
        assert!(read_kept(&path).is_err());
    }
}
