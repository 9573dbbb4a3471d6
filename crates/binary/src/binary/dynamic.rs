//! What an ELF file asks of the dynamic linker and offers to it: `DT_NEEDED` sonames,
//! RPATH/RUNPATH, `DT_SONAME`, dynamic symbols (defined and undefined, with their GNU symbol
//! versions) and the version requirements (`.gnu.version_r`) and definitions (`.gnu.version_d`).
//!
//! Read with gimli-rs's `object` (zero-copy over the mapped file, every read bounds-checked); this
//! module only turns its tables into the few facts a load check needs. Names stay borrowed from
//! the file. [`binary::elf`](super::elf) stays the section reader of the fatbin audit: it needs
//! nothing but section bytes, and `object` would add nothing there.

use object::elf::{self as e, FileHeader32, FileHeader64};
use object::read::elf::{FileHeader, SectionHeader, Sym};
use object::{Endianness, SymbolIndex};

/// Why an ELF file's dynamic tables could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DynamicError {
    #[error("not an ELF file (expected the magic 7f 45 4c 46)")]
    NotElf,
    #[error("malformed ELF: {0}")]
    Malformed(String),
    #[error("{what} is not UTF-8")]
    NotUtf8 { what: &'static str },
}

impl From<object::read::Error> for DynamicError {
    fn from(e: object::read::Error) -> Self {
        DynamicError::Malformed(e.to_string())
    }
}

type Result<T> = std::result::Result<T, DynamicError>;

/// What a symbol table entry is, as far as binding it goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SymbolKind {
    Function,
    Object,
    Tls,
    Other,
}

/// One global or weak dynamic symbol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Symbol<'a> {
    pub name: &'a str,
    /// The GNU version it is defined at (`GLIBC_2.34`) or needed at; None when unversioned.
    pub version: Option<&'a str>,
    /// For a definition: a non-default version (`name@VER`, not `name@@VER`), which only a
    /// reference to that exact version binds to.
    pub hidden: bool,
    pub defined: bool,
    pub weak: bool,
    pub kind: SymbolKind,
}

/// One `.gnu.version_r` entry: the versions this file needs from the library `file`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionNeed<'a> {
    pub file: &'a str,
    /// Version names, each with whether it is only a weak requirement (`VER_FLG_WEAK`).
    pub versions: Vec<(&'a str, bool)>,
}

/// The dynamic-linking view of one ELF file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DynamicInfo<'a> {
    pub is_64: bool,
    pub machine: u16,
    pub soname: Option<&'a str>,
    pub needed: Vec<&'a str>,
    /// `DT_RPATH` entries (searched before `LD_LIBRARY_PATH`, and ignored when RUNPATH is set).
    pub rpath: Vec<&'a str>,
    /// `DT_RUNPATH` entries (searched after `LD_LIBRARY_PATH`).
    pub runpath: Vec<&'a str>,
    /// Global and weak dynamic symbols; locals and the null entry are left out.
    pub symbols: Vec<Symbol<'a>>,
    pub version_needs: Vec<VersionNeed<'a>>,
    /// Versions this file defines (its `.gnu.version_d`, the base entry left out).
    pub version_defs: Vec<&'a str>,
}

impl<'a> DynamicInfo<'a> {
    pub fn undefined(&self) -> impl Iterator<Item = &Symbol<'a>> {
        self.symbols.iter().filter(|s| !s.defined)
    }

    pub fn defined(&self) -> impl Iterator<Item = &Symbol<'a>> {
        self.symbols.iter().filter(|s| s.defined)
    }

    /// The `PyInit_*` function a CPython extension module exports; None for a plain library.
    pub fn python_init(&self) -> Option<&'a str> {
        self.defined()
            .find(|s| s.name.starts_with("PyInit_") && s.kind == SymbolKind::Function)
            .map(|s| s.name)
    }

    /// Which libstdc++ string ABI the file's own symbols use; see [`CxxAbi`].
    pub fn cxx_abi(&self, which: Which) -> CxxAbi {
        let names = self.symbols.iter().filter(|s| match which {
            Which::Undefined => !s.defined,
            Which::Defined => s.defined,
        });
        CxxAbi::of(names.map(|s| s.name))
    }
}

