//! Typed errors of the binary reader: every one carries the byte offset where reading failed.

use std::fmt;

/// What went wrong, without the position (see [`Error`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ErrorKind {
    #[error("truncated {what}: needs {need} bytes but only {have} remain")]
    Truncated {
        what: &'static str,
        need: u64,
        have: u64,
    },
    #[error("not an ELF file (expected the magic 7f 45 4c 46)")]
    NotElf,
    #[error("unsupported ELF class {0} (expected 1 for 32-bit or 2 for 64-bit)")]
    BadElfClass(u8),
    #[error("unsupported ELF data encoding {0} (expected 1 for little or 2 for big endian)")]
    BadElfEncoding(u8),
    #[error("ELF section header entry size is {found} (expected at least {expected})")]
    BadSectionHeaderSize { found: u16, expected: u16 },
    #[error("ELF section-name string table index {index} is not below the section count {count}")]
    BadStringTableIndex { index: u32, count: u64 },
    #[error("ELF section name offset {0} lies outside the section-name string table or is not NUL-terminated")]
    BadSectionName(u32),
    #[error("fatbin container magic is 0x{found:08x} (expected 0xba55ed50)")]
    BadFatbinMagic { found: u32 },
    #[error("fatbin container header size is {0} (expected at least 16)")]
    BadContainerHeaderSize(u16),
    #[error("fatbin entry header size is {0} (expected at least 64)")]
    BadEntryHeaderSize(u32),
    #[error("concatenated entry table declares {count} sub-entries in {table_len} bytes, which does not fit its {header_size}-byte header")]
    BadConcatTable {
        count: u32,
        table_len: u32,
        header_size: u32,
    },
    #[error("{what} range {start}..{end} lies outside the {len}-byte region it belongs to")]
    OutOfRange {
        what: &'static str,
        start: u64,
        end: u64,
        len: u64,
    },
    #[error("compressed size {compressed} is larger than the {payload}-byte payload")]
    BadCompressedSize { compressed: u64, payload: u64 },
    #[error("declared decompressed size {decompressed} is implausible for {compressed} compressed bytes (limit {limit})")]
    ImplausibleDecompressedSize {
        decompressed: u64,
        compressed: u64,
        limit: u64,
    },
    #[error("{codec} payload does not decompress: {message}")]
    Decompress {
        codec: &'static str,
        message: String,
    },
    #[error("{codec} payload decompressed to {found} bytes (the header declares {expected})")]
    DecompressedSizeMismatch {
        codec: &'static str,
        expected: u64,
        found: u64,
    },
    #[error("entry is marked both LZ4 (0x2000) and zstd (0x8000) compressed")]
    AmbiguousCompression,
}

/// A reader error at a byte offset of the file being read (for wheel members: of the member).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub offset: u64,
    pub kind: ErrorKind,
}

impl Error {
    pub fn new(offset: u64, kind: ErrorKind) -> Error {
        Error { offset, kind }
    }

    pub(crate) fn truncated(offset: u64, what: &'static str, need: u64, have: u64) -> Error {
        Error::new(offset, ErrorKind::Truncated { what, need, have })
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "at byte offset {} (0x{:x}): {}",
            self.offset, self.offset, self.kind
        )
    }
}

impl std::error::Error for Error {}

pub type Result<T, E = Error> = std::result::Result<T, E>;
