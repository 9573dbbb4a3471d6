//! A `.deb` read as it streams in: its bytes hashed on the way, its `ar` members walked in order,
//! `data.tar.{xz,zst,gz}` decompressed and only the files a caller maps kept. Nothing is stored
//! whole, so an 890 MiB package costs the disk only what is kept; the SHA256 and size the signed
//! index gives are checked at the end and any mismatch refuses the package (the caller writes
//! into a staging directory it throws away on error).

use anyhow::{anyhow, bail, Context, Result};
use fs_err as fs;
use sha2::{Digest, Sha256};
use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};

/// The size and hash the signed index gives for a package.
#[derive(Debug, Clone)]
pub struct Expected<'a> {
    /// For messages: `nvidia-cuda-dev 12.4.127~12.4.1-2`.
    pub what: &'a str,
    pub size: u64,
    pub sha256: &'a str,
}

/// What one package gave.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Extracted {
    /// Files and links written.
    pub kept_files: usize,
    pub kept_bytes: u64,
    /// Bytes of regular files the map left out.
    pub dropped_bytes: u64,
}

/// Counts and hashes what passes through, refusing to read past `limit` bytes (a server that
/// sends more than the index says is answered at once, not after the download).
struct Hashing<R> {
    inner: R,
    hasher: Sha256,
    read: u64,
    limit: u64,
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.read += n as u64;
        if self.read > self.limit {
            return Err(io::Error::other(format!(
                "more than the {} bytes the index lists",
                self.limit
            )));
        }
        Ok(n)
    }
}

/// Where a package's path (`usr/include/cuda.h`, no leading `./`) goes under `dest`, or None to
/// leave it out.
pub type PathMap<'a> = dyn Fn(&str) -> Option<PathBuf> + 'a;

/// Streams the `.deb` from `source`, keeping each data member `map` places under `dest`, then
/// checks size and SHA256 against `expected`. A mismatch is reported before any error the
/// damaged bytes caused while unpacking, since it is the cause.
pub fn extract(
    source: impl Read,
    expected: &Expected,
    map: &PathMap,
    dest: &Path,
    progress: &mut dyn FnMut(u64),
) -> Result<Extracted> {
    let mut reader = Hashing {
        inner: source,
        hasher: Sha256::new(),
        read: 0,
        limit: expected.size,
    };
    let unpacked = unpack(&mut reader, map, dest, progress);
    // Read what the unpacking did not need (or stopped before) so the hash covers the whole file.
    let drained = io::copy(&mut reader, &mut io::sink());
    let got = crate::stamp::hex(&reader.hasher.finalize_reset());
    if reader.read != expected.size || !got.eq_ignore_ascii_case(expected.sha256) {
        bail!(
            "{} is not the package the signed index lists ({} bytes, sha256 {}): got {} bytes, sha256 {got}; refusing it{}",
            expected.what,
            expected.size,
            expected.sha256,
            reader.read,
            drained.err().map(|e| format!(" ({e})")).unwrap_or_default()
        );
    }
    unpacked.with_context(|| format!("unpacking {}", expected.what))
}

fn unpack(
    reader: &mut impl Read,
    map: &PathMap,
    dest: &Path,
    progress: &mut dyn FnMut(u64),
) -> Result<Extracted> {
    let mut archive = ar::Archive::new(reader);
    let mut seen_data = false;
    let mut out = Extracted::default();
    while let Some(entry) = archive.next_entry() {
        let entry = entry.context("reading the .deb's ar members")?;
        let name = String::from_utf8_lossy(entry.header().identifier()).into_owned();
        let decoder: Box<dyn Read> = match name.trim_end_matches('/') {
            "data.tar.xz" => Box::new(liblzma::read::XzDecoder::new(entry)),
            "data.tar.zst" => Box::new(
                ruzstd::decoding::StreamingDecoder::new(entry)
                    .map_err(|e| anyhow!("data.tar.zst: {e}"))?,
            ),
            "data.tar.gz" => Box::new(flate2::read::GzDecoder::new(entry)),
            "data.tar" => Box::new(entry),
            _ => continue,
        };
        seen_data = true;
        untar(decoder, map, dest, &mut out, progress).with_context(|| format!("reading {name}"))?;
    }
    if !seen_data {
        bail!("the .deb has no data.tar member");
    }
    Ok(out)
}

