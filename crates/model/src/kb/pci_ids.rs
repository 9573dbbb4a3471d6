//! NVIDIA's PCI devices from a `pci.ids` file (the PCI ID Repository, as Debian's `pci.ids`
//! package and hwdata install it): each device ID with its chip and product names, so that a GPU
//! named by any of those products, or seen only as a device ID (`nvidia-smi`'s `pci.device_id`,
//! `/sys/bus/pci/devices/*/device` where no driver is loaded), resolves to a compute capability
//! through the knowledge base's `[[gpu_chip]]` rows.
//!
//! archsmith carries the NVIDIA part of a current pci.ids (`data/pci-ids-nvidia.txt`, with its
//! version and source; `kb check --gpus` names what Debian's current package has that it lacks),
//! because build hosts and CI images are where an old pci.ids lives (Debian bookworm's is of
//! 2023-04: no L20, no Blackwell). The machine's own file (`ARCHSMITH_PCI_IDS`, else
//! `/usr/share/misc/pci.ids`, else `/usr/share/hwdata/pci.ids`) adds to it: the devices the
//! carried copy lacks, and, where the machine's file is the newer one, its lines win.

use super::KnowledgeBase;
use crate::cuda_arch::Cc;
use std::path::PathBuf;

/// NVIDIA's PCI vendor ID.
pub const NVIDIA_VENDOR: u16 = 0x10de;

/// One NVIDIA device line: `2684  AD102 [GeForce RTX 4090]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    pub id: u16,
    /// `AD102`, as written (with `GL`, `M` or a revision letter).
    pub chip: String,
    /// The bracketed names, split on `/`: `[L6000 / RTX 6000 Ada Generation]` gives two.
    pub names: Vec<String>,
}

/// The NVIDIA devices of a pci.ids text. Lines that are not `\tXXXX  TEXT` under vendor 10de are
/// skipped; nothing in the text can make this fail.
pub fn nvidia_devices(text: &str) -> Vec<Device> {
    let mut out = Vec::new();
    let mut in_nvidia = false;
    for line in text.lines() {
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        if !line.starts_with('\t') {
            // A vendor line (`10de  NVIDIA Corporation`) or a class section (`C 03 …`).
            in_nvidia = parse_id(line.get(..4)) == Some(NVIDIA_VENDOR);
            continue;
        }
        if !in_nvidia || line.starts_with("\t\t") {
            continue;
        }
        let body = &line[1..];
        let Some(id) = parse_id(body.get(..4)) else {
            continue;
        };
        let rest = body.get(4..).unwrap_or("").trim();
        let (chip, names) = match rest.find('[') {
            Some(i) => {
                let inside = rest[i + 1..].trim_end().trim_end_matches(']');
                let names = inside
                    .split('/')
                    .map(|n| n.trim().to_string())
                    .filter(|n| !n.is_empty())
                    .collect();
                (rest[..i].trim().to_string(), names)
            }
            None => (rest.to_string(), Vec::new()),
        };
        out.push(Device { id, chip, names });
    }
    out
}

fn parse_id(text: Option<&str>) -> Option<u16> {
    let t = text?;
    if t.len() != 4 || !t.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u16::from_str_radix(t, 16).ok()
}

/// The knowledge base's chip row for a chip as pci.ids writes it: exact (`GA10B`, a Tegra), else
/// its base, the letters and digits (`AD102GL` → `AD102`, `GK110B` → `GK110`, `G96C` → `G96`).
pub fn chip_cc(kb: &KnowledgeBase, chip: &str) -> Option<Cc> {
    let exact = kb.gpu_chips.iter().find(|c| c.chip == chip);
    let letters = chip.bytes().take_while(u8::is_ascii_uppercase).count();
    let digits = chip[letters..]
        .bytes()
        .take_while(u8::is_ascii_digit)
        .count();
    let base = (digits >= 2).then(|| &chip[..letters + digits]);
    let row = exact.or_else(|| kb.gpu_chips.iter().find(|c| Some(c.chip.as_str()) == base))?;
    row.cc.parse().ok()
}

