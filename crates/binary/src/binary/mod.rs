//! The one binary reader: which SASS (cubins) and PTX an ELF file, a directory of them, or a wheel
//! really carries, read from the fatbin headers in pure Rust (no cuobjdump, no CUDA install).
//!
//! * [`elf`]: a zero-copy ELF section reader.
//! * [`dynamic`]: what an ELF needs from the dynamic linker and offers it (sonames, RPATH/RUNPATH,
//!   versioned dynamic symbols), read with `object`, for the load check.
//! * [`fatbin`]: containers, entries and CUDA 13 concatenated entries of `.nv_fatbin` /
//!   `__nv_relfatbin`, plus on-request decompression (LZ4 block, zstd frame).
//! * [`audit_elf`]: one ELF file → [`ElfAudit`] (images per section and container).
//! * [`input`]: paths → files (ELF files, directories walked, wheel members read in memory, in
//!   parallel) → [`FileAudit`]s.
//! * [`extract`]: writes the decompressed cubins/PTX of a file (`--extract DIR`).
//! * [`kernel_names`]: the kernel names of chosen containers (what a partly covered GPU cannot launch).
//!
//! Which section counts follows cuobjdump's default: the executable `.nv_fatbin` when the file
//! has one (that is what the CUDA runtime loads), else the relocatable `__nv_relfatbin` (objects
//! built with `-rdc=true`). Both are read and reported.

pub mod device_toolkit;
pub mod dynamic;
pub mod elf;
pub mod error;
pub mod expect;
pub mod extract;
pub mod fatbin;
pub mod input;
pub mod kernel_names;
pub mod platform_tag;
// Test fixtures, not part of the shipped reader: compiled for unit tests and, through the
// `fixtures` feature that the integration tests turn on, for them.
#[cfg(any(test, feature = "fixtures"))]
pub mod synth;

pub use error::{Error, ErrorKind};
pub use fatbin::{Compression, ImageArch, Kind};
pub use input::{audit_paths, FileAudit, Outcome};

use std::collections::BTreeMap;

/// The section the CUDA runtime loads (`nvcc` without `-rdc`, and device-linked code).
pub const EXEC_SECTION: &str = ".nv_fatbin";
/// Pre-device-link fatbins (`-rdc=true` objects and libraries).
pub const REL_SECTION: &str = "__nv_relfatbin";

/// One loadable or linkable image: a cubin, PTX or IR, possibly inside a concatenated entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Image {
    pub kind: Kind,
    pub arch: ImageArch,
    pub compression: Compression,
    /// File offset of the entry (or concatenated sub-entry) header.
    pub offset: u64,
    /// Index of the container within its section.
    pub container: usize,
    /// True when the image is a sub-entry of a CUDA 13 concatenated entry.
    pub concatenated: bool,
    /// Bytes it takes in the file: its entry's header and (compressed) payload; a concatenated
    /// entry's bytes shared out by each sub-entry's decompressed size (what each arch costs).
    pub file_bytes: u64,
}

/// What one fatbin section holds.
#[derive(Clone, Debug)]
pub struct SectionAudit {
    pub name: &'static str,
    /// File offset and size of the section.
    pub offset: u64,
    pub size: u64,
    pub containers: usize,
    pub images: Vec<Image>,
    /// Whether this section's images are the ones counted (see the module docs).
    pub counted: bool,
}

/// What one ELF file holds: its fatbin sections, in file order of discovery.
#[derive(Clone, Debug, Default)]
pub struct ElfAudit {
    pub sections: Vec<SectionAudit>,
    /// Kernel names of the counted section's containers that cannot run on a CC the reader was
    /// asked about ([`input::Options::kernels_for`]), by container index; empty unless asked.
    pub kernels: BTreeMap<usize, Vec<String>>,
    /// What the dynamic linker reads to find the file's libraries (None for an ELF file without
    /// a dynamic table, or one whose table does not parse): the wheel checks hold a wheel's
    /// libraries to reaching each other from these.
    pub links: Option<dynamic::Links>,
}

