//! `kb check --gpus`: the GPU rows and the chip table against the PCI ID Repository as Debian
//! packages it (`pci.ids`, unpacked under archsmith's tools; `--pci-ids FILE` reads another copy).
//! Every NVIDIA device there whose chip the knowledge base knows resolves to a compute capability;
//! every `[[gpu]]` row whose name or alias is one of the repository's product names must have the
//! CC its chip has. The coverage is the share of NVIDIA device IDs that resolve. The NVIDIA part
//! archsmith carries (`data/pci-ids-nvidia.txt`) is compared with the file: every device the file
//! has that the carried copy lacks is named, and fails the check where the file is the newer.
//! The default file is Debian sid's package, the newest Debian has.

use crate::cuda_arch::Cc;
use crate::kb::pci_ids::{chip_cc, file_version, nvidia_devices, Device, CARRIED};
use crate::kb::{normalize_gpu_name, KnowledgeBase};
use crate::output::{Exit, Table};
use anyhow::{Context, Result};
use serde::Serialize;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

#[derive(Debug, Serialize)]
pub struct GpuReport {
    pub pci_ids: PathBuf,
    /// NVIDIA device IDs in the file.
    pub devices: usize,
    /// Of those, the ones whose chip resolves to a CC.
    pub resolved: usize,
    /// GPUs of the CUDA era: devices with a product name and a chip from G80 on (not chipsets,
    /// audio functions or pre-CUDA GPUs), and how many of them resolve.
    pub cuda_era_gpus: usize,
    pub cuda_era_resolved: usize,
    /// Chips with no row, with how many device IDs each (pre-CUDA chips and chipsets among them).
    pub unknown_chips: Vec<(String, usize)>,
    /// `[[gpu]]` rows found among the repository's product names, and those whose CC differs.
    pub rows_found: usize,
    pub rows_differ: Vec<RowDiffers>,
    /// `[[gpu]]` rows the file does not name (newer than it, or named otherwise there).
    pub rows_not_found: Vec<String>,
    /// The `Version:` lines of the file read and of the carried copy.
    pub file_version: Option<String>,
    pub carried_version: Option<String>,
    /// Device lines of the file the carried copy lacks or writes otherwise (`26b7 AD102GL [L20]`).
    pub carried_lacks: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct RowDiffers {
    pub row: String,
    pub kb_cc: String,
    pub device: String,
    pub chip_cc: String,
}

impl GpuReport {
    pub fn exit(&self) -> Exit {
        Exit::passed(self.rows_differ.is_empty() && !self.carried_is_stale())
    }

    /// The file is newer than the carried copy and has devices it lacks: refresh the copy.
    pub fn carried_is_stale(&self) -> bool {
        !self.carried_lacks.is_empty() && self.file_version > self.carried_version
    }

    /// CUDA-era GPUs that resolve, as a share of all of them, in percent.
    pub fn coverage(&self) -> f64 {
        if self.cuda_era_gpus == 0 {
            0.0
        } else {
            100.0 * self.cuda_era_resolved as f64 / self.cuda_era_gpus as f64
        }
    }

