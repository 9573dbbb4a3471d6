//! Opening wheels (zip archives) for what archsmith reads whole members of: a header from NVIDIA's
//! compiler wheels, an extension's built wheel to unpack and import. Every error names the wheel
//! and the member. (The binary reader maps wheels itself and inflates members in parallel, with
//! its own typed errors: [`crate::binary::input`].)

use anyhow::{Context, Result};
use std::fs::File;
use std::io::{Read, Seek};
use std::path::Path;

/// An open wheel: a file on disk, or any seekable reader (a remote wheel read by ranges,
/// [`crate::pypi`]).
pub struct Wheel<R = File> {
    /// The path or URL errors name.
    name: String,
    zip: zip::ZipArchive<R>,
}

impl Wheel<File> {
    pub fn open(path: &Path) -> Result<Wheel> {
        let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
        Wheel::from_reader(file, &path.display().to_string()).map_err(|e| {
            e.context(format!(
                "delete {} so it is made or downloaded again",
                path.display()
            ))
        })
    }
}

impl<R: Read + Seek> Wheel<R> {
    /// A wheel read from `reader`; `name` is what errors call it.
    pub fn from_reader(reader: R, name: &str) -> Result<Wheel<R>> {
        let zip = zip::ZipArchive::new(reader)
            .with_context(|| format!("{name} is not a readable wheel (zip)"))?;
        Ok(Wheel {
            name: name.to_string(),
            zip,
        })
    }

    /// Member names in archive order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.zip.file_names()
    }

    /// One member's bytes.
    pub fn read(&mut self, member: &str) -> Result<Vec<u8>> {
        let name = &self.name;
        let mut entry = self
            .zip
            .by_name(member)
            .with_context(|| format!("{name} has no {member}"))?;
        let mut buf = Vec::with_capacity(usize::try_from(entry.size()).unwrap_or(0).min(1 << 26));
        entry
            .read_to_end(&mut buf)
            .with_context(|| format!("unpacking {member} from {name}"))?;
        Ok(buf)
    }

    /// Where `member`'s bytes lie in the archive (None when the wheel has no such member): what
    /// reading it without the archive needs, as one ranged download of a remote wheel does.
    pub fn span(&mut self, member: &str) -> Result<Option<MemberSpan>> {
        let Some(index) = self.zip.index_for_name(member) else {
            return Ok(None);
        };
        let name = &self.name;
        let entry = self
            .zip
            .by_index_raw(index)
            .with_context(|| format!("reading the header of {member} in {name}"))?;
        let deflated = match entry.compression() {
            zip::CompressionMethod::Stored => false,
            zip::CompressionMethod::Deflated => true,
            other => anyhow::bail!("{member} in {name} is compressed with {other:?}, which archsmith does not read (wheels use deflate)"),
        };
        let data_start = entry
            .data_start()
            .with_context(|| format!("{member} in {name}: no data offset after its header"))?;
        Ok(Some(MemberSpan {
            data_start,
            compressed_size: entry.compressed_size(),
            size: entry.size(),
            crc32: entry.crc32(),
            deflated,
        }))
    }

    /// Unpacks every member under `dir` (the zip crate refuses members that would land outside it).
    pub fn extract_all(&mut self, dir: &Path) -> Result<()> {
        self.zip
            .extract(dir)
            .with_context(|| format!("unpacking {} into {}", self.name, dir.display()))
    }
}

/// Where one member's bytes lie in its archive, and how to check them once read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberSpan {
    /// Offset of the member's (compressed) data in the archive.
    pub data_start: u64,
    pub compressed_size: u64,
    /// Size once inflated.
    pub size: u64,
    pub crc32: u32,
    /// Raw deflate (else stored).
    pub deflated: bool,
}

/// The member part of a file as reports name it (`WHEEL!torch/lib/x.so` gives
/// `torch/lib/x.so`); any other path unchanged.
pub fn member_part(shown: &str) -> &str {
    shown.rsplit_once('!').map_or(shown, |(_, member)| member)
}

/// One member of `wheel`.
pub fn read_member(wheel: &Path, member: &str) -> Result<Vec<u8>> {
    Wheel::open(wheel)?.read(member)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn reads_members_and_names_the_wheel_in_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x-1.0-py3-none-any.whl");
        let mut z = zip::ZipWriter::new(File::create(&path).unwrap());
        z.start_file("x/a.txt", zip::write::SimpleFileOptions::default())
            .unwrap();
        z.write_all(b"hello").unwrap();
        z.finish().unwrap();
        assert_eq!(read_member(&path, "x/a.txt").unwrap(), b"hello");
        let e = format!("{:#}", read_member(&path, "x/b.txt").unwrap_err());
        assert!(e.contains("x-1.0-py3-none-any.whl has no x/b.txt"), "{e}");
        let not_zip = dir.path().join("bad.whl");
        std::fs::write(&not_zip, b"not a zip").unwrap();
        let e = format!("{:#}", Wheel::open(&not_zip).err().unwrap());
        assert!(e.contains("bad.whl is not a readable wheel"), "{e}");
        let out = dir.path().join("out");
        Wheel::open(&path).unwrap().extract_all(&out).unwrap();
        assert_eq!(std::fs::read(out.join("x/a.txt")).unwrap(), b"hello");
    }
}
