//! The fatbin container format (`.nv_fatbin`, `__nv_relfatbin`): containers, entries and CUDA 13
//! concatenated entries, read zero-copy from the section bytes.
//!
//! Layout (docs/research/fatbin.md §2): a section is a sequence of containers, each a 16-byte
//! header (magic 0xBA55ED50, u16 version, u16 header size, u64 size of the entries) followed by
//! entries. An entry is a 64-byte-or-longer header (kind, header size, payload size, arch, flags…)
//! followed by its payload. Everything the audit needs is in the headers; nothing is decompressed
//! unless asked ([`Entry::decompress`]). The wrapper's data pointer (`.nvFatBinSegment`) is never
//! followed: scanning the section is complete and does not depend on relocations.

use super::elf::{range, Bytes};
use super::error::{Error, ErrorKind, Result};
use crate::cuda_arch::{Arch, Variant};
use std::fmt;

pub const FATBIN_MAGIC: u32 = 0xBA55_ED50;
const CONTAINER_HEADER: usize = 16;
const ENTRY_HEADER: usize = 64;

pub const KIND_PTX: u16 = 1;
pub const KIND_ELF: u16 = 2;
pub const KIND_IR: u16 = 8;
pub const KIND_CONCAT: u16 = 0x100;

pub const FLAG_64BIT: u64 = 0x1;
pub const FLAG_DEBUG: u64 = 0x2;
pub const FLAG_LZ4: u64 = 0x2000;
pub const FLAG_ZSTD: u64 = 0x8000;
pub const FLAG_ARCH_SPECIFIC: u64 = 0x10_0000;
pub const FLAG_FAMILY_SPECIFIC: u64 = 0x20_0000;

/// Largest payload [`Entry::decompress`] will produce (real cubins and concatenated blobs are MBs).
pub const MAX_DECOMPRESSED: u64 = 1 << 30;
/// Largest decompressed/compressed ratio accepted before allocating (zstd can exceed LZ4's 255).
const MAX_RATIO: u64 = 4096;

/// What an entry (or concatenated sub-entry) holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// PTX text (`compute_XX`): JIT-compiled by the driver.
    Ptx,
    /// A cubin (`sm_XX` SASS).
    Elf,
    /// NVVM IR / LTO-IR: input to a device link, not loadable by itself.
    Ir,
    /// CUDA 13 concatenated entry holding several sub-entries in one compressed blob.
    Concat,
    Unknown(u16),
}

impl Kind {
    pub fn from_raw(k: u16) -> Kind {
        match k {
            KIND_PTX => Kind::Ptx,
            KIND_ELF => Kind::Elf,
            KIND_IR => Kind::Ir,
            KIND_CONCAT => Kind::Concat,
            other => Kind::Unknown(other),
        }
    }
}

/// How an entry's payload is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Compression {
    None,
    Lz4,
    Zstd,
}

impl Compression {
    pub fn from_flags(flags: u64) -> Compression {
        if flags & FLAG_ZSTD != 0 {
            Compression::Zstd
        } else if flags & FLAG_LZ4 != 0 {
            Compression::Lz4
        } else {
            Compression::None
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }
}

/// The arch an entry header names: the decimal SM number plus the `a`/`f` flag bits.
/// Kept as the raw number so hostile values (arch 4000000) are reported, not rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ImageArch {
    pub number: u32,
    pub variant: Variant,
}

impl ImageArch {
    pub fn from_header(number: u32, flags: u64) -> ImageArch {
        let variant = if flags & FLAG_ARCH_SPECIFIC != 0 {
            Variant::ArchSpecific
        } else if flags & FLAG_FAMILY_SPECIFIC != 0 {
            Variant::FamilySpecific
        } else {
            Variant::Plain
        };
        ImageArch { number, variant }
    }

    /// The [`Arch`] model value, when the number fits (`120` → 12.0).
    pub fn arch(self) -> Option<Arch> {
        let major = u8::try_from(self.number / 10).ok()?;
        Some(Arch::new(major, (self.number % 10) as u8, self.variant))
    }

    pub fn from_arch(a: Arch) -> ImageArch {
        ImageArch {
            number: u32::from(a.major) * 10 + u32::from(a.minor),
            variant: a.variant,
        }
    }

