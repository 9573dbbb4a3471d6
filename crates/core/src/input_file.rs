//! Reading a file the user named: the one guard every reader of user input goes through. A FIFO
//! would block the reader forever, a device (`/dev/zero`) never ends, and a text file of gigabytes
//! is no requirements file or ninja log: each is refused before a byte is read, naming the file,
//! what it is and what to give instead.
//!
//! The file is opened non-blocking (opening a FIFO with no writer would hang otherwise), then its
//! kind is read from the open descriptor (no race between a check and the read), and the read is
//! bounded by the cap whatever the size the file claims (procfs files claim 0 bytes).

use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The cap for a text input (a requirements file, a rule catalogue, a ninja log): far above any
/// real one (torch's own `.ninja_log` after a full CUDA build is ~2 MB).
pub const TEXT_CAP: u64 = 256 << 20;

/// Why a user's file was not read.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("{}: cannot read: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: is {kind}, not a regular file: nothing to read; give a file", path.display())]
    NotRegular { path: PathBuf, kind: &'static str },
    #[error(
        "{}: larger than {} MiB: not a {what}; give the file archsmith expects",
        path.display(),
        cap >> 20
    )]
    TooLarge {
        path: PathBuf,
        cap: u64,
        what: &'static str,
    },
    #[error(
        "{}:{line}: not UTF-8 (byte 0x{byte:02x}); save the file as UTF-8",
        path.display()
    )]
    NotUtf8 {
        path: PathBuf,
        line: usize,
        byte: u8,
    },
}

/// What a file's type is, for a message ("a FIFO", "a directory").
fn kind_of(t: std::fs::FileType) -> Option<&'static str> {
    if t.is_file() {
        None
    } else if t.is_dir() {
        Some("a directory")
    } else if t.is_fifo() {
        Some("a FIFO")
    } else if t.is_socket() {
        Some("a socket")
    } else if t.is_char_device() {
        Some("a character device")
    } else if t.is_block_device() {
        Some("a block device")
    } else {
        Some("not a file")
    }
}

/// Refuses `path` unless it is a regular file (symlinks followed), without opening it.
pub fn check_regular(path: &Path) -> Result<(), InputError> {
    let meta = std::fs::metadata(path).map_err(|source| InputError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    match kind_of(meta.file_type()) {
        None => Ok(()),
        Some(kind) => Err(InputError::NotRegular {
            path: path.to_path_buf(),
            kind,
        }),
    }
}

/// The bytes of the regular file `path`, at most `cap` of them (more is an error); `what` names
/// the kind of file expected, for the message.
pub fn read_bytes(path: &Path, cap: u64, what: &'static str) -> Result<Vec<u8>, InputError> {
    let io = |source| InputError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if let Some(kind) = kind_of(meta.file_type()) {
        return Err(InputError::NotRegular {
            path: path.to_path_buf(),
            kind,
        });
    }
    let too_large = || InputError::TooLarge {
        path: path.to_path_buf(),
        cap,
        what,
    };
    if meta.len() > cap {
        return Err(too_large());
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(cap + 1).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() as u64 > cap {
        return Err(too_large());
    }
    Ok(bytes)
}

/// The text of the regular file `path` ([`read_bytes`] with [`TEXT_CAP`]); bytes that are not
/// UTF-8 are an error naming their line.
pub fn read_text(path: &Path, what: &'static str) -> Result<String, InputError> {
    let bytes = read_bytes(path, TEXT_CAP, what)?;
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let bytes = e.as_bytes();
        InputError::NotUtf8 {
            path: path.to_path_buf(),
            line: bytes[..at].iter().filter(|&&b| b == b'\n').count() + 1,
            byte: bytes.get(at).copied().unwrap_or(0),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifos_devices_and_directories_are_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        for (p, kind) in [
            (fifo.as_path(), "a FIFO"),
            (Path::new("/dev/zero"), "a character device"),
            (dir.path(), "a directory"),
        ] {
            let e = read_text(p, "requirements file").unwrap_err();
            assert!(e.to_string().contains(kind), "{e}");
            assert!(check_regular(p).unwrap_err().to_string().contains(kind));
        }
    }

    #[test]
    fn a_file_over_the_cap_is_refused_and_bad_utf8_names_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big.txt");
        std::fs::write(&big, vec![b'a'; 2048]).unwrap();
        assert!(read_bytes(&big, 2048, "log").is_ok());
        let e = read_bytes(&big, 1024, "log").unwrap_err();
        assert!(matches!(e, InputError::TooLarge { .. }), "{e}");
        let latin1 = dir.path().join("req.txt");
        std::fs::write(&latin1, b"torch==2.6.0\n# caf\xe9\n").unwrap();
        let e = read_text(&latin1, "requirements file").unwrap_err();
        assert!(
            e.to_string()
                .ends_with("req.txt:2: not UTF-8 (byte 0xe9); save the file as UTF-8"),
            "{e}"
        );
    }
}
