//! Decompresses and writes the images of a file (`verify binary --extract DIR`).

use super::error::Error;
use super::fatbin::{self, Kind};
use super::{audit_elf, elf, ImageArch};
use std::path::{Path, PathBuf};

/// Calls `visit(kind, arch, bytes)` for every cubin, PTX and IR image of the counted section, in
/// file order, with its payload decompressed. Concatenated entries are decompressed once and split.
pub fn for_each_image(
    data: &[u8],
    mut visit: impl FnMut(Kind, ImageArch, &[u8]),
) -> Result<(), Error> {
    let audit = audit_elf(data)?;
    let Some(counted) = audit.counted() else {
        return Ok(());
    };
    let elf = elf::Elf::parse(data)?;
    let Some(sec) = elf.section_by_name(counted.name.as_bytes())? else {
        return Ok(());
    };
    for c in fatbin::containers(sec.data, sec.offset) {
        for e in c?.entries() {
            let e = e?;
            match e.kind {
                Kind::Elf | Kind::Ptx | Kind::Ir => visit(e.kind, e.arch, &e.decompress()?),
                Kind::Concat => {
                    let subs = e.sub_entries()?;
                    let blob = e.decompress()?;
                    for s in subs {
                        let part = elf::range(
                            &blob,
                            s.blob_offset,
                            s.size,
                            "concatenated sub-entry",
                            s.offset,
                        )?;
                        visit(s.kind, s.arch, part);
                    }
                }
                Kind::Unknown(_) => {}
            }
        }
    }
    Ok(())
}

/// Why extraction stopped.
#[derive(Debug, thiserror::Error)]
pub enum ExtractError {
    #[error("{0}")]
    Read(#[from] Error),
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Writes every image of `data` under `dir` as `<stem>.<n>.sm_XX.cubin`, `<stem>.<n>.compute_XX.ptx`
/// or `<stem>.<n>.lto_XX.nvvm` (numbered per kind from 1, like cuobjdump). Returns the paths written.
pub fn extract_elf(data: &[u8], dir: &Path, stem: &str) -> Result<Vec<PathBuf>, ExtractError> {
    let dir = fresh_dir(dir)?;
    let dir = dir.as_path();
    let mut written = Vec::new();
    let mut counters = [0usize; 3];
    let mut failure = None;
    for_each_image(data, |kind, arch, bytes| {
        if failure.is_some() {
            return;
        }
        let (slot, ext) = match kind {
            Kind::Elf => (0, "cubin"),
            Kind::Ptx => (1, "ptx"),
            _ => (2, "nvvm"),
        };
        // A PTX payload is a C string padded with NULs; ptxas stops at the first NUL ("Unexpected
        // EOF"), so the file gets the text only, as cuobjdump's `-xptx` writes it.
        // A cubin of a concatenated entry is followed by alignment padding: cut at its own end.
        let bytes = match kind {
            Kind::Ptx => &bytes[..bytes.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1)],
            Kind::Elf => match elf::Elf::parse(bytes).and_then(|e| e.extent()) {
                Ok(end) => &bytes[..end as usize],
                Err(_) => bytes,
            },
            _ => bytes,
        };
        counters[slot] += 1;
        let path = dir.join(format!(
            "{stem}.{}.{}.{ext}",
            counters[slot],
            arch.name(kind)
        ));
        // `create_new`: never through a symlink or over a file that is already there.
        let wrote = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .and_then(|mut f| std::io::Write::write_all(&mut f, bytes));
        match wrote {
            Ok(()) => written.push(path),
            Err(source) => failure = Some(ExtractError::Write { path, source }),
        }
    })?;
    match failure {
        Some(f) => Err(f),
        None => Ok(written),
    }
}

/// A new, real directory for one input's images: `dir`, else `dir-2`, `dir-3`, … when a directory,
/// file or symlink of that name is already there (two inputs named `k.so`, an earlier run, a planted
/// link), so no input's images overwrite another's or land outside the extract directory.
fn fresh_dir(dir: &Path) -> Result<PathBuf, ExtractError> {
    let err = |path: &Path, source| ExtractError::Write {
        path: path.to_path_buf(),
        source,
    };
    if let Some(parent) = dir.parent() {
        std::fs::create_dir_all(parent).map_err(|e| err(parent, e))?;
    }
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    for n in 1..10_000 {
        let candidate = if n == 1 {
            dir.to_path_buf()
        } else {
            dir.with_file_name(format!("{name}-{n}"))
        };
        match std::fs::create_dir(&candidate) {
            Ok(()) => return Ok(candidate),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(err(&candidate, e)),
        }
    }
    Err(err(
        dir,
        std::io::Error::other("10,000 directories of that name already exist"),
    ))
}

/// Keeps `[A-Za-z0-9._-]`, maps everything else (including `/`) to `_`, and never yields `.`/`..`.
pub fn safe_component(s: &str) -> String {
    let out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.is_empty() || out.chars().all(|c| c == '.') {
        format!("_{out}")
    } else {
        out
    }
}
