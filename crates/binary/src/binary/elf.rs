//! A minimal, zero-copy ELF reader: just enough to find sections by name and borrow their bytes.
//!
//! Every field is read at an explicit offset with bounds checks; nothing is allocated in
//! proportion to counts the file declares, so hostile headers cannot make it allocate or panic.

use super::error::{Error, ErrorKind, Result};

const SHT_NOBITS: u32 = 8;
const SHN_XINDEX: u32 = 0xffff;

/// Reads fixed-width integers at explicit offsets of a byte slice, in one byte order.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bytes<'a> {
    pub data: &'a [u8],
    pub little: bool,
    /// Offset of `data[0]` in the file, for error messages.
    pub base: u64,
}

impl<'a> Bytes<'a> {
    pub fn le(data: &'a [u8], base: u64) -> Bytes<'a> {
        Bytes {
            data,
            little: true,
            base,
        }
    }

    fn array<const N: usize>(&self, off: usize, what: &'static str) -> Result<[u8; N]> {
        match off.checked_add(N).and_then(|end| self.data.get(off..end)) {
            Some(s) => {
                let mut a = [0u8; N];
                a.copy_from_slice(s);
                Ok(a)
            }
            None => {
                let have = self.data.len().saturating_sub(off) as u64;
                Err(Error::truncated(
                    self.base + off as u64,
                    what,
                    N as u64,
                    have,
                ))
            }
        }
    }

    pub fn u8(&self, off: usize, what: &'static str) -> Result<u8> {
        Ok(self.array::<1>(off, what)?[0])
    }

    pub fn u16(&self, off: usize, what: &'static str) -> Result<u16> {
        let a = self.array(off, what)?;
        Ok(if self.little {
            u16::from_le_bytes(a)
        } else {
            u16::from_be_bytes(a)
        })
    }

    pub fn u32(&self, off: usize, what: &'static str) -> Result<u32> {
        let a = self.array(off, what)?;
        Ok(if self.little {
            u32::from_le_bytes(a)
        } else {
            u32::from_be_bytes(a)
        })
    }

    pub fn u64(&self, off: usize, what: &'static str) -> Result<u64> {
        let a = self.array(off, what)?;
        Ok(if self.little {
            u64::from_le_bytes(a)
        } else {
            u64::from_be_bytes(a)
        })
    }
}

/// `start..start+len` of `data`, or an error naming `what` at `at`.
pub(crate) fn range<'d>(
    data: &'d [u8],
    start: u64,
    len: u64,
    what: &'static str,
    at: u64,
) -> Result<&'d [u8]> {
    let end = start.checked_add(len);
    match end {
        Some(end) if end <= data.len() as u64 => Ok(&data[start as usize..end as usize]),
        _ => Err(Error::new(
            at,
            ErrorKind::OutOfRange {
                what,
                start,
                end: end.unwrap_or(u64::MAX),
                len: data.len() as u64,
            },
        )),
    }
}

/// A parsed ELF header; sections are read lazily from the section header table.
#[derive(Clone, Debug)]
pub struct Elf<'a> {
    data: &'a [u8],
    pub is_64: bool,
    pub little_endian: bool,
    pub e_type: u16,
    pub e_machine: u16,
    shoff: u64,
    shentsize: u16,
    shnum: u64,
    shstrtab: &'a [u8],
    /// The program header table's end (`e_phoff + e_phnum * e_phentsize`; 0 without one).
    ph_end: u64,
}

/// One section: its name and the bytes it occupies in the file.
#[derive(Clone, Debug)]
pub struct Section<'a> {
    pub index: u64,
    pub name: &'a [u8],
    pub sh_type: u32,
    /// File offset of the section's bytes.
    pub offset: u64,
    pub size: u64,
    /// Empty for `SHT_NOBITS`.
    pub data: &'a [u8],
    /// File offset of this section's header, for error messages.
    pub header_offset: u64,
}

impl<'a> Section<'a> {
    pub fn name_lossy(&self) -> String {
        String::from_utf8_lossy(self.name).into_owned()
    }
}

struct RawSection {
    name: u32,
    sh_type: u32,
    offset: u64,
    size: u64,
    link: u32,
}