/// The NVIDIA device lines of a current pci.ids, carried with archsmith.
pub const CARRIED: &str = include_str!("../../data/pci-ids-nvidia.txt");

/// The `# Version: 2026.10.24` line of a pci.ids text (the file's date as a sortable string).
pub fn file_version(text: &str) -> Option<&str> {
    text.lines()
        .take(20)
        .filter_map(|l| l.trim_start_matches('#').trim().strip_prefix("Version:"))
        .map(str::trim)
        .find(|v| !v.is_empty())
}

/// The carried devices with a machine's own file laid over them: each device ID once, the line
/// of the newer file where both have it (a file without a version line counts as older).
pub fn merged(carried: &str, machine: Option<&str>) -> Vec<Device> {
    let mut devices = nvidia_devices(carried);
    let Some(machine) = machine else {
        return devices;
    };
    let machine_newer = file_version(machine) > file_version(carried);
    let mut at: std::collections::HashMap<u16, usize> =
        devices.iter().enumerate().map(|(i, d)| (d.id, i)).collect();
    for d in nvidia_devices(machine) {
        match at.get(&d.id) {
            Some(&i) if machine_newer => devices[i] = d,
            Some(_) => {}
            None => {
                at.insert(d.id, devices.len());
                devices.push(d);
            }
        }
    }
    devices
}

/// The pci.ids file of this machine, where there is one.
pub fn system_file() -> Option<PathBuf> {
    std::env::var_os("ARCHSMITH_PCI_IDS")
        .map(PathBuf::from)
        .into_iter()
        .chain(["/usr/share/misc/pci.ids", "/usr/share/hwdata/pci.ids"].map(PathBuf::from))
        .find(|p| p.is_file())
}

/// The NVIDIA devices archsmith knows on this machine: the carried copy with the machine's
/// pci.ids laid over it ([`merged`]), read once.
pub fn system_devices() -> &'static [Device] {
    static DEVICES: std::sync::OnceLock<Vec<Device>> = std::sync::OnceLock::new();
    DEVICES.get_or_init(|| {
        let machine = system_file()
            .and_then(|p| std::fs::read(p).ok())
            .map(|b| String::from_utf8_lossy(&b).into_owned());
        merged(CARRIED, machine.as_deref())
    })
}

/// A GPU found by device ID: its first product name (or the chip), and its CC.
pub fn by_device_id<'a>(
    kb: &KnowledgeBase,
    devices: &'a [Device],
    id: u16,
) -> Option<(&'a Device, Cc)> {
    let d = devices.iter().find(|d| d.id == id)?;
    Some((d, chip_cc(kb, &d.chip)?))
}