    /// `sm_100f` / `compute_100f`.
    pub fn name(self, kind: Kind) -> String {
        let prefix = match kind {
            Kind::Ptx => "compute_",
            Kind::Ir => "lto_",
            _ => "sm_",
        };
        format!("{prefix}{self}")
    }
}

impl fmt::Display for ImageArch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.number, self.variant.suffix())
    }
}

/// Iterates the containers of a fatbin section. `base` is the section's file offset, so every
/// offset reported (and every error) is a file offset.
pub fn containers(section: &[u8], base: u64) -> Containers<'_> {
    Containers {
        data: section,
        base,
        pos: 0,
        done: false,
    }
}

pub struct Containers<'a> {
    data: &'a [u8],
    base: u64,
    pos: usize,
    done: bool,
}

/// One fatbin container: a 16-byte header and the entries that follow it.
#[derive(Clone, Debug)]
pub struct Container<'a> {
    /// File offset of the container header.
    pub offset: u64,
    pub version: u16,
    pub header_size: u16,
    body: &'a [u8],
    body_offset: u64,
}

impl<'a> Iterator for Containers<'a> {
    type Item = Result<Container<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let r = self.next_container();
        match r {
            Ok(Some(c)) => Some(Ok(c)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

impl<'a> Containers<'a> {
    fn next_container(&mut self) -> Result<Option<Container<'a>>> {
        // The linker aligns each input section to 8; tolerate zero padding between containers.
        loop {
            let rest = &self.data[self.pos..];
            if rest.len() < CONTAINER_HEADER && rest.iter().all(|&b| b == 0) {
                return Ok(None);
            }
            if rest.len() >= 8 && rest[..8] == [0; 8] {
                self.pos += 8;
                continue;
            }
            break;
        }
        let at = self.base + self.pos as u64;
        let b = Bytes::le(&self.data[self.pos..], at);
        let what = "fatbin container header";
        let magic = b.u32(0, what)?;
        if magic != FATBIN_MAGIC {
            return Err(Error::new(at, ErrorKind::BadFatbinMagic { found: magic }));
        }
        let version = b.u16(4, what)?;
        let header_size = b.u16(6, what)?;
        let fat_size = b.u64(8, what)?;
        if usize::from(header_size) < CONTAINER_HEADER {
            return Err(Error::new(
                at + 6,
                ErrorKind::BadContainerHeaderSize(header_size),
            ));
        }
        let rest = &self.data[self.pos..];
        let body = range(
            rest,
            u64::from(header_size),
            fat_size,
            "fatbin container",
            at + 8,
        )?;
        let body_offset = at + u64::from(header_size);
        // `range` proved header_size + fat_size <= rest.len(), so this cannot overflow.
        self.pos += usize::from(header_size) + body.len();
        Ok(Some(Container {
            offset: at,
            version,
            header_size,
            body,
            body_offset,
        }))
    }
}

impl<'a> Container<'a> {
    /// Size of the entries that follow the header (`fatSize`).
    pub fn fat_size(&self) -> u64 {
        self.body.len() as u64
    }

    pub fn entries(&self) -> Entries<'a> {
        Entries {
            data: self.body,
            base: self.body_offset,
            pos: 0,
            done: false,
        }
    }
}

pub struct Entries<'a> {
    data: &'a [u8],
    base: u64,
    pos: usize,
    done: bool,
}

/// One entry header, borrowed with its payload.
#[derive(Clone, Debug)]
pub struct Entry<'a> {
    /// File offset of the entry header.
    pub offset: u64,
    pub raw_kind: u16,
    pub kind: Kind,
    pub version: u16,
    pub header_size: u32,
    pub compressed_size: u32,
    pub options_offset: u32,
    /// Code version `[major, minor]`: ELF ABI for cubins, PTX ISA for PTX.
    pub code_version: (u16, u16),
    pub arch: ImageArch,
    pub flags: u64,
    pub decompressed_size: u64,
    /// The full header (`header_size` bytes, at least 64).
    pub header: &'a [u8],
    /// The payload as stored (`size` bytes).
    pub payload: &'a [u8],
}

