//! `build-torch`: PyTorch from source for exactly the chosen archs. Advise (does an official wheel
//! already run there?), plan (one environment, every variable checked against the tree), preflight
//! (what would fail hours in, in seconds), drive (ninja progress, full log, first real error,
//! resumable), verify (the wheel's device code and the live module), stamp (an unchanged request
//! returns the existing wheel at once).
//!
//! Layout: [`tree`] reads the source tree, [`reads`] is the variable cross-check, [`plan`] the
//! environment, [`preflight`] the checks, [`drive`] the build itself. The should-you-build advice is
//! the arch model's ([`crate::arch::advice::official_wheel_advice`]); the verification is
//! [`crate::verify::torch_wheel`], the same check `verify env` runs.

pub mod drive;
pub mod generated_sources;
pub mod install_rpath;
pub mod plan;
pub mod preflight;
pub mod prepare;
pub mod reads;
pub mod report;
pub mod slice;
pub mod tree;

pub use prepare::{before_clone, prepare, BeforeClone};

use crate::arch::advice::WheelAdvice;
use crate::build_output::progress::Mode;
use crate::compiler_cache::CacheKind;
use crate::verify::torch_wheel;
use crate::version::Version;
use anyhow::{bail, Context, Result};
use plan::BuildPlan;
use preflight::{Check, Status};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use tree::{NotATorchTree, TorchTree};

/// Where `--version` clones from (a local repository in tests).
pub const GIT_URL_VAR: &str = "ARCHSMITH_PYTORCH_GIT";
pub const DEFAULT_GIT_URL: &str = "https://github.com/pytorch/pytorch";

#[derive(Debug, Clone)]
pub struct Request {
    /// The archs (the `archs --arch` grammar); None for a CPU-only build (`--set USE_CUDA=0`).
    pub arch: Option<crate::arch::spec::ArchSpec>,
    pub src: Option<PathBuf>,
    /// A release to clone (`2.6.0`), instead of `src`.
    pub version: Option<Version>,
    pub cuda: Option<Version>,
    pub python: Option<PathBuf>,
    pub gpus: Vec<String>,
    pub out: PathBuf,
    pub jobs: Option<u32>,
    pub cache: Option<CacheKind>,
    /// Send the compiles to an sccache-dist scheduler (implies `--cache sccache`).
    pub dist: Option<crate::compiler_cache::dist::Dist>,
    pub sets: Vec<(String, String)>,
    pub dry_run: bool,
    pub stop_after_configure: bool,
    /// `--only`: build only these (ninja targets or source files), audit each step, estimate
    /// the whole build; no wheel.
    pub targets: Vec<String>,
    pub progress: Mode,
}

/// Everything decided before anything compiles.
#[derive(Debug, Serialize)]
pub struct Prepared {
    pub tree: TorchTree,
    /// None for a CPU-only build.
    pub cuda: Option<Version>,
    /// Why that CUDA (given, or chosen), or why none.
    pub cuda_reason: String,
    pub advice: Vec<WheelAdvice>,
    pub checks: Vec<Check>,
    /// Absent when a check that the plan needs failed.
    pub plan: Option<BuildPlan>,
    /// What differs in an existing `build/CMakeCache.txt` (it is then reconfigured).
    pub reconfigure: Vec<String>,
    pub preflight_seconds: f64,
}

impl Prepared {
    pub fn failed(&self) -> bool {
        self.plan.is_none() || self.checks.iter().any(|c| c.status == Status::Fail)
    }
}

/// The source tree: `--src`, or a clone of `--version` into archsmith's cache.
pub fn source_tree(req: &Request) -> Result<PathBuf> {
    match (&req.src, &req.version) {
        (Some(_), Some(_)) => bail!(NotATorchTree("give --src DIR or --version VER, not both".into())),
        (Some(src), None) => Ok(src.clone()),
        (None, Some(v)) => clone_release(v),
        (None, None) => bail!(NotATorchTree(
            "no source: give --src DIR (a PyTorch checkout or unpacked source tarball) or --version VER (cloned with its submodules into archsmith's cache)".into()
        )),
    }
}

