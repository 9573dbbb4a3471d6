//! archsmith's own CUDA test kernels (`kernels/`): which to build for which requested arch, the CMake
//! build, the audit of every binary against the plan, and — on a machine with a GPU — running them.
//!
//! `kernels/kernels.toml` declares each kernel's lowest arch and whether it needs an arch-specific target;
//! every `.cu` enforces the same with an `#error` in device code, so a wrong declaration fails the build.

pub mod run;

use crate::arch::compat::{self, Image, ImageKind};
use crate::arch::spec::{Plan, Target};
use crate::arch::{Arch, Cc, Variant};
use crate::binary::Kind as BinKind;
use crate::process::Cmd;
use crate::toolchain::buildtools::BuildTools;
use crate::toolchain::Toolchain;
use anyhow::{bail, Context, Result};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// One entry of `kernels/kernels.toml`.
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Kernel {
    pub name: String,
    /// The lowest compute capability the kernel compiles for (`8.9`).
    #[serde(deserialize_with = "de_cc")]
    pub min_arch: Cc,
    /// Needs the arch-specific target of exactly `min_arch` (`9.0a`).
    #[serde(default)]
    pub arch_specific: bool,
    /// What it exercises, for skip reasons.
    pub what: String,
}

fn de_cc<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Cc, D::Error> {
    let s = <String as serde::Deserialize>::deserialize(d)?;
    s.parse().map_err(serde::de::Error::custom)
}

#[derive(serde::Deserialize)]
struct Manifest {
    kernel: Vec<Kernel>,
}

/// `kernels/`: this repository's, or the copy an installed binary carries ([`crate::data`]).
pub fn kernels_dir() -> PathBuf {
    crate::data::data_root()
        .unwrap_or_else(|_| crate::paths::repo_root())
        .join("kernels")
}

/// Reads `dir/kernels.toml` and checks every kernel has its `.cu`.
pub fn load_manifest(dir: &Path) -> Result<Vec<Kernel>> {
    let path = dir.join("kernels.toml");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let manifest: Manifest =
        toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    let mut seen = BTreeSet::new();
    for k in &manifest.kernel {
        if !seen.insert(k.name.clone()) {
            bail!("{}: kernel `{}` is declared twice", path.display(), k.name);
        }
        if !k
            .name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_')
        {
            bail!(
                "{}: kernel name `{}` must be a C identifier (it names a CMake target)",
                path.display(),
                k.name
            );
        }
        let src = dir.join(format!("{}.cu", k.name));
        if !src.is_file() {
            bail!(
                "{}: kernel `{}` has no source {}",
                path.display(),
                k.name,
                src.display()
            );
        }
    }
    Ok(manifest.kernel)
}

impl Kernel {
    /// `Ok` when this kernel can be compiled for `arch`, else why not.
    pub fn supports(&self, arch: Arch) -> Result<(), String> {
        let min = self.min_arch;
        if self.arch_specific {
            if arch.cc() == min && arch.variant == Variant::ArchSpecific {
                return Ok(());
            }
            if arch.cc() == min {
                return Err(format!(
                    "needs the arch-specific target {min}a ({}); {arch} is not arch-specific — request {min}a to build it",
                    self.what
                ));
            }
            return Err(format!(
                "needs exactly the arch-specific target {min}a ({}), whose features exist on compute capability {min} only",
                self.what
            ));
        }
        if arch.cc() < min {
            return Err(format!(
                "needs sm_{}{}+ ({})",
                min.major, min.minor, self.what
            ));
        }
        Ok(())
    }
}

/// A requested arch a kernel is not built for, and why.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Skip {
    pub arch: Arch,
    pub reason: String,
}

/// What one kernel is built for.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Selection {
    pub kernel: Kernel,
    pub targets: Vec<Target>,
    pub skipped: Vec<Skip>,
}

impl Selection {
    pub fn plan(&self) -> Plan {
        Plan {
            targets: self.targets.clone(),
            notes: Vec::new(),
        }
    }

    /// The images the binary must contain, exactly.
    pub fn expected_images(&self) -> BTreeSet<Image> {
        self.plan().images().into_iter().collect()
    }
}

/// Splits the plan per kernel.
pub fn select(kernels: &[Kernel], plan: &Plan) -> Vec<Selection> {
    kernels
        .iter()
        .map(|k| {
            let mut targets = Vec::new();
            let mut skipped = Vec::new();
            for t in &plan.targets {
                match k.supports(t.arch) {
                    Ok(()) => targets.push(*t),
                    Err(reason) => skipped.push(Skip {
                        arch: t.arch,
                        reason,
                    }),
                }
            }
            Selection {
                kernel: k.clone(),
                targets,
                skipped,
            }
        })
        .collect()
}