fn untar(
    decoder: impl Read,
    map: &PathMap,
    dest: &Path,
    out: &mut Extracted,
    progress: &mut dyn FnMut(u64),
) -> Result<()> {
    let mut tar = tar::Archive::new(decoder);
    let mut unpacked: u64 = 0;
    for entry in tar.entries()? {
        let mut entry = entry?;
        let raw = entry.path()?.to_string_lossy().into_owned();
        let path = raw.trim_start_matches("./");
        let kind = entry.header().entry_type();
        let size = entry.header().size()?;
        unpacked += size;
        progress(unpacked);
        let Some(rel) = map(path) else {
            if kind.is_file() {
                out.dropped_bytes += size;
            }
            continue;
        };
        let target = dest.join(confined(&rel)?);
        if kind.is_dir() {
            fs::create_dir_all(&target)?;
            continue;
        }
        if let Some(parent) = target.parent() {
            fs::create_dir_all(parent)?;
        }
        if kind.is_symlink() {
            let link = entry
                .link_name()?
                .ok_or_else(|| anyhow!("{path}: a link with no target"))?;
            // Only links that stay beside their file (libcudart.so -> libcudart.so.12): a link
            // elsewhere in Debian's tree would point outside the toolkit.
            if link.components().count() != 1
                || !matches!(link.components().next(), Some(Component::Normal(_)))
            {
                continue;
            }
            let _ = fs::remove_file(&target);
            std::os::unix::fs::symlink(&link, &target)
                .with_context(|| format!("linking {}", target.display()))?;
            out.kept_files += 1;
        } else if kind.is_file() {
            let mode = entry.header().mode()? & 0o755;
            let mut file = fs::File::create(&target)?;
            io::copy(&mut entry, &mut file)?;
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(&target, std::fs::Permissions::from_mode(mode | 0o644))?;
            out.kept_files += 1;
            out.kept_bytes += size;
        }
    }
    Ok(())
}