/// Where the clone of release `version` goes, from which URL, at which tag: `cache/sources/
/// pytorch-vVER` (a mirror other than PyTorch's own gets a directory of its own,
/// `pytorch-vVER-URLHASH`).
pub fn clone_target(version: &Version) -> Result<(PathBuf, String, String)> {
    if version.local().is_some() || version.parts().len() != 3 || version.is_prerelease() {
        bail!(NotATorchTree(format!(
            "--torch {version}: a release to clone is written as its tag names it, e.g. 2.6.0 (no +cuXYZ: the CUDA is --cuda's)"
        )))
    }
    let tag = format!("v{version}");
    let url = std::env::var(GIT_URL_VAR).unwrap_or_else(|_| DEFAULT_GIT_URL.to_string());
    let name = if url == DEFAULT_GIT_URL {
        format!("pytorch-{tag}")
    } else {
        use sha2::{Digest, Sha256};
        let digest = crate::stamp::hex(&Sha256::digest(url.as_bytes()));
        format!("pytorch-{tag}-{}", &digest[..12])
    };
    Ok((
        crate::paths::cache_dir().join("sources").join(name),
        url,
        tag,
    ))
}

/// `git clone --recursive --depth 1 --branch vVER` into [`clone_target`], once.
fn clone_release(version: &Version) -> Result<PathBuf> {
    let (dir, url, tag) = clone_target(version)?;
    let parent = dir.parent().map(Path::to_path_buf).unwrap_or_default();
    std::fs::create_dir_all(&parent).with_context(|| format!("creating {}", parent.display()))?;
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    crate::cache::provision(
        &parent,
        &name,
        &format!("pytorch {tag}"),
        &|dir| Ok(dir.join("version.txt").is_file().then(|| dir.to_path_buf())),
        &mut |staging, progress| {
            if crate::offline::is_remote(&url) {
                crate::offline::require(
                    &format!("pytorch {tag}'s source ({url})"),
                    &format!("Give --src DIR, an unpacked PyTorch source tree, or set {GIT_URL_VAR} to a local mirror"),
                )?;
            }
            progress(&format!("cloning {url} at {tag} with submodules"));
            crate::process::Cmd::new("git")
                .args(["clone", "--recursive", "--depth", "1", "--shallow-submodules", "--branch", &tag])
                .arg(&url)
                .arg(staging)
                .run_progress()
                .with_context(|| format!("cloning {url} at {tag} (needs network, or {GIT_URL_VAR} pointing at a local mirror)"))
        },
        &mut |m| crate::errln!("archsmith: {m}"),
    )
}

impl Request {
    /// `--set USE_CUDA=0` (or OFF, NO, FALSE): a CPU-only build, with no arch list, toolkit or
    /// cuDNN. (`USE_CUDA=` leaves it unset, which torch reads as on.)
    pub fn cpu_only(&self) -> bool {
        self.sets
            .iter()
            .rev()
            .find(|(n, _)| n == "USE_CUDA")
            .is_some_and(|(_, v)| plan::is_bool(v) && !plan::is_on(v))
    }

    /// The arch spec a CUDA build needs; None for a CPU-only build. Options that name GPUs are
    /// refused for a CPU-only build rather than ignored.
    pub fn arch_spec(&self) -> Result<Option<&str>> {
        match (self.cpu_only(), &self.arch) {
            (false, Some(a)) => Ok(Some(a)),
            (false, None) => bail!(
                "--arch SPEC is required: the GPU archs to build (e.g. --arch 7.5,8.9,9.0); or --set USE_CUDA=0 for a CPU-only build"
            ),
            (true, Some(a)) => bail!(
                "--arch {a} with USE_CUDA=0: a CPU-only build compiles no GPU code; drop --arch (or USE_CUDA=0 for a CUDA build)"
            ),
            (true, None) if self.cuda.is_some() || !self.gpus.is_empty() => bail!(
                "--cuda/--gpu with USE_CUDA=0: a CPU-only build uses no CUDA; drop them (or USE_CUDA=0 for a CUDA build)"
            ),
            (true, None) => Ok(None),
        }
    }

