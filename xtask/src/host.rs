//! This machine as a build host: its NVIDIA driver and GPUs (as `nvidia-smi` and the kernel module
//! report them), its cores and available memory, its host C++ compilers, its free disk. The one
//! place archsmith asks; nothing here interprets the answers (the knowledge base does).

use crate::cuda_arch::Cc;
use crate::process::{is_executable, shell, which, Cmd};
use crate::version::Version;
use std::path::{Path, PathBuf};

/// One GPU as `nvidia-smi --query-gpu=name,compute_cap,driver_version,pci.device_id` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmiGpu {
    pub name: String,
    /// None when nvidia-smi prints no compute capability (drivers before 510 have no `compute_cap`).
    pub cc: Option<Cc>,
    pub driver: Option<Version>,
    /// The PCI device ID (`0x268410DE` → 0x2684), which names the chip whatever the driver.
    pub device_id: Option<u16>,
}

/// Every GPU nvidia-smi lists; None without nvidia-smi, or when it fails (no driver loaded).
pub fn nvidia_smi() -> Option<Vec<SmiGpu>> {
    let smi = which("nvidia-smi")?;
    let sh = shell().ok()?;
    let query = "--query-gpu=name,compute_cap,driver_version,pci.device_id";
    let out = Cmd::from(xshell::cmd!(sh, "{smi} {query} --format=csv,noheader"))
        .read()
        .ok()?;
    Some(parse_nvidia_smi(&out))
}

/// Parses nvidia-smi's CSV lines (`NVIDIA H100 80GB HBM3, 9.0, 570.124.06, 0x233010DE`; the
/// device ID column may be absent).
pub fn parse_nvidia_smi(text: &str) -> Vec<SmiGpu> {
    text.lines()
        .filter_map(|line| {
            let cols: Vec<&str> = line.split(',').map(str::trim).collect();
            let (name, cc, driver, id) = match cols.as_slice() {
                [name, cc, driver] => (name, cc, driver, None),
                [name, cc, driver, id] => (name, cc, driver, Some(*id)),
                _ => return None,
            };
            Some(SmiGpu {
                name: name.to_string(),
                cc: cc.parse().ok(),
                driver: driver.parse().ok(),
                device_id: id.and_then(smi_device_id),
            })
        })
        .collect()
}

/// `0x268410DE` (device in the high half, vendor in the low) → 0x2684, for NVIDIA's vendor only.
fn smi_device_id(text: &str) -> Option<u16> {
    let v = u32::from_str_radix(text.strip_prefix("0x").unwrap_or(text), 16).ok()?;
    ((v & 0xffff) == 0x10de).then_some((v >> 16) as u16)
}

