//! Which CUDA release wrote a file's cubins, as the cubins themselves record it: ptxas writes
//! `Cuda compilation tools, release 13.2, V13.2.86` into each cubin's `.note.nv.tkinfo` (CUDA
//! 13.0's and 13.2's do; 11.8's and 12.4's write no such note). A driver older than that release's floor
//! cannot load the cubins, so `verify binary` states the driver a file needs from this: the
//! toolkit that built a file is not otherwise on record once it is shipped. The PTX nvcc embeds
//! has its comments stripped and records only its ISA version (`.version 7.8`), which this does
//! not map to a release.

use super::error::Error;
use super::fatbin::Kind;
use crate::version::Version;
use std::collections::BTreeSet;

/// The CUDA releases that wrote a file's cubins, and how many cubins record none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceToolkits {
    pub sass: BTreeSet<Version>,
    pub unrecorded: usize,
}

/// What precedes the release in ptxas's note.
const MARK: &[u8] = b"Cuda compilation tools, release ";

/// Every cubin of `data` (an ELF file with a fatbin), decompressed once.
pub fn device_toolkits(data: &[u8]) -> Result<DeviceToolkits, Error> {
    let mut out = DeviceToolkits::default();
    super::extract::for_each_image(data, |kind, _, image| {
        if kind == Kind::Elf {
            match cubin_release(image) {
                Some(v) => {
                    out.sass.insert(v);
                }
                None => out.unrecorded += 1,
            }
        }
    })?;
    Ok(out)
}

/// The release in a cubin's `.note.nv.tkinfo` (None for a cubin without one: older toolkits).
pub fn cubin_release(cubin: &[u8]) -> Option<Version> {
    let elf = super::elf::Elf::parse(cubin).ok()?;
    let note = elf.section_by_name(b".note.nv.tkinfo").ok()??;
    release_after(note.data)
}

/// `X.Y` after [`MARK`] in `bytes`.
fn release_after(bytes: &[u8]) -> Option<Version> {
    let at = bytes.windows(MARK.len()).position(|w| w == MARK)? + MARK.len();
    let rest = &bytes[at..];
    let end = (rest.iter())
        .position(|b| !(b.is_ascii_digit() || *b == b'.'))
        .unwrap_or(rest.len());
    std::str::from_utf8(&rest[..end])
        .ok()?
        .trim_end_matches('.')
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_release_is_read_from_ptxas_note() {
        // The descriptor of a `.note.nv.tkinfo` that nvcc 13.2's ptxas wrote (sm_90).
        let note = b"\x02\0\0\0\0\0\0\0\x01\0\0\0\x07\0\0\0\x36\0\0\0\x60\0\0\0\0ptxas\0Cuda compilation tools, release 13.2, V13.2.86\0Build cuda_13.2.r13.2/compiler.37953736_0\0-arch sm_90 -m 64 \0";
        assert_eq!(release_after(note), "13.2".parse().ok());
        for hostile in [
            &b""[..],
            b"Cuda compilation tools, release ",
            b"Cuda compilation tools, release x",
            b"Cuda compilation tools, release 1.2.3.4.5.6.7.8.9.9999999999999999999999",
        ] {
            let _ = release_after(hostile);
        }
        assert_eq!(cubin_release(b"\x7fELF"), None);
    }
}
