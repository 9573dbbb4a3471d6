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

/// The wheel at `path` with platform tag `platform` (`manylinux_2_34_x86_64`): the file name's
/// last tag, every `Tag:` line of its `.dist-info/WHEEL`, and that file's line of `RECORD` (hash
/// and size) rewritten; the other members copied as they are. Written beside it and renamed into
/// place; the old file goes. Returns the new path (the same when the tag already is `platform`).
pub fn retag_platform(path: &Path, platform: &str) -> Result<std::path::PathBuf> {
    let file_name = path
        .file_name()
        .and_then(|n| n.to_str())
        .with_context(|| format!("{}: no wheel file name", path.display()))?;
    let stem = file_name.strip_suffix(".whl").with_context(|| {
        format!("{file_name} is not a wheel file name (NAME-VER-PY-ABI-PLAT.whl)")
    })?;
    let (head, old) = stem
        .rsplit_once('-')
        .with_context(|| format!("{file_name} has no platform tag"))?;
    if old == platform {
        return Ok(path.to_path_buf());
    }
    let dest = path.with_file_name(format!("{head}-{platform}.whl"));
    let partial = path.with_file_name(format!(
        ".{head}-{platform}.whl.partial-{}",
        std::process::id()
    ));
    let result = write_retagged(path, &partial, platform);
    if let Err(e) = result {
        let _ = std::fs::remove_file(&partial);
        return Err(e);
    }
    std::fs::rename(&partial, &dest)
        .with_context(|| format!("moving the wheel to {}", dest.display()))?;
    std::fs::remove_file(path).with_context(|| format!("removing {}", path.display()))?;
    Ok(dest)
}

fn write_retagged(path: &Path, out: &Path, platform: &str) -> Result<()> {
    let mut src = Wheel::open(path)?;
    let shown = path.display().to_string();
    let wheel_member = src
        .names()
        .find(|n| n.ends_with(".dist-info/WHEEL") && n.matches('/').count() == 1)
        .map(str::to_string)
        .with_context(|| format!("{shown} has no NAME.dist-info/WHEEL"))?;
    let record_member = wheel_member.replace("/WHEEL", "/RECORD");
    let metadata = String::from_utf8(src.read(&wheel_member)?)
        .with_context(|| format!("{wheel_member} in {shown} is not UTF-8"))?;
    let retagged: String = metadata
        .lines()
        .map(
            |l| match l.strip_prefix("Tag: ").and_then(|t| t.rsplit_once('-')) {
                Some((py_abi, _)) => format!("Tag: {py_abi}-{platform}\n"),
                None => format!("{l}\n"),
            },
        )
        .collect();
    let record = String::from_utf8(src.read(&record_member)?)
        .with_context(|| format!("{record_member} in {shown} is not UTF-8"))?;
    let record: String = record
        .lines()
        .map(
            |l| match l.split(',').next() == Some(wheel_member.as_str()) {
                true => format!(
                    "{wheel_member},{},{}\n",
                    record_hash(retagged.as_bytes()),
                    retagged.len()
                ),
                false => format!("{l}\n"),
            },
        )
        .collect();
    let mut z = zip::ZipWriter::new(
        File::create(out).with_context(|| format!("creating {}", out.display()))?,
    );
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    for i in 0..src.zip.len() {
        let entry = src
            .zip
            .by_index_raw(i)
            .with_context(|| format!("reading {shown}"))?;
        let name = entry.name().to_string();
        if name == wheel_member || name == record_member {
            continue;
        }
        z.raw_copy_file(entry)
            .with_context(|| format!("copying {name} of {shown}"))?;
    }
    use std::io::Write;
    z.start_file(wheel_member.as_str(), options)?;
    z.write_all(retagged.as_bytes())?;
    z.start_file(record_member.as_str(), options)?;
    z.write_all(record.as_bytes())?;
    z.finish()
        .with_context(|| format!("writing {}", out.display()))?;
    Ok(())
}

/// RECORD's hash of `data` (PEP 376/427): `sha256=` and the digest in URL-safe base64, unpadded.
fn record_hash(data: &[u8]) -> String {
    use base64::Engine;
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(data);
    format!(
        "sha256={}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest)
    )
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

    #[test]
    fn a_retagged_wheel_names_the_platform_in_its_file_name_wheel_and_record() {
        // PEP 376's own example: the empty file's hash.
        assert_eq!(
            record_hash(b""),
            "sha256=47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU"
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x-1.0-cp310-abi3-linux_x86_64.whl");
        let metadata = "Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: cp310-abi3-linux_x86_64\n";
        let mut z = zip::ZipWriter::new(File::create(&path).unwrap());
        for (name, data) in [
            ("x/_C.abi3.so", "elf"),
            ("x-1.0.dist-info/WHEEL", metadata),
            ("x-1.0.dist-info/RECORD", "x/_C.abi3.so,sha256=a,3\nx-1.0.dist-info/WHEEL,sha256=b,70\nx-1.0.dist-info/RECORD,,\n"),
        ] {
            z.start_file(name, zip::write::SimpleFileOptions::default()).unwrap();
            z.write_all(data.as_bytes()).unwrap();
        }
        z.finish().unwrap();
        let new = retag_platform(&path, "manylinux_2_34_x86_64").unwrap();
        assert_eq!(
            new.file_name().unwrap(),
            "x-1.0-cp310-abi3-manylinux_2_34_x86_64.whl"
        );
        assert!(!path.exists());
        let wheel = String::from_utf8(read_member(&new, "x-1.0.dist-info/WHEEL").unwrap()).unwrap();
        assert!(
            wheel.ends_with("Tag: cp310-abi3-manylinux_2_34_x86_64\n"),
            "{wheel}"
        );
        let record =
            String::from_utf8(read_member(&new, "x-1.0.dist-info/RECORD").unwrap()).unwrap();
        let line = format!(
            "x-1.0.dist-info/WHEEL,{},{}",
            record_hash(wheel.as_bytes()),
            wheel.len()
        );
        assert!(record.lines().any(|l| l == line), "{record}");
        assert!(record.starts_with("x/_C.abi3.so,sha256=a,3\n"), "{record}");
        assert_eq!(read_member(&new, "x/_C.abi3.so").unwrap(), b"elf");
        // Already so: nothing is written.
        assert_eq!(retag_platform(&new, "manylinux_2_34_x86_64").unwrap(), new);
    }
}