/// A GPU found by one of its product names (normalized as `--gpu` names are).
pub fn by_name(kb: &KnowledgeBase, devices: &[Device], query: &str) -> Option<(String, Cc)> {
    let q = super::normalize_gpu_name(query);
    if q.is_empty() {
        return None;
    }
    devices.iter().find_map(|d| {
        let name = d.names.iter().find(|n| super::normalize_gpu_name(n) == q)?;
        Some((name.clone(), chip_cc(kb, &d.chip)?))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kb::kb;

    const SAMPLE: &str = "# comment\n10de  NVIDIA Corporation\n\t2684  AD102 [GeForce RTX 4090]\n\t\t10de 167c  GeForce RTX 4090 Founders Edition\n\t26b1  AD102GL [L6000 / RTX 6000 Ada Generation]\n\t1eb8  TU104GL [Tesla T4]\n\t2302  GH100\n\t1e07  TU102 [GeForce RTX 2080 Ti Rev. A]\n10df  Emulex Corporation\n\t2684  NOT NVIDIA [X]\nC 03  Display controller\n";

    #[test]
    fn nvidia_devices_with_their_chips_and_names() {
        let d = nvidia_devices(SAMPLE);
        assert_eq!(d.len(), 5, "{d:?}");
        assert_eq!(d[1].chip, "AD102GL");
        assert_eq!(d[1].names, ["L6000", "RTX 6000 Ada Generation"]);
        assert!(d[3].names.is_empty());
        let kb = kb();
        let (dev, cc) = by_device_id(kb, &d, 0x2684).unwrap();
        assert_eq!(
            (dev.names[0].as_str(), cc.to_string().as_str()),
            ("GeForce RTX 4090", "8.9")
        );
        assert_eq!(
            by_name(kb, &d, "NVIDIA Tesla T4").unwrap().1.to_string(),
            "7.5"
        );
        assert_eq!(by_name(kb, &d, "L6000").unwrap().1.to_string(), "8.9");
        assert!(by_device_id(kb, &d, 0x9999).is_none());
    }

    #[test]
    fn chips_resolve_through_their_base() {
        let kb = kb();
        for (chip, cc) in [
            ("AD102GL", "8.9"),
            ("GK110B", "3.5"),
            ("GA10B", "8.7"),
            ("TU106B", "7.5"),
            ("GB202", "12.0"),
        ] {
            assert_eq!(chip_cc(kb, chip).unwrap().to_string(), cc, "{chip}");
        }
        assert_eq!(chip_cc(kb, "G96C").unwrap().to_string(), "1.1");
        assert!(chip_cc(kb, "NV43").is_none());
        assert!(chip_cc(kb, "").is_none());
    }

    /// What issue 50 found: on a host whose pci.ids predates 2024 (Debian bookworm's, 2023-04),
    /// the cards of 2024–2025 must still resolve through the carried copy.
    #[test]
    fn newer_gpus_resolve_with_an_old_machine_file() {
        let kb = kb();
        let old =
            "# Version: 2023.04.11\n10de  NVIDIA Corporation\n\t2684  AD102 [GeForce RTX 4090]\n";
        let devices = merged(CARRIED, Some(old));
        for (name, cc) in [
            ("L20", "8.9"),
            ("GeForce RTX 5090", "12.0"),
            ("RTX 4090", "8.9"),
        ] {
            let found = by_name(kb, &devices, name);
            assert_eq!(
                found.map(|f| f.1.to_string()),
                Some(cc.to_string()),
                "{name}"
            );
            // The machine's old file alone does not know the newer ones: the carried copy did it.
        }
        assert!(by_name(kb, &nvidia_devices(old), "L20").is_none());
        assert_eq!(file_version(CARRIED), Some("2026.10.24"));
    }

    #[test]
    fn the_newer_file_wins_and_the_machine_adds_what_the_carried_lacks() {
        let carried =
            "# Version: 2026.10.24\n10de  NVIDIA Corporation\n\t2684  AD102 [GeForce RTX 4090]\n";
        let newer = "#\tVersion: 2027.01.01\n10de  NVIDIA Corporation\n\t2684  AD102 [RTX 4090 Renamed]\n\tffff  GB202 [Future Card]\n";
        let older = "# Version: 2023.04.11\n10de  NVIDIA Corporation\n\t2684  AD102 [Old Name]\n\tfffe  GB202 [Only Here]\n";
        let n = merged(carried, Some(newer));
        assert_eq!(n.len(), 2);
        assert_eq!(n[0].names, ["RTX 4090 Renamed"]);
        let o = merged(carried, Some(older));
        assert_eq!(o[0].names, ["GeForce RTX 4090"]);
        assert_eq!(o[1].names, ["Only Here"]);
    }

    #[test]
    fn hostile_text_never_panics() {
        for text in [
            "\t",
            "10de\n\t",
            "10de  x\n\t26\n\t2684",
            "10de  N\n\tzzzz  [",
            "10de  N\n\t2684  [a/b",
            "\u{1F600}\n\t\u{1F600}",
        ] {
            let _ = nvidia_devices(text);
        }
    }
}