/// The device IDs of the NVIDIA display controllers under `sys` (`/sys` on a real machine):
/// `bus/pci/devices/*/{vendor,class,device}`. Seen with no driver loaded, or no nvidia-smi.
pub fn pci_gpus(sys: &Path) -> Vec<u16> {
    let read_hex = |p: PathBuf| -> Option<u32> {
        let t = std::fs::read_to_string(p).ok()?;
        u32::from_str_radix(t.trim().trim_start_matches("0x"), 16).ok()
    };
    let mut ids: Vec<u16> = std::fs::read_dir(sys.join("bus/pci/devices"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|d| read_hex(d.join("vendor")) == Some(0x10de))
        // Display controllers (class 0x03xxxx): not the GPU's audio or USB functions.
        .filter(|d| read_hex(d.join("class")).is_some_and(|c| c >> 16 == 0x03))
        .filter_map(|d| read_hex(d.join("device")).and_then(|v| u16::try_from(v).ok()))
        .collect();
    ids.sort_unstable();
    ids
}

/// The loaded kernel module's version from `/proc/driver/nvidia/version` (present without
/// nvidia-smi, e.g. in containers that mount only the driver).
pub fn kernel_module_driver() -> Option<Version> {
    let text = std::fs::read_to_string("/proc/driver/nvidia/version").ok()?;
    parse_proc_version(&text)
}

/// "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.124.06  ..." → 570.124.06.
pub fn parse_proc_version(text: &str) -> Option<Version> {
    text.split_whitespace().find_map(|w| {
        w.parse::<Version>()
            .ok()
            .filter(|v| v.parts().len() >= 2 && v.major() >= 100)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake sysfs: an NVIDIA GPU with its audio function, and another vendor's GPU.
    #[test]
    fn nvidia_display_controllers_from_sysfs() {
        let sys = tempfile::tempdir().unwrap();
        for (dev, vendor, class, device) in [
            ("0000:01:00.0", "0x10de", "0x030000", "0x2684"),
            ("0000:01:00.1", "0x10de", "0x040300", "0x22ba"),
            ("0000:02:00.0", "0x1002", "0x030000", "0x744c"),
            ("0000:03:00.0", "0x10de", "0x030200", "0x1eb8"),
        ] {
            let d = sys.path().join("bus/pci/devices").join(dev);
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("vendor"), format!("{vendor}\n")).unwrap();
            std::fs::write(d.join("class"), format!("{class}\n")).unwrap();
            std::fs::write(d.join("device"), format!("{device}\n")).unwrap();
        }
        assert_eq!(pci_gpus(sys.path()), [0x1eb8, 0x2684]);
        assert!(pci_gpus(&sys.path().join("nonexistent")).is_empty());
    }

    #[test]
    fn parses_nvidia_smi_and_the_kernel_module_version() {
        let gpus = parse_nvidia_smi(
            "NVIDIA H100 80GB HBM3, 9.0, 570.124.06\nTesla K80, [N/A], 470.161.03\ngarbage\nNVIDIA GeForce RTX 4090, 8.9, 550.54.14, 0x268410DE\n",
        );
        assert_eq!(gpus.len(), 3);
        assert_eq!(gpus[2].device_id, Some(0x2684));
        assert_eq!(gpus[0].device_id, None);
        assert_eq!(gpus[0].cc, Some("9.0".parse().unwrap()));
        assert_eq!(gpus[0].driver, Some("570.124.06".parse().unwrap()));
        assert_eq!(gpus[1].cc, None);
        let v = parse_proc_version(
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.124.06  Wed Feb 26 2025\nGCC version:  gcc version 12.2.0\n",
        );
        assert_eq!(v, Some("570.124.06".parse().unwrap()));
    }
}

/// `MemAvailable` from /proc/meminfo in GiB (8 GiB when unreadable, a cautious guess).
pub fn mem_available_gib() -> f64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("MemAvailable:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map(|kb| kb / (1024.0 * 1024.0))
        .unwrap_or(8.0)
}

pub fn cores() -> u32 {
    std::thread::available_parallelism()
        .map(|n| n.get() as u32)
        .unwrap_or(1)
}

/// Free space, in GiB, on the file system holding `path` (its nearest existing ancestor), from
/// `df`; None when it cannot be read.
pub fn free_disk_gib(path: &Path) -> Option<f64> {
    let mut p = path;
    while !p.exists() {
        p = p.parent()?;
    }
    let out = Cmd::new("df").args(["-Pk"]).arg(p).read().ok()?;
    let kb: f64 = out
        .lines()
        .nth(1)?
        .split_whitespace()
        .nth(3)?
        .parse()
        .ok()?;
    Some(kb / (1024.0 * 1024.0))
}

/// Which compiler family a host compiler is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CompilerFamily {
    Gcc,
    Clang,
}

/// A C++ compiler on `PATH`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct HostCompiler {
    /// The name it was found by (`g++`, `g++-11`, `clang++-14`).
    pub name: String,
    pub path: PathBuf,
    pub family: CompilerFamily,
    /// Its full version (`12.2.0`), from `-dumpfullversion` (gcc) or `-dumpversion`.
    pub version: Option<Version>,
}

impl HostCompiler {
    pub fn major(&self) -> Option<u32> {
        self.version.as_ref().map(|v| v.major())
    }

    /// The C compiler of the same installation (`g++-11` → `gcc-11`, `clang++` → `clang`), if
    /// it exists beside it.
    pub fn c_compiler(&self) -> Option<PathBuf> {
        let name = self.path.file_name()?.to_str()?;
        let c = match self.family {
            CompilerFamily::Gcc => name.replacen("g++", "gcc", 1),
            CompilerFamily::Clang => name.replacen("clang++", "clang", 1),
        };
        let p = self.path.with_file_name(c);
        is_executable(&p).then_some(p)
    }
}

/// Every `g++`, `g++-N`, `clang++` and `clang++-N` on `PATH` (first of each name wins), newest
/// version first within a family; the unversioned names first when they tie.
pub fn cxx_compilers() -> Vec<HostCompiler> {
    let mut names: Vec<String> = vec!["g++".into(), "clang++".into()];
    for dir in std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()) {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in rd.flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            let versioned = ["g++-", "clang++-"].iter().any(|p| {
                n.strip_prefix(p)
                    .is_some_and(|v| !v.is_empty() && v.chars().all(|c| c.is_ascii_digit()))
            });
            if versioned && !names.contains(&n) {
                names.push(n);
            }
        }
    }
    let mut out: Vec<HostCompiler> = names
        .into_iter()
        .filter_map(|name| {
            let path = which(&name)?;
            let family = if name.starts_with("clang") {
                CompilerFamily::Clang
            } else {
                CompilerFamily::Gcc
            };
            Some(describe_compiler(name, path, family))
        })
        .collect();
    out.sort_by(|a, b| {
        (a.family == CompilerFamily::Clang)
            .cmp(&(b.family == CompilerFamily::Clang))
            .then(b.version.cmp(&a.version))
            .then(a.name.len().cmp(&b.name.len()))
    });
    out
}

/// Asks a compiler its version.
pub fn describe_compiler(name: String, path: PathBuf, family: CompilerFamily) -> HostCompiler {
    let ask = |flag: &str| Cmd::new(&path).arg(flag).read().ok();
    let text = match family {
        CompilerFamily::Gcc => ask("-dumpfullversion").or_else(|| ask("-dumpversion")),
        CompilerFamily::Clang => ask("-dumpversion"),
    };
    let version = text.and_then(|t| t.trim().parse::<Version>().ok());
    HostCompiler {
        name,
        path,
        family,
        version,
    }
}