/// Reads the fatbin sections of an ELF file from its headers (nothing is decompressed).
pub fn audit_elf(data: &[u8]) -> Result<ElfAudit, Error> {
    let elf = elf::Elf::parse(data)?;
    let mut sections = Vec::new();
    for name in [EXEC_SECTION, REL_SECTION] {
        let Some(sec) = elf.section_by_name(name.as_bytes())? else {
            continue;
        };
        let mut images = Vec::new();
        let mut containers = 0;
        for (ci, c) in fatbin::containers(sec.data, sec.offset).enumerate() {
            let c = c?;
            containers += 1;
            for e in c.entries() {
                let e = e?;
                let entry_bytes = (e.header.len() + e.payload.len()) as u64;
                if e.kind == Kind::Concat {
                    let compression = e.compression();
                    let subs = e.sub_entries()?;
                    let whole: u64 = subs.iter().map(|s| s.size).sum::<u64>().max(1);
                    for s in subs {
                        images.push(Image {
                            kind: s.kind,
                            arch: s.arch,
                            compression,
                            offset: s.offset,
                            container: ci,
                            concatenated: true,
                            file_bytes: (u128::from(entry_bytes) * u128::from(s.size)
                                / u128::from(whole)) as u64,
                        });
                    }
                } else {
                    images.push(Image {
                        kind: e.kind,
                        arch: e.arch,
                        compression: e.compression(),
                        offset: e.offset,
                        container: ci,
                        concatenated: false,
                        file_bytes: entry_bytes,
                    });
                }
            }
        }
        sections.push(SectionAudit {
            name,
            offset: sec.offset,
            size: sec.size,
            containers,
            images,
            counted: false,
        });
    }
    // cuobjdump's rule: the executable section when it has bytes, else the relocatable one.
    let counted = sections
        .iter()
        .position(|s| s.name == EXEC_SECTION && s.size > 0)
        .or_else(|| sections.iter().position(|s| s.name == REL_SECTION))
        .or(if sections.is_empty() { None } else { Some(0) });
    if let Some(i) = counted {
        sections[i].counted = true;
    }
    Ok(ElfAudit {
        sections,
        kernels: BTreeMap::new(),
        links: None,
    })
}

impl SectionAudit {
    /// File bytes of the images of `kind` per arch.
    pub fn bytes(&self, kind: Kind) -> BTreeMap<ImageArch, u64> {
        let mut m = BTreeMap::new();
        for i in self.images.iter().filter(|i| i.kind == kind) {
            *m.entry(i.arch).or_insert(0) += i.file_bytes;
        }
        m
    }

    /// Images of `kind` per arch, in arch order.
    pub fn counts(&self, kind: Kind) -> BTreeMap<ImageArch, usize> {
        let mut m = BTreeMap::new();
        for i in self.images.iter().filter(|i| i.kind == kind) {
            *m.entry(i.arch).or_insert(0) += 1;
        }
        m
    }

    /// Containers holding at least one image of `kind` for `arch`.
    pub fn containers_with(&self, kind: Kind, arch: ImageArch) -> usize {
        let mut seen: Vec<usize> = self
            .images
            .iter()
            .filter(|i| i.kind == kind && i.arch == arch)
            .map(|i| i.container)
            .collect();
        seen.dedup();
        seen.len()
    }

    /// Containers holding loadable code (a cubin or PTX); IR-only containers are for device links.
    /// The loadable images (SASS, PTX) of each container, for the runs-on rules: a kernel runs
    /// on a GPU only if its own container (compilation unit) has an image for it.
    pub fn container_images(&self) -> BTreeMap<usize, Vec<crate::arch::compat::Image>> {
        use crate::arch::compat::Image as Loadable;
        let mut per: BTreeMap<usize, Vec<Loadable>> = BTreeMap::new();
        for img in &self.images {
            let Some(arch) = img.arch.arch() else {
                continue;
            };
            let image = match img.kind {
                Kind::Elf => Loadable::sass(arch),
                Kind::Ptx => Loadable::ptx(arch),
                _ => continue,
            };
            per.entry(img.container).or_default().push(image);
        }
        per
    }

    /// Containers with no image that runs on `cc` (the driver assumed new enough for PTX).
    pub fn containers_without(
        &self,
        cc: crate::cuda_arch::Cc,
    ) -> std::collections::BTreeSet<usize> {
        let jit = crate::arch::compat::PtxJit::default();
        self.container_images()
            .into_iter()
            .filter(|(_, images)| !crate::arch::compat::runs_on(images, cc, &jit).runs)
            .map(|(i, _)| i)
            .collect()
    }

    pub fn code_containers(&self) -> usize {
        let mut seen: Vec<usize> = self
            .images
            .iter()
            .filter(|i| matches!(i.kind, Kind::Elf | Kind::Ptx))
            .map(|i| i.container)
            .collect();
        seen.dedup();
        seen.len()
    }
}

impl ElfAudit {
    /// The section whose images are counted, if the file has any fatbin section.
    pub fn counted(&self) -> Option<&SectionAudit> {
        self.sections.iter().find(|s| s.counted)
    }

    /// True when any fatbin section holds at least one image of any kind.
    pub fn has_device_code(&self) -> bool {
        self.sections.iter().any(|s| !s.images.is_empty())
    }

    /// Counted images of `kind` per arch (empty when there is no fatbin section).
    pub fn counts(&self, kind: Kind) -> BTreeMap<ImageArch, usize> {
        self.counted().map(|s| s.counts(kind)).unwrap_or_default()
    }

    /// File bytes of the counted images of `kind` per arch (empty without a fatbin section).
    pub fn bytes(&self, kind: Kind) -> BTreeMap<ImageArch, u64> {
        self.counted().map(|s| s.bytes(kind)).unwrap_or_default()
    }

    /// Counted images per compression kind.
    pub fn compression(&self) -> BTreeMap<Compression, usize> {
        let mut m = BTreeMap::new();
        for i in self
            .counted()
            .map(|s| s.images.as_slice())
            .unwrap_or_default()
        {
            *m.entry(i.compression).or_insert(0) += 1;
        }
        m
    }
}

#[cfg(test)]
mod tests;
