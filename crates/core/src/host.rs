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

    /// A fake cgroup file system: v1's memory hierarchy with the limit on the parent of the
    /// process's group (a Slurm job's step inside its job), v2's with `max` above the limit.
    #[test]
    fn the_tightest_cgroup_limit_up_the_hierarchy_bounds_the_memory() {
        let t = tempfile::tempdir().unwrap();
        let write = |rel: &str, text: &str| {
            let p = t.path().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        const MIB: u64 = 1024 * 1024;
        write(
            "memory/job/step/memory.limit_in_bytes",
            "9223372036854771712\n",
        );
        write(
            "memory/job/step/memory.usage_in_bytes",
            &format!("{}\n", 600 * MIB),
        );
        write(
            "memory/job/memory.limit_in_bytes",
            &format!("{}\n", 1536 * MIB),
        );
        write(
            "memory/job/memory.usage_in_bytes",
            &format!("{}\n", 612 * MIB),
        );
        write(
            "memory/job/memory.stat",
            &format!("cache 1\ntotal_inactive_file {}\n", 100 * MIB),
        );
        let v1 =
            cgroup_memory(t.path(), "12:memory:/job/step\n3:cpu,cpuacct:/job\n0::/\n").unwrap();
        assert_eq!(v1.path, t.path().join("memory/job"));
        assert_eq!((v1.limit_bytes, v1.used_bytes), (1536 * MIB, 512 * MIB));
        let m = Memory {
            host_available_gib: 20.0,
            cgroup: Some(v1),
        };
        assert!((m.available_gib() - 1.0).abs() < 1e-9, "{m:?}");
        assert!(
            m.limit_sentence()
                .starts_with("this process's memory cgroup allows 1.5 GiB ("),
            "{}",
            m.limit_sentence()
        );

        write("slurm/job/memory.max", &format!("{}\n", 2048 * MIB));
        write("slurm/job/memory.current", &format!("{}\n", 1024 * MIB));
        write("slurm/job/memory.stat", "anon 5\ninactive_file 0\n");
        write("slurm/memory.max", "max\n");
        let v2 = cgroup_memory(t.path(), "0::/slurm/job\n").unwrap();
        assert_eq!((v2.limit_bytes, v2.used_bytes), (2048 * MIB, 1024 * MIB));
        // No limit anywhere, or no memory controller named: the host's figure stands.
        assert_eq!(cgroup_memory(t.path(), "0::/slurm\n"), None);
        assert_eq!(cgroup_memory(t.path(), "3:cpu:/job\n"), None);
        assert_eq!(cgroup_memory(t.path(), "garbage"), None);
        let host = Memory {
            host_available_gib: 0.5,
            cgroup: cgroup_memory(t.path(), "0::/slurm/job\n"),
        };
        assert_eq!(
            host.available_gib(),
            0.5,
            "the host's figure when it is lower"
        );
    }

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

/// Memory this process may still use, in GiB: the host's `MemAvailable`, or less where the process
/// runs in a memory cgroup with a limit (a container, a Slurm job, a CI runner). The job models
/// of build-ext, build-torch and the JIT prebuild all size their pools by it: reading only
/// /proc/meminfo, a build inside a 1.5 GiB cgroup on a 24 GiB host started 4 nvcc jobs and the
/// kernel killed them (issue 48).
pub fn mem_available_gib() -> f64 {
    memory().available_gib()
}

/// What [`mem_available_gib`] is made of.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Memory {
    /// `MemAvailable` from /proc/meminfo (8 GiB when unreadable, a cautious guess).
    pub host_available_gib: f64,
    /// The tightest memory cgroup limit over this process's cgroup and its ancestors.
    pub cgroup: Option<CgroupMemory>,
}

/// A memory cgroup's limit and what its processes use of it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CgroupMemory {
    /// The cgroup directory the limit was read from.
    pub path: std::path::PathBuf,
    pub limit_bytes: u64,
    /// Usage less the inactive file cache the kernel reclaims before it kills (as `docker stats`
    /// counts it).
    pub used_bytes: u64,
}