    pub fn table(&self) -> String {
        let mut t = Table::headerless();
        t.row(["pci.ids".to_string(), self.pci_ids.display().to_string()]);
        t.row([
            "coverage".to_string(),
            format!(
                "{} of {} CUDA-era GPUs (G80 and newer) resolve to a compute capability ({:.1} %); {} of all {} NVIDIA device IDs",
                self.cuda_era_resolved,
                self.cuda_era_gpus,
                self.coverage(),
                self.resolved,
                self.devices
            ),
        ]);
        let unknown: Vec<String> = self
            .unknown_chips
            .iter()
            .take(12)
            .map(|(c, n)| format!("{c} ×{n}"))
            .collect();
        t.row([
            "chips without a row".to_string(),
            format!(
                "{} (of {}; chipsets and pre-CUDA GPUs)",
                unknown.join(", "),
                self.unknown_chips.len()
            ),
        ]);
        t.row([
            "[[gpu]] rows".to_string(),
            format!(
                "{} named in pci.ids, {} differ, {} not named there",
                self.rows_found,
                self.rows_differ.len(),
                self.rows_not_found.len()
            ),
        ]);
        let lacks = if self.carried_lacks.is_empty() {
            "has every NVIDIA device of the file".to_string()
        } else {
            format!(
                "lacks {} device(s) of the file: {}{}",
                self.carried_lacks.len(),
                self.carried_lacks
                    .iter()
                    .take(8)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join("; "),
                if self.carried_lacks.len() > 8 {
                    "; …"
                } else {
                    ""
                }
            )
        };
        t.row([
            "carried copy".to_string(),
            format!(
                "data/pci-ids-nvidia.txt, version {} (file: {}); {lacks}{}",
                self.carried_version.as_deref().unwrap_or("unknown"),
                self.file_version.as_deref().unwrap_or("unknown"),
                if self.carried_is_stale() {
                    ". STALE: replace its device lines with the NVIDIA device lines of this file, and its Version line"
                } else {
                    ""
                }
            ),
        ]);
        for d in &self.rows_differ {
            t.row([
                "DIFFERS".to_string(),
                format!(
                    "{}: knowledge base CC {}, pci.ids {} (chip CC {})",
                    d.row, d.kb_cc, d.device, d.chip_cc
                ),
            ]);
        }
        t.render()
    }
}

/// Debian's pci.ids, downloaded and unpacked once, or `file`.
pub fn pci_ids_file(file: Option<&Path>) -> Result<PathBuf> {
    match file {
        Some(f) => Ok(f.to_path_buf()),
        None => Ok(
            crate::downloads::debian_package_from("pci.ids", Some("sid"))?
                .join("usr/share/misc/pci.ids"),
        ),
    }
}

pub fn check_gpus(kb: &KnowledgeBase, file: &Path) -> Result<GpuReport> {
    let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    let text = String::from_utf8_lossy(&bytes);
    let in_file = nvidia_devices(&text);
    let carried_lacks = lacking(&nvidia_devices(CARRIED), &in_file);
    // Each device with the CC its chip has, looked up once.
    let devices: Vec<(Device, Option<Cc>)> = in_file
        .into_iter()
        .map(|d| {
            let cc = chip_cc(kb, &d.chip);
            (d, cc)
        })
        .collect();
    let resolved = devices.iter().filter(|(_, cc)| cc.is_some()).count();
    let mut unknown: std::collections::BTreeMap<String, usize> = Default::default();
    for (d, _) in devices.iter().filter(|(_, cc)| cc.is_none()) {
        *unknown.entry(d.chip.clone()).or_default() += 1;
    }
    let mut unknown_chips: Vec<(String, usize)> = unknown.into_iter().collect();
    unknown_chips.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let (rows_found, rows_differ, rows_not_found) = compare_rows(kb, &devices);
    let era: Vec<&(Device, Option<Cc>)> = devices
        .iter()
        .filter(|(d, _)| !d.names.is_empty() && cuda_era(&d.chip))
        .collect();
    Ok(GpuReport {
        pci_ids: file.to_path_buf(),
        devices: devices.len(),
        resolved,
        cuda_era_gpus: era.len(),
        cuda_era_resolved: era.iter().filter(|(_, cc)| cc.is_some()).count(),
        unknown_chips,
        rows_found,
        rows_differ,
        rows_not_found,
        file_version: file_version(&text).map(str::to_string),
        carried_version: file_version(CARRIED).map(str::to_string),
        carried_lacks,
    })
}

/// The devices of `file` that `carried` lacks or writes otherwise, as pci.ids lines.
fn lacking(carried: &[Device], file: &[Device]) -> Vec<String> {
    let by_id: std::collections::HashMap<u16, &Device> =
        carried.iter().map(|d| (d.id, d)).collect();
    file.iter()
        .filter(|d| by_id.get(&d.id) != Some(d))
        .map(|d| match d.names.is_empty() {
            true => format!("{:04x} {}", d.id, d.chip),
            false => format!("{:04x} {} [{}]", d.id, d.chip, d.names.join(" / ")),
        })
        .collect()
}

/// A chip of the CUDA era: NVIDIA's chip names from G80 (2006) on.
fn cuda_era(chip: &str) -> bool {
    const FAMILIES: [&str; 13] = [
        "G8", "G9", "GT2", "GF", "GK", "GM", "GP", "GV", "TU", "GA", "AD", "GH", "GB",
    ];
    FAMILIES.iter().any(|f| {
        chip.strip_prefix(f)
            .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
    })
}

/// Each `[[gpu]]` row against the resolved devices whose product names include one of its names.
fn compare_rows(
    kb: &KnowledgeBase,
    devices: &[(Device, Option<Cc>)],
) -> (usize, Vec<RowDiffers>, Vec<String>) {
    let mut found = 0;
    let mut differ = Vec::new();
    let mut not_found = Vec::new();
    for row in &kb.gpus {
        let names: BTreeSet<String> = std::iter::once(&row.name)
            .chain(&row.aliases)
            .map(|n| normalize_gpu_name(n))
            .filter(|n| !n.is_empty())
            .collect();
        let matches: Vec<(&Device, Cc)> = devices
            .iter()
            .filter_map(|(d, cc)| Some((d, (*cc)?)))
            .filter(|(d, _)| {
                d.names
                    .iter()
                    .any(|n| names.contains(&normalize_gpu_name(n)))
            })
            .collect();
        if matches.is_empty() {
            not_found.push(row.name.clone());
            continue;
        }
        found += 1;
        for (d, cc) in matches
            .into_iter()
            .filter(|(_, cc)| cc.to_string() != row.cc)
        {
            differ.push(RowDiffers {
                row: row.name.clone(),
                kb_cc: row.cc.clone(),
                device: format!("{:04x} {} [{}]", d.id, d.chip, d.names.join(" / ")),
                chip_cc: cc.to_string(),
            });
        }
    }
    (found, differ, not_found)
}