    /// `--cache`, or sccache where `--dist` asks for a cluster without naming a cache.
    pub fn cache_kind(&self) -> Option<CacheKind> {
        match (self.cache, &self.dist) {
            (None, Some(_)) => Some(CacheKind::Sccache),
            (kind, _) => kind,
        }
    }
}

/// `--out` made absolute: the build runs in the tree, not where the user stands.
fn out_dir(out: &Path) -> PathBuf {
    if out.is_absolute() {
        out.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|d| d.join(out))
            .unwrap_or_else(|_| out.to_path_buf())
    }
}

/// What a finished run produced.
#[derive(Debug, Serialize)]
pub struct Outcome {
    pub prepared: Prepared,
    /// The delivered wheel (None for `--dry-run` and `--stop-after configure`).
    pub wheel: Option<PathBuf>,
    /// An unchanged stamp returned the existing wheel.
    pub reused: bool,
    pub stamp: Option<String>,
    pub log: Option<PathBuf>,
    pub build_seconds: f64,
    pub cache_stats: Option<String>,
    /// With `--dist`: compiles per build server, and failed distributions.
    pub distributed: Option<crate::compiler_cache::dist::DistStats>,
    pub slowest_steps: Vec<(String, f64)>,
    /// The build's trace and timeline, from its `.ninja_log`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub insight: Option<crate::build_insight::written::Written>,
    pub verify: Option<torch_wheel::Report>,
    /// `--only`: what the slice built, its audit and the whole build's estimate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slice: Option<slice::SliceReport>,
    /// The build ran and failed: its first error and the log (the caller exits 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub build_failed: Option<drive::BuildFailed>,
}

/// What goes into the stamp: what decides the wheel's contents.
#[derive(Debug, Serialize, serde::Deserialize)]
struct StampInputs {
    schema: u32,
    source: String,
    front_end: String,
    nvcc: String,
    python: String,
    env: BTreeMap<String, String>,
}

/// Files torch's build itself writes into the source tree, relative to its root: left out of the
/// source identity, or no build would ever match the stamp of the one before (each rewrites them).
/// `setup.py` regenerates `torch/version.py`, mirrors ATen's YAML and templates into
/// `torchgen/packaged` (`mirror_files_into_torchgen`) and rewrites `LICENSE` while it packs
/// (`concat_license_files`, restored after); CMake's install step writes `torch/lib`,
/// `torch/include`, `torch/bin`, `torch/share` and `functorch/functorch.so`, every one of them
/// listed in `build/install_manifest.txt` (torch/lib also holds sources: libshm's).
const WRITTEN_BY_THE_BUILD: [&str; 3] = ["torch/version.py", "torchgen/packaged", "LICENSE"];

/// What the build installed into the tree: `build/install_manifest.txt`'s paths under `root`.
fn installed_into_tree(root: &Path) -> std::collections::HashSet<PathBuf> {
    std::fs::read_to_string(root.join("build/install_manifest.txt"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| Path::new(l.trim()).strip_prefix(root).ok())
        .map(|p| p.components().collect())
        .collect()
}

/// Source identity: the commit (and whether the work tree differs) of a checkout; for a tarball,
/// a hash of every file's path, size and modification time (metadata only: fast on 15,000 files),
/// the build's own outputs in the tree left out.
fn source_identity(tree: &TorchTree) -> String {
    if let Some(g) = &tree.git {
        if !g.dirty {
            return format!("git {}", g.head);
        }
    }
    let head = tree
        .git
        .as_ref()
        .map(|g| format!("git {} dirty ", g.head))
        .unwrap_or_default();
    format!("{head}tree {}", files_identity(&tree.root))
}

/// The hash of every source file's path, size and modification time under `root`.
fn files_identity(root: &Path) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    let mut stack = vec![root.to_path_buf()];
    let mut entries = Vec::new();
    let installed = installed_into_tree(root);
    let written = |rel: &Path| {
        installed.contains(rel) || WRITTEN_BY_THE_BUILD.iter().any(|w| rel.starts_with(w))
    };
    while let Some(dir) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Ok(md) = e.metadata() else { continue };
            let path = e.path();
            let rel = path.strip_prefix(root).unwrap_or(&path);
            if written(rel) {
                continue;
            }
            if md.is_dir() {
                if !matches!(name.as_str(), "build" | "dist" | ".git" | "__pycache__")
                    && !name.ends_with(".egg-info")
                {
                    stack.push(e.path());
                }
            } else {
                let mtime = md
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map_or(0, |d| d.as_nanos());
                entries.push(format!("{}\0{}\0{mtime}", rel.display(), md.len()));
            }
        }
    }
    entries.sort();
    for e in &entries {
        h.update(e.as_bytes());
        h.update(b"\n");
    }
    crate::stamp::hex(&h.finalize())
}