impl Memory {
    /// `memory: 22.6 GiB available`, or with a cgroup limit what builds may use under it.
    pub fn describe(&self) -> String {
        match &self.cgroup {
            None => format!(
                "memory: {:.1} GiB available (no cgroup limit)",
                self.host_available_gib
            ),
            Some(c) => format!(
                "memory: {:.1} GiB for builds: the cgroup {} limits this process to {:.1} GiB, {:.1} GiB in use (host: {:.1} GiB available)",
                self.available_gib(),
                c.path.display(),
                c.limit_bytes as f64 / GIB,
                c.used_bytes as f64 / GIB,
                self.host_available_gib
            ),
        }
    }

    /// `this process's memory cgroup allows 1.5 GiB (PATH)`, or `22.6 GiB was available`: what
    /// a build killed for memory had.
    pub fn limit_sentence(&self) -> String {
        match &self.cgroup {
            Some(c) => format!(
                "this process's memory cgroup allows {:.1} GiB ({})",
                c.limit_bytes as f64 / GIB,
                c.path.display()
            ),
            None => format!("{:.1} GiB was available", self.host_available_gib),
        }
    }

    pub fn available_gib(&self) -> f64 {
        let cgroup = self
            .cgroup
            .as_ref()
            .map(|c| c.limit_bytes.saturating_sub(c.used_bytes) as f64 / GIB);
        cgroup.map_or(self.host_available_gib, |c| c.min(self.host_available_gib))
    }
}

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// A memory cgroup made to run commands under a limit (a child of the v1 memory hierarchy, or
/// of the v2 root), removed when dropped. Making one needs root, or a delegated hierarchy.
#[derive(Debug)]
pub struct LimitedGroup {
    pub path: std::path::PathBuf,
    pub limit_bytes: u64,
    v2: bool,
}

impl LimitedGroup {
    /// A new group `NAME-PID` limited to `limit_bytes`.
    pub fn create(name: &str, limit_bytes: u64) -> anyhow::Result<LimitedGroup> {
        use anyhow::Context;
        let v1 = Path::new("/sys/fs/cgroup/memory");
        let (root, v2) = match v1.is_dir() {
            true => (v1, false),
            false => (Path::new("/sys/fs/cgroup"), true),
        };
        let path = root.join(format!("{name}-{}", std::process::id()));
        std::fs::create_dir(&path).with_context(|| {
            format!(
                "making the memory cgroup {}: this needs root and a memory cgroup hierarchy (v1 at /sys/fs/cgroup/memory, or v2 with the memory controller)",
                path.display()
            )
        })?;
        let group = LimitedGroup {
            path,
            limit_bytes,
            v2,
        };
        let file = if v2 {
            "memory.max"
        } else {
            "memory.limit_in_bytes"
        };
        std::fs::write(group.path.join(file), limit_bytes.to_string())
            .with_context(|| format!("limiting {}", group.path.display()))?;
        Ok(group)
    }

    /// The file a process joins the group through ([`crate::process::Cmd::in_cgroup`]).
    pub fn procs(&self) -> std::path::PathBuf {
        self.path.join("cgroup.procs")
    }

    fn read_u64(&self, file: &str) -> Option<u64> {
        std::fs::read_to_string(self.path.join(file))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// The anonymous memory its processes hold now (what the kernel cannot reclaim without
    /// killing: `total_rss` in v1's `memory.stat`, `anon` in v2's), in bytes.
    pub fn anon_bytes(&self) -> Option<u64> {
        let key = if self.v2 { "anon " } else { "total_rss " };
        std::fs::read_to_string(self.path.join("memory.stat"))
            .ok()?
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|n| n.trim().parse().ok())
    }

    /// The highest memory use the group has seen, in bytes, page cache included (it reaches the
    /// limit in any long build: the kernel reclaims cache there rather than kill).
    pub fn peak_bytes(&self) -> Option<u64> {
        self.read_u64(if self.v2 {
            "memory.peak"
        } else {
            "memory.max_usage_in_bytes"
        })
    }