/// Which of a file's symbols to classify.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    /// What it needs: an extension's ABI shows in the torch functions it calls.
    Undefined,
    /// What it offers: a torch library's ABI shows in the functions it exports.
    Defined,
}

/// The libstdc++ dual ABI (`_GLIBCXX_USE_CXX11_ABI`) as mangled names show it: `std::string`
/// is `std::__cxx11::basic_string` under the C++11 ABI (`NSt7__cxx1112basic_string…`, and
/// functions returning one carry `B5cxx11`), and `Ss` under the old one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CxxAbi {
    /// `_GLIBCXX_USE_CXX11_ABI=1`.
    Cxx11,
    /// `_GLIBCXX_USE_CXX11_ABI=0`, the pre-C++11 `std::string`.
    PreCxx11,
    /// Symbols of both kinds (a library that bridges them, like libstdc++ itself).
    Both,
    /// No symbol involves `std::string` or `std::list`: the ABI does not matter for linking.
    Unknown,
}

impl CxxAbi {
    pub fn of<'n>(names: impl Iterator<Item = &'n str>) -> CxxAbi {
        let (mut new, mut old) = (false, false);
        for name in names {
            if !outside_std(name) {
                continue;
            }
            if name.contains("St7__cxx11") || name.contains("B5cxx11") {
                new = true;
            } else if name.contains("Ss") && !old {
                // `Ss` may also be part of an identifier; only the demangler can tell.
                old = demangles_with_old_string(name);
            }
            if new && old {
                return CxxAbi::Both;
            }
        }
        match (new, old) {
            (true, false) => CxxAbi::Cxx11,
            (false, true) => CxxAbi::PreCxx11,
            (true, true) => CxxAbi::Both,
            (false, false) => CxxAbi::Unknown,
        }
    }

    /// The `_GLIBCXX_USE_CXX11_ABI` value, where one applies.
    pub fn flag(self) -> Option<u8> {
        match self {
            CxxAbi::Cxx11 => Some(1),
            CxxAbi::PreCxx11 => Some(0),
            CxxAbi::Both | CxxAbi::Unknown => None,
        }
    }
}

/// Whether a mangled name is a function or object of a namespace other than `std` (`_ZN3c10…`,
/// `_ZNK2at…`, `_Z9free_func…`). libstdc++'s own symbols, which torch's libraries carry in both
/// ABIs (`std::logic_error`'s constructors), say nothing about the library's own interface.
fn outside_std(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("_Z") else {
        return false;
    };
    let rest = rest.strip_prefix('N').unwrap_or(rest);
    let rest = rest.trim_start_matches(['r', 'V', 'K', 'R', 'O']);
    rest.starts_with(|c: char| c.is_ascii_digit())
}

fn demangles_with_old_string(name: &str) -> bool {
    demangle(name).is_some_and(|d| d.contains("std::string") || d.contains("std::basic_string<"))
}

/// `name` demangled (`c10::Error::Error(…)`), or None when it is not a C++ name the demangler reads.
pub fn demangle(name: &str) -> Option<String> {
    let symbol = cpp_demangle::Symbol::new(name).ok()?;
    symbol
        .demangle_with_options(&cpp_demangle::DemangleOptions::default())
        .ok()
}

/// Reads the dynamic tables of an ELF file (32- or 64-bit, either byte order).
pub fn read(data: &[u8]) -> Result<DynamicInfo<'_>> {
    read_with(data, Tables::All)
}

/// Reads only what finding an ELF file's libraries takes: `DT_NEEDED`, `DT_SONAME`, RPATH and
/// RUNPATH (no symbols, no versions) — cheap enough for every file the fatbin audit reads.
pub fn read_links(data: &[u8]) -> Result<DynamicInfo<'_>> {
    read_with(data, Tables::Links)
}