impl<'a> Iterator for Entries<'a> {
    type Item = Result<Entry<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done || self.pos >= self.data.len() {
            return None;
        }
        let r = parse_entry(&self.data[self.pos..], self.base + self.pos as u64);
        match r {
            Ok((entry, len)) => {
                self.pos += len;
                Some(Ok(entry))
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

/// What an entry header and a concatenated sub-entry header share, at the same offsets: kind,
/// code version, arch and flags.
struct CommonHeader {
    raw_kind: u16,
    code_version: (u16, u16),
    arch: ImageArch,
    flags: u64,
}

/// Reads a 64-byte entry or sub-entry header at the start of `data` (file offset `at`).
fn common_header<'d>(
    data: &'d [u8],
    at: u64,
    what: &'static str,
) -> Result<(Bytes<'d>, CommonHeader)> {
    if data.len() < ENTRY_HEADER {
        return Err(Error::truncated(
            at,
            what,
            ENTRY_HEADER as u64,
            data.len() as u64,
        ));
    }
    let b = Bytes::le(data, at);
    let flags = b.u64(0x28, what)?;
    let common = CommonHeader {
        raw_kind: b.u16(0, what)?,
        code_version: (b.u16(0x1a, what)?, b.u16(0x18, what)?),
        arch: ImageArch::from_header(b.u32(0x1c, what)?, flags),
        flags,
    };
    Ok((b, common))
}

/// Parses one entry at the start of `data` (file offset `at`); returns it and its total length.
fn parse_entry(data: &[u8], at: u64) -> Result<(Entry<'_>, usize)> {
    let what = "fatbin entry header";
    let (b, c) = common_header(data, at, what)?;
    let header_size = b.u32(4, what)?;
    let size = b.u64(8, what)?;
    if (header_size as usize) < ENTRY_HEADER {
        return Err(Error::new(
            at + 4,
            ErrorKind::BadEntryHeaderSize(header_size),
        ));
    }
    let header = range(
        data,
        0,
        u64::from(header_size),
        "fatbin entry header",
        at + 4,
    )?;
    let payload = range(
        data,
        u64::from(header_size),
        size,
        "fatbin entry payload",
        at + 8,
    )?;
    let entry = Entry {
        offset: at,
        raw_kind: c.raw_kind,
        kind: Kind::from_raw(c.raw_kind),
        version: b.u16(2, what)?,
        header_size,
        compressed_size: b.u32(0x10, what)?,
        options_offset: b.u32(0x14, what)?,
        code_version: c.code_version,
        arch: c.arch,
        flags: c.flags,
        decompressed_size: b.u64(0x38, what)?,
        header,
        payload,
    };
    Ok((entry, header.len() + payload.len()))
}

/// One sub-entry of a concatenated entry: its own kind/arch/flags and where its bytes lie in the
/// decompressed blob.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubEntry {
    /// File offset of the sub-entry header (inside the outer entry's header).
    pub offset: u64,
    pub raw_kind: u16,
    pub kind: Kind,
    pub code_version: (u16, u16),
    pub arch: ImageArch,
    pub flags: u64,
    /// Offset of this sub-entry's bytes in the decompressed blob.
    pub blob_offset: u64,
    pub size: u64,
}

impl<'a> Entry<'a> {
    pub fn compression(&self) -> Compression {
        Compression::from_flags(self.flags)
    }

    /// The identifier string (`fatbinary --ident`), when present and in bounds.
    pub fn identifier(&self) -> Option<&'a [u8]> {
        let b = Bytes::le(self.header, self.offset);
        let off = b.u32(0x20, "").ok()? as usize;
        let len = b.u32(0x24, "").ok()? as usize;
        if off == 0 || len == 0 {
            return None;
        }
        self.header.get(off..off.checked_add(len)?)
    }