    /// How many processes the kernel's out-of-memory killer killed in the group.
    pub fn oom_kills(&self) -> Option<u64> {
        let file = if self.v2 {
            "memory.events"
        } else {
            "memory.oom_control"
        };
        let text = std::fs::read_to_string(self.path.join(file)).ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix("oom_kill "))
            .and_then(|n| n.trim().parse().ok())
    }
}

impl Drop for LimitedGroup {
    fn drop(&mut self) {
        // Its processes have exited; the kernel may take a moment to let the group go.
        for _ in 0..20 {
            if std::fs::remove_dir(&self.path).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}

/// The host's memory and this process's cgroup limit, read now.
pub fn memory() -> Memory {
    let host_available_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("MemAvailable:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map(|kb| kb / (1024.0 * 1024.0))
        .unwrap_or(8.0);
    let cgroup = std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|text| cgroup_memory(Path::new("/sys/fs/cgroup"), &text));
    Memory {
        host_available_gib,
        cgroup,
    }
}

/// Limits at or above this are "no limit" (cgroup v1 writes 2^63 rounded down to a page).
const NO_LIMIT: u64 = 1 << 62;

/// The tightest limit over the cgroup `proc_self_cgroup` names and its ancestors, under the
/// cgroup file system mounted at `mount`: v1's `memory` hierarchy (`memory.limit_in_bytes`,
/// `memory.usage_in_bytes`, `total_inactive_file`) or v2's unified one (`memory.max`,
/// `memory.current`, `inactive_file`). None without a limit.
pub fn cgroup_memory(mount: &Path, proc_self_cgroup: &str) -> Option<CgroupMemory> {
    let mut v1 = None;
    let mut v2 = None;
    for line in proc_self_cgroup.lines() {
        let mut f = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        let rel = path.trim_start_matches('/');
        if controllers.split(',').any(|c| c == "memory") {
            v1 = Some(mount.join("memory").join(rel));
        } else if id == "0" && controllers.is_empty() {
            v2 = Some(mount.join(rel));
        }
    }
    let (dir, top, files) = match (v1, v2) {
        (Some(d), _) => (d, mount.join("memory"), V1_FILES),
        (None, Some(d)) => (d, mount.to_path_buf(), V2_FILES),
        (None, None) => return None,
    };
    let mut best: Option<CgroupMemory> = None;
    let mut at = Some(dir.as_path());
    while let Some(d) = at.filter(|d| d.starts_with(&top)) {
        if let Some(c) = read_cgroup_dir(d, files) {
            let headroom = |c: &CgroupMemory| c.limit_bytes.saturating_sub(c.used_bytes);
            if best.as_ref().is_none_or(|b| headroom(&c) < headroom(b)) {
                best = Some(c);
            }
        }
        at = d.parent();
    }
    best
}

/// (limit, usage, the `memory.stat` key of reclaimable file cache).
type CgroupFiles = (&'static str, &'static str, &'static str);
const V1_FILES: CgroupFiles = (
    "memory.limit_in_bytes",
    "memory.usage_in_bytes",
    "total_inactive_file",
);
const V2_FILES: CgroupFiles = ("memory.max", "memory.current", "inactive_file");

fn read_cgroup_dir(dir: &Path, (limit, usage, inactive): CgroupFiles) -> Option<CgroupMemory> {
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).ok();
    let limit_bytes: u64 = read(limit)?.trim().parse().ok()?; // v2's "max" does not parse: none
    if limit_bytes >= NO_LIMIT {
        return None;
    }
    let used: u64 = read(usage).and_then(|u| u.trim().parse().ok()).unwrap_or(0);
    let cache: u64 = read("memory.stat")
        .and_then(|t| {
            t.lines().find_map(|l| {
                let (k, v) = l.split_once(' ')?;
                (k == inactive).then(|| v.trim().parse().ok())?
            })
        })
        .unwrap_or(0);
    Some(CgroupMemory {
        path: dir.to_path_buf(),
        limit_bytes,
        used_bytes: used.saturating_sub(cache),
    })
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