/// The owned search facts of one file ([`read_links`]), for reports that outlive its bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Links {
    pub soname: Option<String>,
    pub needed: Vec<String>,
    pub rpath: Vec<String>,
    pub runpath: Vec<String>,
}

impl From<&DynamicInfo<'_>> for Links {
    fn from(info: &DynamicInfo<'_>) -> Links {
        let owned = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
        Links {
            soname: info.soname.map(str::to_string),
            needed: owned(&info.needed),
            rpath: owned(&info.rpath),
            runpath: owned(&info.runpath),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Tables {
    All,
    Links,
}

fn read_with(data: &[u8], tables: Tables) -> Result<DynamicInfo<'_>> {
    if data.get(..4) != Some(&e::ELFMAG[..]) {
        return Err(DynamicError::NotElf);
    }
    // e_ident[EI_CLASS], the byte after the magic.
    match data.get(4).copied() {
        Some(c) if c == e::ELFCLASS64.0 => read_as::<FileHeader64<Endianness>>(data, true, tables),
        Some(c) if c == e::ELFCLASS32.0 => read_as::<FileHeader32<Endianness>>(data, false, tables),
        _ => Err(DynamicError::Malformed("unknown ELF class".into())),
    }
}

fn text<'a>(bytes: &'a [u8], what: &'static str) -> Result<&'a str> {
    std::str::from_utf8(bytes).map_err(|_| DynamicError::NotUtf8 { what })
}

fn read_as<Elf: FileHeader<Endian = Endianness>>(
    data: &[u8],
    is_64: bool,
    tables: Tables,
) -> Result<DynamicInfo<'_>> {
    let header = Elf::parse(data)?;
    let endian = header.endian()?;
    let sections = header.sections(endian, data)?;
    let mut info = DynamicInfo {
        is_64,
        machine: header.e_machine(endian).0,
        ..DynamicInfo::default()
    };

    let dynamic = sections.dynamic_table(endian, data)?;
    for entry in &dynamic {
        let list = match entry.tag {
            e::DT_NEEDED => {
                info.needed
                    .push(text(dynamic.string(entry)?, "a DT_NEEDED name")?);
                continue;
            }
            e::DT_SONAME => {
                info.soname = Some(text(dynamic.string(entry)?, "the DT_SONAME")?);
                continue;
            }
            e::DT_RPATH => &mut info.rpath,
            e::DT_RUNPATH => &mut info.runpath,
            _ => continue,
        };
        let path = text(dynamic.string(entry)?, "a DT_RPATH/DT_RUNPATH entry")?;
        list.extend(path.split(':').filter(|p| !p.is_empty()));
    }

    if tables == Tables::Links {
        return Ok(info);
    }

    let symbols = sections.symbols(endian, data, e::SHT_DYNSYM)?;
    let versions = sections.versions(endian, data)?;
    for (index, sym) in symbols.enumerate() {
        if index.0 == 0 || sym.st_bind() == e::STB_LOCAL {
            continue;
        }
        let name = text(symbols.symbol_name(endian, sym)?, "a dynamic symbol name")?;
        if name.is_empty() {
            continue;
        }
        let (version, hidden) = match &versions {
            Some(table) => symbol_version(table, endian, index)?,
            None => (None, false),
        };
        let defined = sym.st_shndx(endian) != e::SHN_UNDEF;
        info.symbols.push(Symbol {
            name,
            version,
            hidden: defined && hidden,
            defined,
            weak: sym.st_bind() == e::STB_WEAK,
            kind: match sym.st_type() {
                e::STT_FUNC | e::STT_GNU_IFUNC => SymbolKind::Function,
                e::STT_OBJECT | e::STT_COMMON => SymbolKind::Object,
                e::STT_TLS => SymbolKind::Tls,
                _ => SymbolKind::Other,
            },
        });
    }

    for (_, section) in sections.enumerate() {
        if let Some((mut needs, link)) = section.gnu_verneed(endian, data)? {
            let strings = sections.strings(endian, data, link)?;
            while let Some((need, mut auxes)) = needs.next()? {
                let mut entry = VersionNeed {
                    file: text(need.file(endian, strings)?, "a version-needed file name")?,
                    versions: Vec::new(),
                };
                while let Some(aux) = auxes.next()? {
                    let name = text(aux.name(endian, strings)?, "a needed version name")?;
                    let weak = aux.vna_flags.get(endian).contains(e::VER_FLG_WEAK);
                    entry.versions.push((name, weak));
                }
                info.version_needs.push(entry);
            }
        }
        if let Some((mut defs, link)) = section.gnu_verdef(endian, data)? {
            let strings = sections.strings(endian, data, link)?;
            while let Some((def, mut auxes)) = defs.next()? {
                if def.vd_flags.get(endian).contains(e::VER_FLG_BASE) {
                    continue;
                }
                if let Some(aux) = auxes.next()? {
                    info.version_defs
                        .push(text(aux.name(endian, strings)?, "a defined version name")?);
                }
            }
        }
    }
    Ok(info)
}

