//! `doctor`'s findings: this machine as a build host and as a runtime (driver, GPUs, CUDA toolkits,
//! host compilers against each nvcc's ceiling, Python envs with torch), and for a GPU or driver you
//! name, which torch releases and CUDA variants would run there. Everything found is compared with
//! the knowledge base.

use crate::arch::advice::{describe_driver, torch_options, Driver, TorchOption};
use crate::cuda_arch::Cc;
use crate::host;
use crate::kb::kb;
use crate::output::Table;
use crate::paths;
use crate::process::which;
use crate::python::{probe, Depth, PythonInfo};
use crate::version::Version;
use anyhow::Result;
use serde::Serialize;
use std::path::{Path, PathBuf};

#[derive(Debug, Serialize)]
pub struct Device {
    pub name: String,
    pub cc: Option<Cc>,
    /// `10de:2684`, from nvidia-smi's `pci.device_id` or sysfs.
    pub device_id: Option<String>,
    /// How the PCI ID Repository names that device, with its chip (`AD102 [GeForce RTX 4090]`),
    /// where this machine has a pci.ids.
    pub pci_name: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct Toolkit {
    pub nvcc: PathBuf,
    pub found_via: String,
    pub release: Option<Version>,
    pub max_gcc: Option<u32>,
    pub max_clang: Option<u32>,
    pub error: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct HostCompiler {
    pub name: String,
    pub path: PathBuf,
    pub major: Option<u32>,
    pub version: String,
    /// Per toolkit release: whether its nvcc accepts this compiler without -allow-unsupported-compiler.
    pub accepted_by: Vec<(String, bool)>,
}

#[derive(Debug, Serialize)]
pub struct PythonRuntime {
    pub python: PathBuf,
    pub found_via: String,
    /// What the one Python probe found; None when it could not run (then `error` says why).
    pub info: Option<PythonInfo>,
    pub error: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct DoctorReport {
    /// What builds here may use: the host's available memory and any cgroup limit.
    pub memory: host::Memory,
    pub driver: Option<Driver>,
    pub devices: Vec<Device>,
    pub toolkits: Vec<Toolkit>,
    pub host_compilers: Vec<HostCompiler>,
    pub pythons: Vec<PythonRuntime>,
    pub plan_for: Option<PlanFor>,
    pub notes: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct PlanFor {
    pub gpus: Vec<(String, Cc)>,
    pub driver: Option<Version>,
    pub torch: Vec<TorchOption>,
    /// The options that run, newest release first (the first is what to install).
    pub runs_with: Vec<RunsWith>,
}

#[derive(Debug, Serialize)]
pub struct RunsWith {
    /// The line's newest release.
    pub torch: String,
    pub variant: String,
    pub install: String,
    /// Runs, but an audited library covers a GPU in only some containers (see the option's
    /// `partly`); the install advice skips these while a fully covering option exists.
    pub partly: bool,
    /// The oldest NVIDIA driver it runs with (the option's `min_driver`).
    pub min_driver: Option<String>,
}

/// This machine as a build host and runtime; with `gpus` or `driver`, which official torch builds
/// would run there. It only looks; it installs nothing.
pub fn diagnose(gpus: &[String], plan_driver: Option<&Version>) -> Result<DoctorReport> {
    let mut notes = Vec::new();
    let (driver_version, driver_source, devices) = probe_driver();
    let driver = driver_version.map(|v| describe_driver(v, driver_source));
    if driver.is_none() {
        notes.push("no NVIDIA driver found (no nvidia-smi, no /proc/driver/nvidia/version): this machine can build CUDA code but not run it".into());
    }
    let toolkits = find_toolkits();
    let host_compilers = find_host_compilers(&toolkits);
    let pythons = find_pythons();
    let plan_for = if gpus.is_empty() && plan_driver.is_none() {
        None
    } else {
        let driver = plan_driver
            .cloned()
            .or_else(|| driver.as_ref().map(|d| d.version.clone()));
        Some(plan(gpus, driver, &mut notes)?)
    };
    let (advice_gpus, advice_driver) = match &plan_for {
        Some(p) => (p.gpus.clone(), p.driver.clone()),
        None => (Vec::new(), driver.as_ref().map(|d| d.version.clone())),
    };
    notes.extend(toolkit_notes(
        &toolkits,
        &pythons,
        &advice_gpus,
        advice_driver.as_ref(),
    ));
    Ok(DoctorReport {
        memory: host::memory(),
        driver,
        devices,
        toolkits,
        host_compilers,
        pythons,
        plan_for,
        notes,
    })
}

/// Which torch builds would run on `gpus` with `driver` (the machine's, where none is named):
/// every option with its verdict and the running ones newest first. Notes what PyPI's wheels
/// cannot serve (a Jetson). Reads the knowledge base only, not the machine.
pub fn plan(gpus: &[String], driver: Option<Version>, notes: &mut Vec<String>) -> Result<PlanFor> {
    let gpus = gpus
        .iter()
        .map(|g| kb().resolve_gpu(g))
        .collect::<Result<Vec<_>>>()?;
    for (name, _) in &gpus {
        if let Some(instead) = kb().torch_wheels_instead(name) {
            notes.push(format!(
                "{name}: PyPI's torch wheels do not run there, so no `pip install torch` is advised; {instead}"
            ));
        }
    }
    let torch = torch_options(&gpus, driver.as_ref());
    let runs_with = torch
        .iter()
        .rev()
        .filter(|o| o.runs)
        .map(|o| RunsWith {
            torch: o.torch.split(", ").last().unwrap_or_default().to_string(),
            variant: o.variant.clone(),
            install: o.install.clone(),
            partly: !o.partly.is_empty(),
            min_driver: o.min_driver.clone(),
        })
        .collect();
    Ok(PlanFor {
        torch,
        runs_with,
        gpus,
        driver,
    })
}

/// The driver and GPUs: nvidia-smi first, else the kernel module's version (no devices then).
fn probe_driver() -> (Option<Version>, String, Vec<Device>) {
    let pci = crate::kb::pci_ids::system_devices();
    if let Some(gpus) = host::nvidia_smi() {
        let driver = gpus.iter().find_map(|g| g.driver.clone());
        if driver.is_some() {
            return (driver, "nvidia-smi".into(), smi_devices(pci, gpus));
        }
    }
    let devices = pci_devices(pci, &host::pci_gpus(Path::new("/sys")));
    match host::kernel_module_driver() {
        Some(v) => (Some(v), "/proc/driver/nvidia/version".into(), devices),
        None => (None, String::new(), devices),
    }
}

/// nvidia-smi's GPUs, with the CC from the device ID's chip where the driver prints none
/// (drivers before 510 have no `compute_cap`).
fn smi_devices(pci: &[crate::kb::pci_ids::Device], gpus: Vec<host::SmiGpu>) -> Vec<Device> {
    gpus.into_iter()
        .map(|g| {
            let found = g
                .device_id
                .and_then(|id| crate::kb::pci_ids::by_device_id(kb(), pci, id));
            Device {
                name: g.name,
                cc: g.cc.or(found.as_ref().map(|(_, cc)| *cc)),
                device_id: g.device_id.map(|id| format!("10de:{id:04x}")),
                pci_name: found.map(|(d, _)| pci_name(d)),
            }
        })
        .collect()
}

/// GPUs seen on the PCI bus with no driver to ask: named and placed by their device ID.
fn pci_devices(pci: &[crate::kb::pci_ids::Device], ids: &[u16]) -> Vec<Device> {
    ids.iter()
        .map(|&id| {
            let found = crate::kb::pci_ids::by_device_id(kb(), pci, id);
            Device {
                name: found
                    .as_ref()
                    .and_then(|(d, _)| d.names.first().cloned())
                    .unwrap_or_else(|| format!("NVIDIA device 10de:{id:04x}")),
                cc: found.as_ref().map(|(_, cc)| *cc),
                device_id: Some(format!("10de:{id:04x}")),
                pci_name: found.map(|(d, _)| pci_name(d)),
            }
        })
        .collect()
}

fn pci_name(d: &crate::kb::pci_ids::Device) -> String {
    if d.names.is_empty() {
        d.chip.clone()
    } else {
        format!("{} [{}]", d.chip, d.names.join(" / "))
    }
}

/// Every toolkit `toolchain list` knows (archsmith's and the system's), with each release's
/// host-compiler ceiling from the knowledge base.
fn find_toolkits() -> Vec<Toolkit> {
    let found = match crate::toolchain::discover() {
        Ok(f) => f,
        Err(e) => {
            return vec![Toolkit {
                nvcc: paths::toolchains_dir(),
                found_via: "archsmith toolchains".into(),
                release: None,
                max_gcc: None,
                max_clang: None,
                error: Some(format!("{e:#}")),
            }]
        }
    };
    found
        .into_iter()
        .filter(|t| t.usable || t.cuda_home.join("bin/nvcc").exists())
        .map(|t| {
            let row = t.cuda.as_ref().and_then(|r| kb().cuda_row(r));
            let limits = t
                .nvcc_version
                .as_ref()
                .zip(row)
                .map(|(v, r)| r.host_compiler_limits(v));
            Toolkit {
                nvcc: t.cuda_home.join("bin/nvcc"),
                found_via: if t.source == "archsmith" {
                    "archsmith toolchain".into()
                } else {
                    t.note.clone()
                },
                max_gcc: limits.as_ref().and_then(|l| l.max_gcc),
                max_clang: limits.as_ref().and_then(|l| l.max_clang),
                error: (!t.usable).then(|| t.note.clone()),
                release: t.cuda,
            }
        })
        .collect()
}

/// Every C++ compiler on PATH (the one host-compiler probe, [`crate::host::cxx_compilers`]) and
/// which toolkits' nvcc accept it.
fn find_host_compilers(toolkits: &[Toolkit]) -> Vec<HostCompiler> {
    crate::host::cxx_compilers()
        .into_iter()
        .map(|c| {
            let is_gcc = c.family == crate::host::CompilerFamily::Gcc;
            let major = c.major();
            let accepted_by = toolkits
                .iter()
                .filter_map(|t| {
                    let limit = if is_gcc { t.max_gcc } else { t.max_clang }?;
                    Some((
                        t.release.as_ref()?.to_string(),
                        major.is_some_and(|m| m <= limit),
                    ))
                })
                .collect();
            HostCompiler {
                name: c.name,
                path: c.path,
                major,
                version: c.version.map(|v| v.to_string()).unwrap_or_default(),
                accepted_by,
            }
        })
        .collect()
}

/// `python3` on PATH and every archsmith env, each described by the one Python probe (importing
/// torch, for its built archs and devices).
/// What to install so that each torch found can compile extensions: a toolkit of its CUDA major
/// (from PyPI where NVIDIA ships nvcc there, else [`crate::arch::advice::toolkit_advice`]); with no
/// torch found and no toolkit, the newest CUDA from PyPI.
fn toolkit_notes(
    toolkits: &[Toolkit],
    pythons: &[PythonRuntime],
    gpus: &[(String, crate::cuda_arch::Cc)],
    driver: Option<&Version>,
) -> Vec<String> {
    let program = crate::output::program();
    let majors: Vec<u32> = toolkits
        .iter()
        .filter_map(|t| t.release.as_ref().map(Version::major))
        .collect();
    let mut notes = Vec::new();
    let mut advised = Vec::new();
    for (python, info) in pythons
        .iter()
        .filter_map(|p| Some((&p.python, p.info.as_ref()?)))
    {
        let (Some(torch), Some(cuda)) = (&info.torch, &info.cuda) else {
            continue;
        };
        if majors.contains(&cuda.major()) || advised.contains(&cuda.major_minor()) {
            continue;
        }
        advised.push(cuda.major_minor());
        notes.push(if crate::toolchain::from_pypi(cuda) {
            format!(
                "no CUDA {}.x toolkit for torch {torch} ({}): `{program} toolchain install --cuda {}` provisions one from PyPI",
                cuda.major(),
                python.display(),
                cuda.major_minor()
            )
        } else {
            format!(
                "no CUDA {}.x toolkit for {}: {}",
                cuda.major(),
                python.display(),
                crate::arch::advice::toolkit_advice(torch, cuda, gpus, driver)
            )
        });
    }
    if toolkits.is_empty() && advised.is_empty() {
        notes.push(format!(
            "no CUDA toolkit found: `{program} toolchain install --cuda {}` provisions one from PyPI",
            kb().releases.newest_cuda.major_minor()
        ));
    }
    notes
}

fn find_pythons() -> Vec<PythonRuntime> {
    let mut candidates: Vec<(PathBuf, String)> = Vec::new();
    if let Some(p) = which("python3") {
        candidates.push((p, "PATH".into()));
    }
    let mut envs: Vec<PathBuf> = std::fs::read_dir(paths::envs_dir())
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin/python"))
        .filter(|p| p.exists())
        .collect();
    envs.sort();
    candidates.extend(envs.into_iter().map(|p| (p, "archsmith env".to_string())));
    candidates
        .into_iter()
        .map(|(python, via)| {
            let (info, error) = match probe(&python, Depth::ImportTorch) {
                Ok(i) => (Some(i), None),
                Err(e) => (None, Some(format!("{e:#}"))),
            };
            PythonRuntime {
                python,
                found_via: via,
                info,
                error,
            }
        })
        .collect()
}

impl DoctorReport {
    /// The aligned table people read (`--json` prints the report itself).
    pub fn table(&self) -> String {
        let r = self;
        let mut s = String::new();
        s.push_str("runtime\n");
        s.push_str(&format!("  {}\n", r.memory.describe()));
        match &r.driver {
            Some(d) => s.push_str(&format!(
                "  driver {} (from {}): CUDA ≤ {} natively; minor-version compatible with CUDA {}\n",
                d.version,
                d.source,
                d.cuda_native_max.as_deref().unwrap_or("?"),
                d.cuda_minor_compat_majors
                    .iter()
                    .map(|m| format!("{m}.x"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            None => s.push_str("  driver: none found\n"),
        }
        for d in &r.devices {
            let cc = d.cc.map(|c| c.to_string()).unwrap_or_else(|| "?".into());
            let id = d
                .device_id
                .as_deref()
                .map(|i| format!(", PCI {i}"))
                .unwrap_or_default();
            s.push_str(&format!("  GPU {} (CC {cc}{id})\n", d.name));
        }
        r.toolkit_lines(&mut s);
        r.python_lines(&mut s);
        if let Some(pf) = &r.plan_for {
            plan_lines(pf, &mut s);
        }
        for n in &r.notes {
            s.push_str(&format!("\nnote: {n}"));
        }
        if !r.notes.is_empty() {
            s.push('\n');
        }
        s
    }

    /// The toolkits found and the host compilers each accepts.
    fn toolkit_lines(&self, s: &mut String) {
        let r = self;
        s.push_str("\nCUDA toolkits\n");
        let mut t = Table::new(["  release", "found via", "max gcc", "max clang", "nvcc"]);
        for k in &r.toolkits {
            t.row([
                format!(
                    "  {}",
                    k.release
                        .as_ref()
                        .map(|v| v.to_string())
                        .unwrap_or_else(|| "?".into())
                ),
                k.found_via.clone(),
                k.max_gcc
                    .map(|v| v.to_string())
                    .unwrap_or_else(|| "?".into()),
                k.max_clang
                    .map(|v| v.to_string())
                    .unwrap_or_else(|| "?".into()),
                k.nvcc.display().to_string(),
            ]);
        }
        if t.is_empty() {
            s.push_str("  none found\n");
        } else {
            s.push_str(&t.render());
        }
        s.push_str("\nhost compilers\n");
        for c in &r.host_compilers {
            let acc: Vec<String> = c
                .accepted_by
                .iter()
                .map(|(rel, ok)| format!("nvcc {rel}: {}", if *ok { "ok" } else { "TOO NEW" }))
                .collect();
            s.push_str(&format!(
                "  {} {} ({}){}\n",
                c.name,
                c.version,
                c.path.display(),
                if acc.is_empty() {
                    String::new()
                } else {
                    format!("  {}", acc.join(", "))
                }
            ));
        }
    }

    /// Each Python found and its torch.
    fn python_lines(&self, s: &mut String) {
        let r = self;
        s.push_str("\nPython / torch\n");
        for p in &r.pythons {
            let what = match (&p.info, &p.error) {
                (Some(i), _) => {
                    let torch = match &i.torch {
                        Some(t) => format!(
                            "torch {t}, CUDA {}, archs {}",
                            i.cuda.as_ref().map_or("none".into(), |c| c.to_string()),
                            i.arch_list.join(" ")
                        ),
                        None => "no torch".into(),
                    };
                    format!("Python {}; {torch}", i.python)
                }
                (None, e) => format!("the probe did not run: {}", e.as_deref().unwrap_or("?")),
            };
            s.push_str(&format!(
                "  {} ({}): {what}\n",
                p.python.display(),
                p.found_via
            ));
        }
    }
}

/// Which official torch builds run on the GPUs and driver asked about, newest first.
fn plan_lines(pf: &PlanFor, s: &mut String) {
    let who: Vec<String> = pf
        .gpus
        .iter()
        .map(|(n, c)| format!("{n} (CC {c})"))
        .collect();
    s.push_str(&format!(
        "\ntorch builds for {}{}\n",
        if who.is_empty() {
            "any GPU".to_string()
        } else {
            who.join(", ")
        },
        pf.driver
            .as_ref()
            .map(|d| format!(" with driver {d}"))
            .unwrap_or_default()
    ));
    // Newest first: the top entry is what to install, and its command follows.
    let names: Vec<String> = pf
        .runs_with
        .iter()
        .map(|o| {
            format!(
                "{} {}{}",
                o.torch,
                o.variant,
                if o.partly { " (partly)" } else { "" }
            )
        })
        .collect();
    s.push_str(&format!(
        "  runs with (newest first): {}\n",
        if names.is_empty() {
            "no official torch build".to_string()
        } else {
            names.join("; ")
        }
    ));
    let best = pf
        .runs_with
        .iter()
        .find(|o| !o.partly)
        .or(pf.runs_with.first());
    if let Some(best) = best {
        s.push_str(&format!("  install: {}\n", best.install));
        // Without a driver to check against, say what the advice assumes.
        if let (None, Some(floor)) = (&pf.driver, &best.min_driver) {
            s.push_str(&format!(
                "  needs: NVIDIA driver ≥ {floor}; no driver was given or found (--driver VER checks one)\n"
            ));
        }
    }
    let mut t = Table::new(["  torch", "variant", "runs", "why not"]);
    for o in &pf.torch {
        let (runs, why) = match (o.runs, o.partly.is_empty()) {
            (true, true) => ("yes", String::new()),
            (true, false) => ("partly", o.partly.join("; ")),
            (false, _) => ("no", o.reason.clone()),
        };
        t.row([
            format!("  {}", o.torch),
            o.variant.clone(),
            runs.into(),
            why,
        ]);
    }
    s.push_str(&t.render());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kb::kb;

    #[test]
    fn driver_470_runs_cuda_11_4_natively_and_11_x_by_minor_compat() {
        let d = describe_driver("470.161.03".parse().unwrap(), "test".into());
        assert_eq!(d.cuda_native_max.as_deref(), Some("11.4"));
        assert_eq!(d.cuda_minor_compat_majors, vec![11]);
    }

    #[test]
    fn rtx_5090_needs_torch_2_7_with_cu128_or_newer() {
        let gpus = vec![kb().resolve_gpu("RTX 5090").unwrap()];
        let opts = torch_options(&gpus, Some(&"595.71.05".parse().unwrap()));
        let running: Vec<&TorchOption> = opts.iter().filter(|o| o.runs).collect();
        assert!(!running.is_empty());
        for o in &running {
            let t: Version = o.torch.split(',').next().unwrap().parse().unwrap();
            assert!(t >= "2.7".parse().unwrap(), "{} {}", o.torch, o.variant);
            assert!(o.variant.as_str() >= "cu128", "{} {}", o.torch, o.variant);
        }
        assert!(opts
            .iter()
            .any(|o| o.torch.starts_with("2.7") && o.variant == "cu128" && o.runs));
        assert!(opts
            .iter()
            .any(|o| o.torch.starts_with("2.7") && o.variant == "cu126" && !o.runs));
    }

    /// A driver older than the GPU's architecture runs nothing on it, whatever the CUDA: the
    /// minor-version floor of CUDA 12 (525) would admit 550 for cu128, and CUDA 11's (450)
    /// 470 for cu118.
    #[test]
    fn a_gpu_newer_than_its_driver_runs_nothing() {
        for (gpu, driver, floor) in [
            ("RTX 5090", "550.54.14", "570.26"),
            ("L4", "470.161.03", "520.61.05"),
        ] {
            let gpus = vec![kb().resolve_gpu(gpu).unwrap()];
            let opts = torch_options(&gpus, Some(&driver.parse().unwrap()));
            assert!(opts.iter().all(|o| !o.runs), "{gpu} with {driver}");
            assert!(
                opts.iter()
                    .all(|o| o.reason.contains(&format!("needs {floor} or newer"))),
                "{gpu}: {}",
                opts[0].reason
            );
        }
        // At the floor, the architecture's own rules decide again.
        let gpus = vec![kb().resolve_gpu("L4").unwrap()];
        let opts = torch_options(&gpus, Some(&"520.61.05".parse().unwrap()));
        assert!(opts.iter().any(|o| o.runs && o.variant == "cu118"));
    }

    /// Issue 60: PyPI's wheels are no advice for a Jetson (NVIDIA's JetPack builds are), one
    /// device has one driver floor whatever the CUDA calls it (Thor: sm_101, then sm_110), and a
    /// driver typed with fewer parts than the floor is that release.
    #[test]
    fn jetson_gets_jetpack_advice_and_one_driver_floor() {
        let mut notes = Vec::new();
        let jetson = plan(
            &["Jetson Orin".into()],
            Some("540.4.0".parse().unwrap()),
            &mut notes,
        )
        .unwrap();
        assert!(jetson.runs_with.is_empty(), "{:?}", jetson.runs_with);
        assert!(jetson
            .torch
            .iter()
            .all(|o| !o.runs && o.reason.contains("JetPack")));
        assert!(notes
            .iter()
            .any(|n| n.contains("Jetson Orin: PyPI's torch wheels do not run there")));
        let (thor, cc) = kb().resolve_gpu("Jetson Thor").unwrap();
        let floors: Vec<String> = ["12.8", "13.0"]
            .iter()
            .map(|c| {
                let cc = kb().gpu_cc_with_cuda(&thor, cc, &c.parse().unwrap());
                kb().gpu_driver_floor(&thor, cc).unwrap().driver.to_string()
            })
            .collect();
        assert_eq!(floors[0], floors[1]);
        // A driver between the device's floor and CUDA 13's: no row says it predates the device.
        let opts = torch_options(&[(thor, cc)], Some(&"575.51".parse().unwrap()));
        assert!(
            opts.iter().all(|o| !o.reason.contains("predates")),
            "{opts:?}"
        );
        let below = crate::kb::drivers::driver_below;
        let v = |s: &str| -> Version { s.parse().unwrap() };
        assert!(!below(&v("580.65"), &v("580.65.06")));
        assert!(below(&v("580.64"), &v("580.65.06")));
        assert!(!below(&v("580.65.06"), &v("580.65.06")));
    }

    /// GPUs identified by PCI device ID: an old driver's nvidia-smi prints no CC (the chip gives
    /// it), and with no driver at all sysfs's device IDs name the GPUs.
    #[test]
    fn gpus_are_identified_by_their_device_id() {
        let pci = crate::kb::pci_ids::nvidia_devices(
            "10de  NVIDIA Corporation\n\t1eb8  TU104GL [Tesla T4]\n\t2684  AD102 [GeForce RTX 4090]\n",
        );
        let smi = host::parse_nvidia_smi(
            "Tesla T4, [N/A], 470.161.03, 0x1EB810DE\nNVIDIA GeForce RTX 4090, 8.9, 550.54.14, 0x268410DE\n",
        );
        let devices = smi_devices(&pci, smi);
        assert_eq!(devices[0].cc.map(|c| c.to_string()).as_deref(), Some("7.5"));
        assert_eq!(devices[0].device_id.as_deref(), Some("10de:1eb8"));
        assert_eq!(devices[0].pci_name.as_deref(), Some("TU104GL [Tesla T4]"));
        assert_eq!(devices[1].cc.map(|c| c.to_string()).as_deref(), Some("8.9"));
        let devices = pci_devices(&pci, &[0x2684, 0x9999]);
        assert_eq!(devices[0].name, "GeForce RTX 4090");
        assert_eq!(devices[0].cc.map(|c| c.to_string()).as_deref(), Some("8.9"));
        assert_eq!(devices[1].name, "NVIDIA device 10de:9999");
        assert_eq!(devices[1].cc, None);
    }

    /// CUDA 10.x had no minor-version compatibility: a cu102 build needs CUDA 10.2's own driver
    /// (440.33), so a T4 on 418.67 runs no official torch at all; at 440.33 the cu102 build runs.
    #[test]
    fn a_cuda_10_build_needs_its_own_releases_driver() {
        let gpus = vec![kb().resolve_gpu("T4").unwrap()];
        let opts = torch_options(&gpus, Some(&"418.67".parse().unwrap()));
        assert!(opts.iter().all(|o| !o.runs));
        let cu102 = opts.iter().find(|o| o.variant == "cu102").unwrap();
        assert!(
            cu102
                .reason
                .contains("driver 418.67 < 440.33, the minimum of CUDA 10.2"),
            "{}",
            cu102.reason
        );
        let opts = torch_options(&gpus, Some(&"440.33".parse().unwrap()));
        assert!(opts.iter().any(|o| o.runs && o.variant == "cu102"));
        assert!(opts.iter().all(|o| o.variant == "cu102" || !o.runs));
    }

    /// Newest first, with the command for the first: plain PyPI when the variant is the release's
    /// PyPI default, else the variant's index.
    #[test]
    fn runs_with_lists_the_newest_release_first_with_its_install_command() {
        // The plan alone: diagnose would probe this machine's Pythons and toolkits too (40 s).
        let pf = plan(
            &["RTX 5090".into()],
            Some("570.86.16".parse().unwrap()),
            &mut Vec::new(),
        )
        .unwrap();
        let first = &pf.runs_with[0];
        assert_eq!(
            (first.torch.as_str(), first.variant.as_str()),
            ("2.11.0", "cu128")
        );
        assert_eq!(
            first.install,
            "pip install torch==2.11.0 torchvision==0.26.0 --index-url https://download.pytorch.org/whl/cu128"
        );
        let versions: Vec<Version> = pf
            .runs_with
            .iter()
            .map(|r| r.torch.parse().unwrap())
            .collect();
        assert!(versions.windows(2).all(|w| w[0] >= w[1]), "{versions:?}");
        let t4 = plan(&["T4".into()], None, &mut Vec::new()).unwrap();
        assert_eq!(
            t4.runs_with[0].install,
            "pip install torch==2.15.0 torchvision==0.29.2"
        );
    }

    #[test]
    fn old_driver_rules_out_cuda_12_and_13_builds() {
        let gpus = vec![kb().resolve_gpu("A100").unwrap()];
        let opts = torch_options(&gpus, Some(&"470.161.03".parse().unwrap()));
        assert!(opts
            .iter()
            .filter(|o| o.runs)
            .all(|o| o.variant.starts_with("cu11")));
        assert!(opts.iter().any(|o| o.runs));
    }
}