/// How to build: sources, build directory, toolchain, cmake/ninja.
pub struct Build<'a> {
    pub source_dir: &'a Path,
    pub build_dir: &'a Path,
    pub toolchain: &'a Toolchain,
    /// cmake and ninja; `None` where neither is on the machine nor can be installed (an
    /// air-gapped GPU host): each kernel is one `.cu` file, so nvcc alone builds it.
    pub tools: Option<&'a BuildTools>,
    pub plan: &'a Plan,
    /// An extra SASS-only arch to build `f32_elementwise_noimage` for (the "no kernel image" demonstration).
    pub no_image_arch: Option<Arch>,
}

/// Configures `kernels/` with CMake's CUDA language and builds every selected kernel with ninja
/// (with nvcc alone where there is no cmake: [`build_with_nvcc`]). A failing step's error quotes
/// the end of its output.
pub fn build(b: &Build<'_>, selections: &[Selection]) -> Result<()> {
    let built: Vec<&Selection> = selections
        .iter()
        .filter(|s| !s.targets.is_empty())
        .collect();
    if built.is_empty() {
        bail!("no kernel supports any requested arch: nothing to build");
    }
    std::fs::create_dir_all(b.build_dir)
        .with_context(|| format!("creating {}", b.build_dir.display()))?;
    let Some(tools) = b.tools else {
        return build_with_nvcc(b, &built);
    };
    let names: Vec<&str> = built.iter().map(|s| s.kernel.name.as_str()).collect();
    let mut configure = b
        .toolchain
        .cmd(&tools.cmake)
        .arg("-S")
        .arg(b.source_dir)
        .arg("-B")
        .arg(b.build_dir)
        .args(["-G", "Ninja"])
        .arg(format!("-DCMAKE_MAKE_PROGRAM={}", tools.ninja.display()))
        .arg(format!(
            "-DCMAKE_CUDA_COMPILER={}",
            b.toolchain.nvcc().display()
        ))
        .arg(format!(
            "-DCUDAToolkit_ROOT={}",
            b.toolchain.cuda_home().display()
        ))
        .arg(format!(
            "-DCMAKE_CUDA_ARCHITECTURES={}",
            b.plan.cmake_cuda_architectures()
        ))
        .arg(format!("-DARCHSMITH_KERNELS={}", names.join(";")));
    for s in &built {
        configure = configure.arg(format!(
            "-DARCHSMITH_ARCHS_{}={}",
            s.kernel.name,
            s.plan().cmake_cuda_architectures()
        ));
    }
    configure = match b.no_image_arch {
        Some(a) => configure.arg(format!("-DARCHSMITH_NOIMAGE_ARCH={}-real", a.number())),
        None => configure.arg("-UARCHSMITH_NOIMAGE_ARCH"),
    };
    run_logged(&configure, "configuring kernels/ with CMake")?;
    run_logged(
        &b.toolchain
            .cmd(&tools.cmake)
            .arg("--build")
            .arg(b.build_dir),
        "building kernels/",
    )?;
    // Where the build's time went, beside its ninja log (a report: one that cannot be written
    // is said, never a failed build).
    match crate::build_insight::written::of_ninja_build(b.build_dir, None) {
        Ok(w) => crate::errln!(
            "archsmith: the kernels build's timeline: {}",
            w.timeline.display()
        ),
        Err(e) => crate::errln!("warning: the kernels build's trace was not written: {e:#}"),
    }
    Ok(())
}