/// The ELF header's section header table fields: offset, entry size, count, the index of the
/// section names' table, and the smallest entry size of the class.
fn section_table(b: &Bytes, is_64: bool) -> Result<(u64, u16, u16, u16, u16)> {
    let what = "ELF header";
    Ok(if is_64 {
        (
            b.u64(0x28, what)?,
            b.u16(0x3a, what)?,
            b.u16(0x3c, what)?,
            b.u16(0x3e, what)?,
            64u16,
        )
    } else {
        (
            u64::from(b.u32(0x20, what)?),
            b.u16(0x2e, what)?,
            b.u16(0x30, what)?,
            b.u16(0x32, what)?,
            40u16,
        )
    })
}

/// The ELF header's program header table fields: offset, entry size, count.
fn program_table(b: &Bytes, is_64: bool) -> Result<(u64, u16, u16)> {
    let what = "ELF header";
    Ok(if is_64 {
        (b.u64(0x20, what)?, b.u16(0x36, what)?, b.u16(0x38, what)?)
    } else {
        (
            u64::from(b.u32(0x1c, what)?),
            b.u16(0x2a, what)?,
            b.u16(0x2c, what)?,
        )
    })
}

/// True when `data` starts with the ELF magic.
pub fn is_elf(data: &[u8]) -> bool {
    data.starts_with(b"\x7fELF")
}

impl<'a> Elf<'a> {
    pub fn parse(data: &'a [u8]) -> Result<Elf<'a>> {
        if data.len() < 4 {
            return Err(Error::truncated(
                0,
                "ELF identification",
                16,
                data.len() as u64,
            ));
        }
        if !is_elf(data) {
            return Err(Error::new(0, ErrorKind::NotElf));
        }
        let id = Bytes::le(data, 0);
        let is_64 = match id.u8(4, "ELF identification")? {
            1 => false,
            2 => true,
            c => return Err(Error::new(4, ErrorKind::BadElfClass(c))),
        };
        let little_endian = match id.u8(5, "ELF identification")? {
            1 => true,
            2 => false,
            e => return Err(Error::new(5, ErrorKind::BadElfEncoding(e))),
        };
        let b = Bytes {
            data,
            little: little_endian,
            base: 0,
        };
        let what = "ELF header";
        let e_type = b.u16(16, what)?;
        let e_machine = b.u16(18, what)?;
        let (shoff, shentsize, shnum, shstrndx, min_entsize) = section_table(&b, is_64)?;
        let (phoff, phentsize, phnum) = program_table(&b, is_64)?;
        let mut elf = Elf {
            data,
            is_64,
            little_endian,
            e_type,
            e_machine,
            shoff,
            shentsize,
            shnum: u64::from(shnum),
            shstrtab: &[],
            ph_end: phoff.saturating_add(u64::from(phnum) * u64::from(phentsize)),
        };
        if shoff == 0 {
            // No section header table (stripped of it entirely): nothing to find.
            elf.shnum = 0;
            return Ok(elf);
        }
        if shentsize < min_entsize {
            let at = if is_64 { 0x3a } else { 0x2e };
            return Err(Error::new(
                at,
                ErrorKind::BadSectionHeaderSize {
                    found: shentsize,
                    expected: min_entsize,
                },
            ));
        }
        // Extended numbering: the real counts live in section header 0.
        let first = elf.first_section_header()?;
        if shnum == 0 {
            elf.shnum = first.size;
        }
        let shstrndx = if u32::from(shstrndx) == SHN_XINDEX {
            first.link
        } else {
            u32::from(shstrndx)
        };
        // The whole table must be inside the file before anything is iterated.
        let table_len = elf.shnum.saturating_mul(u64::from(shentsize));
        range(
            data,
            shoff,
            table_len,
            "ELF section header table",
            if is_64 { 0x28 } else { 0x20 },
        )?;
        if shstrndx != 0 {
            if u64::from(shstrndx) >= elf.shnum {
                let at = if is_64 { 0x3e } else { 0x32 };
                return Err(Error::new(
                    at,
                    ErrorKind::BadStringTableIndex {
                        index: shstrndx,
                        count: elf.shnum,
                    },
                ));
            }
            let s = elf.raw_section(u64::from(shstrndx))?;
            let at = elf.header_offset(u64::from(shstrndx));
            elf.shstrtab = if s.sh_type == SHT_NOBITS {
                &[]
            } else {
                range(data, s.offset, s.size, "section-name string table", at)?
            };
        }
        Ok(elf)
    }

    pub fn data(&self) -> &'a [u8] {
        self.data
    }