/// A symbol's version name and whether it is hidden (non-default), from `.gnu.version`.
fn symbol_version<'a, Elf: FileHeader<Endian = Endianness>>(
    table: &object::read::elf::VersionTable<'a, Elf>,
    endian: Endianness,
    index: SymbolIndex,
) -> Result<(Option<&'a str>, bool)> {
    let versym = table.version_index(endian, index);
    let version = table.version(versym.index())?;
    let name = version
        .map(|v| text(v.name(), "a symbol version name"))
        .transpose()?;
    Ok((name, versym.is_hidden()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_string_abi_shows_in_mangled_names() {
        // c10::Error::Error(std::string, …) under each ABI, as torch's own libc10 exports it.
        let old = "_ZN3c105ErrorC1ESsSs";
        let new = "_ZN3c105ErrorC1ENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEES6_";
        assert_eq!(CxxAbi::of([old].into_iter()), CxxAbi::PreCxx11);
        assert_eq!(CxxAbi::of([new].into_iter()), CxxAbi::Cxx11);
        assert_eq!(CxxAbi::of([old, new].into_iter()), CxxAbi::Both);
        // `Ss` inside an identifier is not a string: `c10::SsaValue::f()`.
        assert_eq!(
            CxxAbi::of(["_ZN3c108SsaValue1fEv"].into_iter()),
            CxxAbi::Unknown
        );
        assert_eq!(
            CxxAbi::of(["PyInit__C", "memcpy"].into_iter()),
            CxxAbi::Unknown
        );
        // libstdc++'s own symbols (carried statically by torch 2.6's libc10) do not count.
        let std_new =
            "_ZGTtNSt11logic_errorC1ERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE";
        assert_eq!(
            CxxAbi::of([old, std_new, "_ZNKSs4sizeEv"].into_iter()),
            CxxAbi::PreCxx11
        );
        assert_eq!(
            CxxAbi::of(["_ZNK3c1010TensorImpl4sizeEl", "_Z3fooSs"].into_iter()),
            CxxAbi::PreCxx11
        );
    }

    #[test]
    fn hostile_bytes_are_errors_not_panics() {
        assert_eq!(read(b""), Err(DynamicError::NotElf));
        assert_eq!(
            read(b"\x7fELF"),
            Err(DynamicError::Malformed("unknown ELF class".into()))
        );
        let mut header = vec![0u8; 64];
        header[..4].copy_from_slice(&e::ELFMAG);
        header[4] = e::ELFCLASS64.0;
        header[5] = e::ELFDATA2LSB.0;
        header[6] = 1;
        for cut in [5, 16, 63, 64] {
            assert!(read(&header[..cut]).is_err() || cut == 64);
        }
        // A section table that points past the end.
        header[0x28] = 0xff; // e_shoff
        header[0x3c] = 3; // e_shnum
        header[0x3a] = 64; // e_shentsize
        assert!(read(&header).is_err());
    }
}