fn stamp_inputs(p: &Prepared, plan: &BuildPlan) -> StampInputs {
    StampInputs {
        schema: 1,
        source: source_identity(&p.tree),
        front_end: plan.front_end.name().into(),
        nvcc: plan
            .nvcc_version
            .clone()
            .unwrap_or_else(|| "none (CPU-only)".into()),
        python: plan.python.display().to_string(),
        // Jobs and launchers change how fast, not what.
        env: plan
            .env
            .iter()
            .filter(|v| v.kind == plan::VarKind::Build)
            .filter(|v| {
                !matches!(v.name.as_str(), "MAX_JOBS" | "CMAKE_BUILD_PARALLEL_LEVEL")
                    && !v.name.ends_with("_COMPILER_LAUNCHER")
            })
            .map(|v| (v.name.clone(), v.value.clone()))
            .collect(),
    }
}

/// Runs build-torch: [`prepare`], and unless `--dry-run` or preflight failed, return the wheel of
/// an unchanged stamp, or [`drive`](drive::drive) the build, deliver the wheel, [`verify`] it and
/// record the stamp.
pub fn run(req: &Request) -> Result<Outcome> {
    let root = source_tree(req)?;
    let prepared = prepare(req, &root)?;
    let mut outcome = Outcome {
        wheel: None,
        reused: false,
        stamp: None,
        log: None,
        build_seconds: 0.0,
        cache_stats: None,
        distributed: None,
        slowest_steps: Vec::new(),
        insight: None,
        verify: None,
        slice: None,
        build_failed: None,
        prepared,
    };
    // A failed preflight is an outcome too: its checks carry the fixes (the caller exits 2).
    if req.dry_run || outcome.prepared.failed() {
        return Ok(outcome);
    }
    let plan = outcome.prepared.plan.clone().context("no plan")?;
    let out = out_dir(&req.out);
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    crate::stamp::remove_stale_partials(&out);
    if !req.targets.is_empty() {
        return run_slice(outcome, &plan, req, &out);
    }
    let inputs = stamp_inputs(&outcome.prepared, &plan);
    let key = crate::stamp::key(&inputs);
    outcome.stamp = Some(key.clone());
    if !req.stop_after_configure {
        if let Some((wheel, verify)) =
            crate::stamp::lookup::<Option<torch_wheel::Report>>(&out, &key)
        {
            outcome.wheel = Some(wheel);
            outcome.reused = true;
            outcome.verify = verify;
            return Ok(outcome);
        }
    }
    let driven = match drive::drive(&outcome.prepared, &plan, req, &out)? {
        Ok(d) => d,
        Err(failed) => {
            outcome.log = Some(failed.log.clone());
            outcome.build_failed = Some(failed);
            return Ok(outcome);
        }
    };
    let drive::Driven {
        wheel: built,
        log,
        ninja_log,
        seconds,
        cache_stats,
        distributed,
        slowest,
        insight,
    } = driven;
    outcome.insight = insight;
    outcome.log = Some(log);
    outcome.build_seconds = seconds;
    outcome.cache_stats = cache_stats;
    outcome.distributed = distributed;
    outcome.slowest_steps = slowest;
    let Some(built) = built else {
        return Ok(outcome);
    };
    let wheel = deliver(&plan, &built, ninja_log.as_deref(), &out)?;
    let report = verify(&plan, outcome.prepared.cuda.as_ref(), &wheel, &out)?;
    crate::stamp::record(&out, &inputs, &wheel, &Some(&report))?;
    outcome.wheel = Some(wheel);
    outcome.verify = Some(report);
    Ok(outcome)
}