/// Each selected kernel compiled and linked by one nvcc call, with the gencode flags torch's
/// and CMake's planning give the same images (`75-real` is SASS only, `90` SASS and PTX), into the
/// place CMake's Ninja build puts it (`BUILD_DIR/NAME`).
fn build_with_nvcc(b: &Build<'_>, built: &[&Selection]) -> Result<()> {
    // (binary, source, gencode flags)
    let mut jobs: Vec<(String, &str, Vec<String>)> = built
        .iter()
        .map(|s| {
            (
                s.kernel.name.clone(),
                s.kernel.name.as_str(),
                s.plan().gencode(),
            )
        })
        .collect();
    if let Some(arch) = b.no_image_arch {
        let sass_only = Target { arch, ptx: false };
        jobs.push((
            "f32_elementwise_noimage".into(),
            "f32_elementwise",
            sass_only.gencode(),
        ));
    }
    for (name, source, gencode) in jobs {
        let cmd = b
            .toolchain
            .cmd(b.toolchain.nvcc())
            // -nodlink: like CMake's build (no separable compilation), no device-link step;
            // nvcc's own link would add a second fatbin container, SASS only, that the audit
            // rightly reads as a missing PTX image.
            .args(["-std=c++17", "-O2", "-nodlink", "-I"])
            .arg(b.source_dir)
            .args(&gencode)
            .arg("-o")
            .arg(b.build_dir.join(&name))
            .arg(b.source_dir.join(format!("{source}.cu")));
        run_logged(&cmd, &format!("building {name} with nvcc"))?;
    }
    Ok(())
}

/// Runs a build step with stdout and stderr merged (ninja prints compiler errors on stdout); on failure
/// the error quotes the command and the last lines of its output.
fn run_logged(cmd: &Cmd, what: &str) -> Result<()> {
    let mut lines = Vec::new();
    let code = cmd.stream_lines(|l| lines.push(l.to_string()))?;
    if code == Some(0) {
        return Ok(());
    }
    let tail = lines[lines.len().saturating_sub(40)..].join("\n");
    let status = code.map_or("a signal".to_string(), |c| format!("exit code {c}"));
    bail!("{what} failed ({status}): `{}`\n{tail}", cmd.display())
}

/// What a binary carries, read from its fatbin headers with archsmith's binary reader (the counted
/// section, as the CUDA runtime loads it). A file without device code, or with images that are neither
/// SASS nor PTX, is an error.
pub fn audit_images(binary: &Path) -> Result<BTreeSet<Image>> {
    let data = std::fs::read(binary).with_context(|| format!("reading {}", binary.display()))?;
    let audit = crate::binary::audit_elf(&data)
        .with_context(|| format!("reading the fatbin of {}", binary.display()))?;
    let Some(section) = audit.counted().filter(|s| !s.images.is_empty()) else {
        bail!("{} does not contain device code", binary.display());
    };
    let mut images = BTreeSet::new();
    for image in &section.images {
        let arch = image.arch.arch().with_context(|| {
            format!(
                "{}: image arch number {} is not a CUDA arch",
                binary.display(),
                image.arch.number
            )
        })?;
        match image.kind {
            BinKind::Elf => images.insert(Image::sass(arch)),
            BinKind::Ptx => images.insert(Image::ptx(arch)),
            other => bail!(
                "{}: unexpected {other:?} image for {} (test kernels carry only SASS and PTX)",
                binary.display(),
                arch
            ),
        };
    }
    Ok(images)
}

/// Images whose presence is not uniform: planned images that some of the binary's containers (compilation
/// units) lack. Empty for a correct build; the set comparison alone would miss a unit built without them.
pub fn missing_per_container(binary: &Path, expected: &BTreeSet<Image>) -> Result<Vec<String>> {
    let data = std::fs::read(binary).with_context(|| format!("reading {}", binary.display()))?;
    let audit = crate::binary::audit_elf(&data)
        .with_context(|| format!("reading the fatbin of {}", binary.display()))?;
    let expect = crate::binary::expect::Expectation {
        sass: expected
            .iter()
            .filter(|i| i.kind == ImageKind::Sass)
            .map(|i| i.arch)
            .collect(),
        ptx: expected
            .iter()
            .filter(|i| i.kind == ImageKind::Ptx)
            .map(|i| i.arch)
            .collect(),
    };
    let check = crate::binary::expect::check(&audit, &expect);
    Ok(check
        .missing_sass
        .iter()
        .chain(&check.missing_ptx)
        .map(|m| {
            format!(
                "{} in {} of {} containers",
                m.name, m.containers_with, m.containers
            )
        })
        .collect())
}