/// `rel` as a path that stays under the destination: normal components only.
fn confined(rel: &Path) -> Result<&Path> {
    if rel.as_os_str().is_empty() || !rel.components().all(|c| matches!(c, Component::Normal(_))) {
        bail!(
            "refusing the path {} (it would leave the destination)",
            rel.display()
        );
    }
    Ok(rel)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A .deb of our own: `debian-binary`, an empty control member, a data.tar.xz of `files`
    /// (path, bytes) and `links` (path, target).
    fn deb(files: &[(&str, &[u8])], links: &[(&str, &str)]) -> Vec<u8> {
        let mut tar = tar::Builder::new(Vec::new());
        for (path, bytes) in files {
            let mut h = tar::Header::new_gnu();
            h.set_size(bytes.len() as u64);
            h.set_mode(0o755);
            h.set_entry_type(tar::EntryType::Regular);
            tar.append_data(&mut h, path, *bytes).unwrap();
        }
        for (path, target) in links {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(tar::EntryType::Symlink);
            h.set_size(0);
            tar.append_link(&mut h, path, target).unwrap();
        }
        let tar = tar.into_inner().unwrap();
        let mut xz = Vec::new();
        liblzma::read::XzEncoder::new(&tar[..], 6)
            .read_to_end(&mut xz)
            .unwrap();
        let mut ar = ar::Builder::new(Vec::new());
        for (name, data) in [
            ("debian-binary", b"2.0\n".to_vec()),
            ("control.tar.xz", Vec::new()),
            ("data.tar.xz", xz),
        ] {
            let h = ar::Header::new(name.as_bytes().to_vec(), data.len() as u64);
            ar.append(&h, &data[..]).unwrap();
        }
        ar.into_inner().unwrap()
    }

    fn map(path: &str) -> Option<PathBuf> {
        if let Some(rest) = path.strip_prefix("usr/include/") {
            return Some(Path::new("include").join(rest));
        }
        path.strip_prefix("usr/lib/x86_64-linux-gnu/libcudart.so")
            .map(|rest| PathBuf::from(format!("lib64/libcudart.so{rest}")))
    }

    fn run(bytes: &[u8], size: u64, sha: &str, dest: &Path) -> Result<Extracted> {
        let e = Expected {
            what: "fixture 1.0",
            size,
            sha256: sha,
        };
        extract(bytes, &e, &map, dest, &mut |_| {})
    }

    #[test]
    fn keeps_what_the_map_places_and_checks_the_hash() {
        let bytes = deb(
            &[
                ("./usr/include/cuda.h", b"#define CUDA 1\n"),
                ("./usr/lib/x86_64-linux-gnu/libcudart.so.12.4.127", b"ELF"),
                ("./usr/share/doc/big.txt", &[7u8; 4096]),
            ],
            &[
                (
                    "./usr/lib/x86_64-linux-gnu/libcudart.so.12",
                    "libcudart.so.12.4.127",
                ),
                ("./usr/include/escape.h", "../../etc/passwd"),
            ],
        );
        let sha = crate::stamp::hex(&Sha256::digest(&bytes));
        let dir = tempfile::tempdir().unwrap();
        let got = run(&bytes, bytes.len() as u64, &sha, dir.path()).unwrap();
        assert_eq!(got.kept_files, 3);
        assert_eq!(got.dropped_bytes, 4096);
        assert_eq!(
            fs::read_to_string(dir.path().join("include/cuda.h")).unwrap(),
            "#define CUDA 1\n"
        );
        let link = dir.path().join("lib64/libcudart.so.12");
        assert_eq!(
            fs::read_link(&link).unwrap(),
            Path::new("libcudart.so.12.4.127")
        );
        assert!(dir
            .path()
            .join("include/escape.h")
            .symlink_metadata()
            .is_err());
    }

    #[test]
    fn a_corrupted_or_truncated_package_is_refused() {
        let bytes = deb(&[("./usr/include/cuda.h", &[42u8; 20000])], &[]);
        let sha = crate::stamp::hex(&Sha256::digest(&bytes));
        // Each byte of the compressed data flipped in turn at a few places: never accepted.
        for at in [bytes.len() / 2, bytes.len() - 40, 70] {
            let mut bad = bytes.clone();
            bad[at] ^= 0x20;
            let dir = tempfile::tempdir().unwrap();
            let e = format!(
                "{:#}",
                run(&bad, bad.len() as u64, &sha, dir.path()).unwrap_err()
            );
            assert!(
                e.contains("is not the package the signed index lists"),
                "{e}"
            );
            assert!(e.contains("refusing it"), "{e}");
        }
        let dir = tempfile::tempdir().unwrap();
        let short = &bytes[..bytes.len() - 100];
        let e = run(short, bytes.len() as u64, &sha, dir.path())
            .unwrap_err()
            .to_string();
        assert!(e.contains(&format!("got {} bytes", short.len())), "{e}");
        // More bytes than the index lists: stopped at the limit.
        let mut long = bytes.clone();
        long.extend_from_slice(&[0; 64]);
        let e = run(&long, bytes.len() as u64, &sha, dir.path())
            .unwrap_err()
            .to_string();
        assert!(e.contains("refusing it"), "{e}");
    }

    /// 3,000 mutations of a real-shaped .deb (bytes flipped, cut, repeated), each given its own
    /// hash so the unpacking runs to wherever it fails: errors, never a panic or a write outside.
    #[test]
    fn mutated_packages_never_panic() {
        let base = deb(
            &[
                ("./usr/include/a.h", b"x"),
                ("./usr/include/sub/b.h", &[1u8; 3000]),
            ],
            &[("./usr/include/l.h", "a.h")],
        );
        let dir = tempfile::tempdir().unwrap();
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for i in 0..3000 {
            let mut bytes = base.clone();
            match i % 3 {
                0 => {
                    for _ in 0..1 + next() % 8 {
                        let at = (next() as usize) % bytes.len();
                        bytes[at] = next() as u8;
                    }
                }
                1 => bytes.truncate((next() as usize) % bytes.len()),
                _ => {
                    let at = (next() as usize) % bytes.len();
                    let chunk = bytes[at..].to_vec();
                    bytes.extend_from_slice(&chunk);
                }
            }
            let sha = crate::stamp::hex(&Sha256::digest(&bytes));
            let _ = run(&bytes, bytes.len() as u64, &sha, &dir.path().join("out"));
        }
        // Nothing escaped the destination.
        let names: Vec<String> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(names.iter().all(|n| n == "out"), "{names:?}");
    }

    #[test]
    fn hostile_bytes_are_errors_not_panics() {
        let dir = tempfile::tempdir().unwrap();
        for junk in [
            &b""[..],
            b"!<arch>\n",
            b"!<arch>\ndata.tar.xz/  0 0 0 100644 99999 `\n",
            &[0xffu8; 300],
        ] {
            let sha = crate::stamp::hex(&Sha256::digest(junk));
            assert!(run(junk, junk.len() as u64, &sha, dir.path()).is_err());
        }
        assert!(confined(Path::new("../x")).is_err());
        assert!(confined(Path::new("/x")).is_err());
        assert!(confined(Path::new("a/b")).is_ok());
    }
}