/// `--only`: the slice instead of the wheel (no stamp: nothing is delivered).
fn run_slice(mut outcome: Outcome, plan: &BuildPlan, req: &Request, out: &Path) -> Result<Outcome> {
    match drive::drive_slice(&outcome.prepared, plan, req, out)? {
        Ok(report) => {
            outcome.log = Some(report.log.clone());
            outcome.build_seconds = report.seconds;
            outcome.slice = Some(report);
        }
        Err(failed) => {
            outcome.log = Some(failed.log.clone());
            outcome.build_failed = Some(failed);
        }
    }
    Ok(outcome)
}

/// The built wheel moved into the output dir, with the build's `.ninja_log` beside it.
fn deliver(
    plan: &BuildPlan,
    built: &Path,
    ninja_log: Option<&Path>,
    out: &Path,
) -> Result<PathBuf> {
    let wheel = crate::stamp::deliver(built, out)?;
    let _ = std::fs::remove_dir_all(&plan.wheel_dir);
    if let Some(ninja_log) = ninja_log {
        let name = wheel
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let _ = std::fs::copy(ninja_log, out.join(format!("{name}.ninja_log")));
    }
    Ok(wheel)
}

/// The delivered wheel's device code against the plan and, in a venv of the build Python, the
/// live module: `verify env`'s check of a torch wheel ([`torch_wheel::check_wheel`]).
fn verify(
    plan: &BuildPlan,
    cuda: Option<&Version>,
    wheel: &Path,
    out: &Path,
) -> Result<torch_wheel::Report> {
    let venv_python = match drive::verify_env(plan, wheel, out) {
        Ok(p) => Some(p),
        Err(e) => {
            crate::errln!("archsmith: could not make a Python to import the wheel in ({e:#}); the import checks are skipped");
            None
        }
    };
    torch_wheel::check_wheel(&torch_wheel::Request {
        wheel: wheel.to_path_buf(),
        arch: plan.torch_cuda_arch_list.clone(),
        cuda: cuda.cloned(),
        python: venv_python,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_the_build_writes_into_the_tree_leaves_the_source_identity_alone() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        let write = |rel: &str, text: &str| {
            let p = root.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        write(
            "aten/src/ATen/native/native_functions.yaml",
            "- func: add\n",
        );
        write("torch/lib/libshm/core.cpp", "int f();\n");
        write("LICENSE", "BSD\n");
        let before = files_identity(root);
        // One build: CMake installs (with its manifest), setup.py regenerates and mirrors.
        write("torch/lib/libtorch.so.2.6", "\x7fELF");
        write("torch/include/ATen/ATen.h", "#pragma once\n");
        let manifest = format!(
            "{}\n{}",
            root.join("torch/lib/libtorch.so.2.6").display(),
            root.join("torch/include/ATen/ATen.h").display()
        );
        write("build/install_manifest.txt", &manifest);
        write("torch/version.py", "__version__ = '2.6.0'\n");
        write(
            "torchgen/packaged/ATen/native/native_functions.yaml",
            "- func: add\n",
        );
        write("LICENSE", "BSD\nbundled\n");
        write("LICENSE", "BSD\n");
        assert_eq!(files_identity(root), before);
        // A source edited, in torch/lib too (libshm's), is a new identity.
        write("torch/lib/libshm/core.cpp", "int f(int);\n");
        assert_ne!(files_identity(root), before);
    }
}