    /// Where the file's own bytes end: the last of its headers' tables and its sections' data
    /// (a cubin in a concatenated fatbin entry is followed by alignment padding, which
    /// cuobjdump does not write). Never past the data.
    pub fn extent(&self) -> Result<u64> {
        let table = self.shnum.saturating_mul(u64::from(self.shentsize));
        let mut end = self.ph_end.max(self.shoff.saturating_add(table));
        for s in self.sections() {
            let s = s?;
            if !s.data.is_empty() {
                end = end.max(s.offset.saturating_add(s.size));
            }
        }
        Ok(end.min(self.data.len() as u64))
    }

    pub fn section_count(&self) -> u64 {
        self.shnum
    }

    fn header_offset(&self, index: u64) -> u64 {
        self.shoff
            .saturating_add(index.saturating_mul(u64::from(self.shentsize)))
    }

    /// Section header 0, once it is known to lie in the file: an offset past the end is the
    /// header field's fault, reported there (a little-endian file marked big-endian claims a
    /// table some exabytes in), not at the offset it claims.
    fn first_section_header(&self) -> Result<RawSection> {
        range(
            self.data,
            self.shoff,
            u64::from(self.shentsize),
            "ELF section header table",
            if self.is_64 { 0x28 } else { 0x20 },
        )?;
        self.raw_section(0)
    }

    fn raw_section(&self, index: u64) -> Result<RawSection> {
        let at = self.header_offset(index);
        let what = "ELF section header";
        let need = if self.is_64 { 64 } else { 40 };
        let hdr = match usize::try_from(at).ok().and_then(|a| self.data.get(a..)) {
            Some(rest) if rest.len() >= need => &rest[..need],
            Some(rest) => return Err(Error::truncated(at, what, need as u64, rest.len() as u64)),
            None => return Err(Error::truncated(at, what, need as u64, 0)),
        };
        let b = Bytes {
            data: hdr,
            little: self.little_endian,
            base: at,
        };
        Ok(if self.is_64 {
            RawSection {
                name: b.u32(0, what)?,
                sh_type: b.u32(4, what)?,
                offset: b.u64(0x18, what)?,
                size: b.u64(0x20, what)?,
                link: b.u32(0x28, what)?,
            }
        } else {
            RawSection {
                name: b.u32(0, what)?,
                sh_type: b.u32(4, what)?,
                offset: u64::from(b.u32(0x10, what)?),
                size: u64::from(b.u32(0x14, what)?),
                link: b.u32(0x18, what)?,
            }
        })
    }

    fn name(&self, name: u32, at: u64) -> Result<&'a [u8]> {
        let rest = self
            .shstrtab
            .get(name as usize..)
            .ok_or(Error::new(at, ErrorKind::BadSectionName(name)))?;
        let end = rest
            .iter()
            .position(|&c| c == 0)
            .ok_or(Error::new(at, ErrorKind::BadSectionName(name)))?;
        Ok(&rest[..end])
    }

    /// Section `index` with its name and bytes; errors name the section header's offset.
    pub fn section(&self, index: u64) -> Result<Section<'a>> {
        let raw = self.raw_section(index)?;
        let at = self.header_offset(index);
        let name = if self.shstrtab.is_empty() && raw.name == 0 {
            &[][..]
        } else {
            self.name(raw.name, at)?
        };
        let data = if raw.sh_type == SHT_NOBITS {
            &[][..]
        } else {
            range(self.data, raw.offset, raw.size, "section", at)?
        };
        Ok(Section {
            index,
            name,
            sh_type: raw.sh_type,
            offset: raw.offset,
            size: raw.size,
            data,
            header_offset: at,
        })
    }

    /// Every section in order (index 0, the null section, is skipped).
    pub fn sections(&self) -> impl Iterator<Item = Result<Section<'a>>> + '_ {
        (1..self.shnum).map(move |i| self.section(i))
    }

    /// The first section called `name`, if any.
    /// Only the names of other sections are read, so a bad range elsewhere does not matter.
    pub fn section_by_name(&self, name: &[u8]) -> Result<Option<Section<'a>>> {
        if self.shstrtab.is_empty() {
            return Ok(None);
        }
        for i in 1..self.shnum {
            let raw = self.raw_section(i)?;
            if self.name(raw.name, self.header_offset(i))? == name {
                return self.section(i).map(Some);
            }
        }
        Ok(None)
    }
}