/// The same listing from the toolchain's `cuobjdump --list-elf/--list-ptx`, NVIDIA's own reader; the tests
/// cross-check [`audit_images`] with it.
pub fn cuobjdump_images(toolchain: &Toolchain, binary: &Path) -> Result<BTreeSet<Image>> {
    let cuobjdump = toolchain.cuobjdump();
    if !cuobjdump.is_file() {
        bail!(
            "{} has no cuobjdump (NVIDIA ships it on PyPI from CUDA 13.2)",
            toolchain.cuda_home().display()
        );
    }
    let re =
        regex::Regex::new(r"\.((?:sm|compute)_\d+[af]?)\.(cubin|ptx)\s*$").expect("valid regex");
    let mut images = BTreeSet::new();
    for (flag, kind) in [
        ("--list-elf", ImageKind::Sass),
        ("--list-ptx", ImageKind::Ptx),
    ] {
        let cmd = Cmd::new(&cuobjdump).arg(flag).arg(binary);
        let out = cmd.output()?;
        if !out.success() {
            bail!("{}", cmd.failure_message(&out));
        }
        for line in out.stdout.lines() {
            let Some(c) = re.captures(line) else { continue };
            let arch = Arch::from_target_name(&c[1])
                .map_err(|e| anyhow::anyhow!("cuobjdump listed `{line}`: {e}"))?;
            images.insert(Image { arch, kind });
        }
    }
    Ok(images)
}

/// Compares what a binary carries with the plan: `Ok` when identical, else a message naming the
/// missing and unexpected images.
pub fn compare_images(expected: &BTreeSet<Image>, found: &BTreeSet<Image>) -> Result<(), String> {
    if expected == found {
        return Ok(());
    }
    let names = |set: BTreeSet<&Image>| {
        set.into_iter()
            .map(Image::name)
            .collect::<Vec<_>>()
            .join(" ")
    };
    let missing = names(expected.difference(found).collect());
    let extra = names(found.difference(expected).collect());
    let mut parts = Vec::new();
    if !missing.is_empty() {
        parts.push(format!("missing {missing}"));
    }
    if !extra.is_empty() {
        parts.push(format!("unexpected {extra}"));
    }
    Err(parts.join("; "))
}

/// The GPU this machine would run on.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Gpu {
    pub name: String,
    pub cc: Cc,
    pub driver: String,
}

/// The first GPU `nvidia-smi` reports; `None` without nvidia-smi or a usable GPU.
pub fn detect_gpu() -> Option<Gpu> {
    let gpu = crate::host::nvidia_smi()?.into_iter().next()?;
    Some(Gpu {
        name: gpu.name,
        cc: gpu.cc?,
        driver: gpu.driver?.to_string(),
    })
}

/// The result of running one kernel binary on the GPU.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RunResult {
    pub passed: bool,
    /// The binary's `RESULT`/`NO_IMAGE`/`CUDA_ERROR` line, or its output tail.
    pub line: String,
    /// Which image the driver loads for this GPU, by the compatibility rules (`SASS: …` / `PTX JIT: …`).
    pub served_by: String,
}

/// Runs a kernel binary; it compares with its CPU reference itself and exits 0 on a match.
pub fn run_binary(
    toolchain: &Toolchain,
    binary: &Path,
    images: &BTreeSet<Image>,
    gpu: &Gpu,
) -> Result<RunResult> {
    let out = toolchain.cmd(binary).output()?;
    let text = format!("{}{}", out.stdout, out.stderr);
    let line = text
        .lines()
        .find(|l| {
            l.starts_with("RESULT ") || l.starts_with("NO_IMAGE ") || l.starts_with("CUDA_ERROR ")
        })
        .map(str::to_string)
        .unwrap_or_else(|| text.lines().rev().take(3).collect::<Vec<_>>().join(" | "));
    let imgs: Vec<Image> = images.iter().copied().collect();
    let verdict = compat::runs_on(&imgs, gpu.cc, &compat::PtxJit::default());
    Ok(RunResult {
        passed: out.status == Some(0),
        line,
        served_by: verdict.reason,
    })
}