    /// The sub-entries of a concatenated entry (read from the header; nothing is decompressed).
    /// Layout: at +0x40 `{u32 count, u32 table_len}`, then `count` 64-byte sub-headers, each
    /// optionally followed by an options record when its options offset is 0x40.
    pub fn sub_entries(&self) -> Result<Vec<SubEntry>> {
        if self.kind != Kind::Concat {
            return Ok(Vec::new());
        }
        let h = Bytes::le(self.header, self.offset);
        let what = "concatenated entry table";
        let count = h.u32(0x40, what)?;
        let table_len = h.u32(0x44, what)?;
        let bad = || {
            Error::new(
                self.offset + 0x40,
                ErrorKind::BadConcatTable {
                    count,
                    table_len,
                    header_size: self.header_size,
                },
            )
        };
        let table_end = 0x40u64 + u64::from(table_len);
        // Each sub-header takes at least 64 bytes; this bounds `count` by real bytes before allocating.
        if table_end > self.header.len() as u64 || u64::from(count) * 64 > u64::from(table_len) {
            return Err(bad());
        }
        let mut out = Vec::with_capacity(count as usize);
        let mut pos = 0x48usize;
        for _ in 0..count {
            let at = self.offset + pos as u64;
            let rest = self.header.get(pos..table_end as usize).ok_or_else(bad)?;
            let what = "concatenated sub-entry header";
            let (b, c) = common_header(rest, at, what)?;
            let options_offset = b.u32(0x14, what)?;
            let mut len = ENTRY_HEADER as u64;
            if options_offset != 0 {
                // {u32 offset, u32 length} of the options string, NUL-terminated, padded to 8.
                let o = u64::from(options_offset);
                let opt_off = b.u32(options_offset as usize, "concatenated sub-entry options")?;
                let opt_len = b.u32(
                    options_offset as usize + 4,
                    "concatenated sub-entry options",
                )?;
                let end = (u64::from(opt_off) + u64::from(opt_len) + 1).max(o + 8);
                len = len.max(end.div_ceil(8) * 8);
            }
            out.push(SubEntry {
                offset: at,
                raw_kind: c.raw_kind,
                kind: Kind::from_raw(c.raw_kind),
                code_version: c.code_version,
                arch: c.arch,
                flags: c.flags,
                blob_offset: u64::from(b.u32(4, what)?),
                size: b.u64(8, what)?,
            });
            pos = usize::try_from(pos as u64 + len).map_err(|_| bad())?;
        }
        Ok(out)
    }

    /// The payload, decompressed when the flags say so (LZ4 raw block or zstd frame). Sizes are
    /// checked against the header and bounded before anything is allocated.
    pub fn decompress(&self) -> Result<std::borrow::Cow<'a, [u8]>> {
        let lz4 = self.flags & FLAG_LZ4 != 0;
        let zstd = self.flags & FLAG_ZSTD != 0;
        let payload_at = self.offset + u64::from(self.header_size);
        if lz4 && zstd {
            return Err(Error::new(
                self.offset + 0x28,
                ErrorKind::AmbiguousCompression,
            ));
        }
        if !lz4 && !zstd {
            return Ok(std::borrow::Cow::Borrowed(self.payload));
        }
        let csize = u64::from(self.compressed_size);
        if csize > self.payload.len() as u64 {
            return Err(Error::new(
                self.offset + 0x10,
                ErrorKind::BadCompressedSize {
                    compressed: csize,
                    payload: self.payload.len() as u64,
                },
            ));
        }
        let input = &self.payload[..csize as usize];
        let dsize = self.decompressed_size;
        let limit = MAX_DECOMPRESSED.min(csize.saturating_mul(MAX_RATIO).saturating_add(4096));
        if dsize > limit {
            return Err(Error::new(
                self.offset + 0x38,
                ErrorKind::ImplausibleDecompressedSize {
                    decompressed: dsize,
                    compressed: csize,
                    limit,
                },
            ));
        }
        let codec = if lz4 { "LZ4" } else { "zstd" };
        let out = if lz4 {
            lz4_flex::block::decompress(input, dsize as usize).map_err(|e| {
                Error::new(
                    payload_at,
                    ErrorKind::Decompress {
                        codec,
                        message: e.to_string(),
                    },
                )
            })?
        } else {
            zstd_decompress(input, dsize).map_err(|message| {
                Error::new(payload_at, ErrorKind::Decompress { codec, message })
            })?
        };
        if out.len() as u64 != dsize {
            return Err(Error::new(
                payload_at,
                ErrorKind::DecompressedSizeMismatch {
                    codec,
                    expected: dsize,
                    found: out.len() as u64,
                },
            ));
        }
        Ok(std::borrow::Cow::Owned(out))
    }
}

/// Decodes a zstd frame, producing at most `limit + 1` bytes (so an overrun is detected, not buffered).
fn zstd_decompress(input: &[u8], limit: u64) -> std::result::Result<Vec<u8>, String> {
    use std::io::Read;
    let mut src = input;
    let dec = ruzstd::decoding::StreamingDecoder::new(&mut src).map_err(|e| e.to_string())?;
    let mut out = Vec::with_capacity(limit.min(64 << 20) as usize);
    dec.take(limit + 1)
        .read_to_end(&mut out)
        .map_err(|e| e.to_string())?;
    Ok(out)
}
