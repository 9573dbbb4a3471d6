//! This machine's NVIDIA driver and GPUs, as `nvidia-smi` and the kernel module report them: the one
//! place archsmith asks. Nothing here interprets the answers (the knowledge base does).

use crate::cuda_arch::Cc;
use crate::process::{shell, which, Cmd};
use crate::version::Version;

/// One GPU as `nvidia-smi --query-gpu=name,compute_cap,driver_version` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmiGpu {
    pub name: String,
    /// None when nvidia-smi prints no compute capability (drivers before 510 have no `compute_cap`).
    pub cc: Option<Cc>,
    pub driver: Option<Version>,
}

/// Every GPU nvidia-smi lists; None without nvidia-smi, or when it fails (no driver loaded).
pub fn nvidia_smi() -> Option<Vec<SmiGpu>> {
    let smi = which("nvidia-smi")?;
    let sh = shell().ok()?;
    let query = "--query-gpu=name,compute_cap,driver_version";
    let out = Cmd::from(xshell::cmd!(sh, "{smi} {query} --format=csv,noheader"))
        .read()
        .ok()?;
    Some(parse_nvidia_smi(&out))
}

/// Parses nvidia-smi's CSV lines (`NVIDIA H100 80GB HBM3, 9.0, 570.124.06`).
pub fn parse_nvidia_smi(text: &str) -> Vec<SmiGpu> {
    text.lines()
        .filter_map(|line| {
            let cols: Vec<&str> = line.split(',').map(str::trim).collect();
            let [name, cc, driver] = cols.as_slice() else {
                return None;
            };
            Some(SmiGpu {
                name: name.to_string(),
                cc: cc.parse().ok(),
                driver: driver.parse().ok(),
            })
        })
        .collect()
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

    #[test]
    fn parses_nvidia_smi_and_the_kernel_module_version() {
        let gpus = parse_nvidia_smi(
            "NVIDIA H100 80GB HBM3, 9.0, 570.124.06\nTesla K80, [N/A], 470.161.03\ngarbage\n",
        );
        assert_eq!(gpus.len(), 2);
        assert_eq!(gpus[0].cc, Some("9.0".parse().unwrap()));
        assert_eq!(gpus[0].driver, Some("570.124.06".parse().unwrap()));
        assert_eq!(gpus[1].cc, None);
        let v = parse_proc_version(
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.124.06  Wed Feb 26 2025\nGCC version:  gcc version 12.2.0\n",
        );
        assert_eq!(v, Some("570.124.06".parse().unwrap()));
    }
}