/// A plain arch this CUDA compiles whose SASS does not run on `cc` (for the "no kernel image" demonstration).
pub fn arch_without_image_for(cc: Cc, candidates: &[Arch]) -> Option<Arch> {
    candidates
        .iter()
        .copied()
        .filter(|a| a.variant == Variant::Plain)
        .find(|a| !compat::image_matches(Image::sass(*a), cc))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arch(s: &str) -> Arch {
        s.parse().unwrap()
    }

    fn plan(spec: &[(&str, bool)]) -> Plan {
        Plan {
            targets: spec
                .iter()
                .map(|(a, ptx)| Target {
                    arch: arch(a),
                    ptx: *ptx,
                })
                .collect(),
            notes: vec![],
        }
    }

    #[test]
    fn the_repository_manifest_declares_the_required_kernels() {
        let kernels = load_manifest(&kernels_dir()).unwrap();
        let find = |n: &str| {
            kernels
                .iter()
                .find(|k| k.name == n)
                .unwrap_or_else(|| panic!("{n} missing"))
        };
        assert_eq!(find("bf16_math").min_arch.to_string(), "8.0");
        assert_eq!(find("fp8_e4m3").min_arch.to_string(), "8.9");
        assert_eq!(find("mma_sync").min_arch.to_string(), "8.0");
        let hopper = find("hopper_setmaxnreg");
        assert!(hopper.arch_specific && hopper.min_arch.to_string() == "9.0");
        assert!(!find("f32_elementwise").arch_specific);
        find("half_math");
    }

    #[test]
    fn selects_per_kernel_and_says_why_it_skips() {
        let kernels = load_manifest(&kernels_dir()).unwrap();
        let sel = select(
            &kernels,
            &plan(&[("7.5", false), ("8.9", false), ("9.0", true)]),
        );
        let get = |n: &str| sel.iter().find(|s| s.kernel.name == n).unwrap();
        assert_eq!(
            get("f32_elementwise").plan().cmake_cuda_architectures(),
            "75-real;89-real;90"
        );
        assert_eq!(
            get("bf16_math").plan().cmake_cuda_architectures(),
            "89-real;90"
        );
        assert!(
            get("bf16_math").skipped[0].reason.contains("needs sm_80+"),
            "{:?}",
            get("bf16_math").skipped
        );
        assert_eq!(
            get("fp8_e4m3").plan().cmake_cuda_architectures(),
            "89-real;90"
        );
        let hopper = get("hopper_setmaxnreg");
        assert!(hopper.targets.is_empty());
        let why = &hopper
            .skipped
            .iter()
            .find(|s| s.arch == arch("9.0"))
            .unwrap()
            .reason;
        assert!(why.contains("request 9.0a"), "{why}");

        let sel = select(
            &kernels,
            &plan(&[("8.0", false), ("9.0a", true), ("10.0f", false)]),
        );
        let hopper = sel
            .iter()
            .find(|s| s.kernel.name == "hopper_setmaxnreg")
            .unwrap();
        assert_eq!(hopper.plan().cmake_cuda_architectures(), "90a");
        let expected: Vec<String> = hopper.expected_images().iter().map(Image::name).collect();
        assert_eq!(expected, ["sm_90a", "compute_90a"]);
        let fp8 = sel.iter().find(|s| s.kernel.name == "fp8_e4m3").unwrap();
        assert_eq!(fp8.plan().cmake_cuda_architectures(), "90a;100f-real");
    }

    #[test]
    fn compares_image_sets_exactly() {
        let set = |names: &[&str]| -> BTreeSet<Image> {
            names
                .iter()
                .map(|n| match n.strip_prefix("compute_") {
                    Some(_) => Image::ptx(Arch::from_target_name(n).unwrap()),
                    None => Image::sass(Arch::from_target_name(n).unwrap()),
                })
                .collect()
        };
        assert!(compare_images(
            &set(&["sm_75", "compute_90"]),
            &set(&["compute_90", "sm_75"])
        )
        .is_ok());
        let e =
            compare_images(&set(&["sm_75", "sm_90"]), &set(&["sm_75", "compute_75"])).unwrap_err();
        assert_eq!(e, "missing sm_90; unexpected compute_75");
    }

    #[test]
    fn picks_an_arch_that_cannot_serve_the_device() {
        let candidates = [arch("7.5"), arch("8.0"), arch("9.0"), arch("9.0a")];
        assert_eq!(
            arch_without_image_for("9.0".parse().unwrap(), &candidates),
            Some(arch("7.5"))
        );
        assert_eq!(
            arch_without_image_for("7.5".parse().unwrap(), &candidates),
            Some(arch("8.0"))
        );
    }

    #[test]
    fn a_malformed_manifest_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("kernels.toml"),
            "[[kernel]]\nname = \"k\"\nmin_arch = \"8.9\"\nwhat = \"x\"\n",
        )
        .unwrap();
        let e = load_manifest(dir.path()).unwrap_err().to_string();
        assert!(e.contains("has no source"), "{e}");
        std::fs::write(
            dir.path().join("kernels.toml"),
            "[[kernel]]\nname = \"k\"\nmin_arch = \"8.9a\"\nwhat = \"x\"\n",
        )
        .unwrap();
        let e = format!("{:#}", load_manifest(dir.path()).unwrap_err());
        assert!(e.contains("8.9a"), "{e}");
    }
}
