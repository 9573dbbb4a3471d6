//! `port-extension`: bring a legacy torch C++/CUDA extension to modern torch and prove it.
//!
//! fetch → copy into a work tree under the cache → rule catalogues ([`crate::codemod`]) → the
//! recipe's patch files → review items resolved or explained → [`crate::build_ext::run`] for the
//! archs (which audits the wheel against the plan and imports it) → the import sweep → the
//! recipe's smoke test. Each is a function in [`steps`], called in that order by [`run`].
//! The user's source is never written: everything happens in the work tree
//! (`<cache>/port/<key>/<name>`, [`steps::port_dir`]), which is a git repository whose one commit is the unported
//! source, so `git diff` there shows the port.

pub mod certain_failures;
pub mod header_history;
pub mod package_tests;
pub mod recipe;
pub mod signature_changes;
pub mod steps;
mod summary;
pub mod tree_of_packages;
pub mod workdir;

pub use steps::run;

use crate::build_ext::{self, SourceSpec};
use crate::build_output::progress;
use crate::codemod;
use crate::kb::kb;
use crate::paths;
use crate::process::Cmd;
use crate::python;
use crate::version::Version;
use anyhow::{bail, Context, Result};
use fs_err as fs;
use recipe::{Recipe, SourceKind};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;
use workdir::Applied;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunMode {
    /// Port, build, verify.
    Full,
    /// Port in the work tree, print the diff, stop.
    DryRun,
    /// Like DryRun; the caller exits 1 if anything changes or a review item is unexplained.
    Check,
}

#[derive(Debug, Clone)]
pub struct Request {
    pub recipe: Recipe,
    /// Overrides the recipe's source.
    pub src: Option<PathBuf>,
    /// None for a dry run or `--check`, which build nothing.
    pub arch: Option<crate::arch::spec::ArchSpec>,
    /// `--torch`, `--cuda`, `--python`: with a Python given, its torch is the target unless
    /// `--torch` is given too.
    pub target: crate::python::TargetEnv,
    pub mode: RunMode,
    pub progress: progress::Mode,
    /// Also install the source's `requirements.txt` beside the env for the import sweep (the
    /// wheel's own `Requires-Dist` always are).
    pub with_deps: bool,
    /// Build with the extension's own nvcc arch flags (see `build_ext::arch_guard`).
    pub own_arch_flags: bool,
    /// Port and build a source whose git submodules are empty anyway (build-ext's flag).
    pub skip_missing_submodules: bool,
    /// Run the package's own test suite against the built wheel (`--no-tests` turns it off).
    pub run_tests: bool,
    /// `--stable-abi`: port onto torch's stable ABI, operators in this namespace
    /// (torch.ops.NS.*); the recipe's `stable/*.patch` instead of its patches; a limited-API
    /// `abi3` build for the lowest `TORCH_TARGET_VERSION` the rewritten code allows.
    pub stable_abi: Option<String>,
    /// `--from-torch`: the release the code was written for (else read from its requirement
    /// files and setup.py, [`signature_changes::era`]).
    pub from_torch: Option<crate::version::Version>,
    /// `--jobs`: the build's concurrent compile jobs (default from cores and memory).
    pub jobs: Option<u32>,
    /// The pool of job slots the build shares with the other packages of a tree built at once
    /// ([`tree_of_packages`]).
    pub pool: Option<crate::build_ext::job_pool::PoolShare>,
}

/// What a `--stable-abi` port targets.
#[derive(Debug, Clone, Serialize)]
pub struct StableAbi {
    /// The operators' namespace: `torch.ops.NAMESPACE.f`.
    pub namespace: String,
    /// The oldest torch the rewritten code allows (the newest `replacement_since` of the stable
    /// rules that fired).
    pub torch_target_version: String,
    /// The `-DTORCH_TARGET_VERSION=` value the build gets.
    pub torch_target_macro: String,
    /// How the built extensions reach the CUDA runtime, read from the wheel after the build:
    /// `linked in (CUDA 13.2)`, or the `libcudart.so.N` one needs (which binds the wheel to
    /// the torch releases whose wheels bring CUDA N). None without CUDA code.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cuda_runtime: Option<String>,
    /// The oldest NVIDIA driver its CUDA code runs on: the minor-version-compatibility floor of
    /// the CUDA major it was compiled with (the knowledge base's `[[cuda_major]]`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub driver_floor: Option<String>,
    /// The oldest driver that JIT-compiles its PTX, where asked archs run only that
    /// (`build.ptx_cover`: the compiling release's own minimum, above the major's floor).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ptx_driver_floor: Option<String>,
    /// The built wheel's platform tag (`manylinux_2_34_x86_64`: the manylinux policy its files
    /// allow, as auditwheel judges it with torch's libraries left to torch; `linux_x86_64` when
    /// none does, which PyPI refuses).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub platform_tag: Option<String>,
}

/// How a review item was dealt with.
#[derive(Debug, Clone, Serialize)]
pub struct ReviewRow {
    pub file: String,
    pub line: usize,
    pub rule: String,
    pub code: String,
    /// `patch NAME`, `accepted: REASON`, `UNEXPLAINED`, or (a recipe-less port, where review
    /// items do not block) `to review`.
    pub resolution: String,
    /// What to check or change, from the rule.
    pub suggestion: String,
    pub explained: bool,
}

/// What a port reports of its build: build-ext's own outcome, as `build-ext --json` prints it,
/// and the archs each shared object carries.
#[derive(Debug, Clone, Serialize)]
pub struct BuildSummary {
    #[serde(flatten)]
    pub built: build_ext::Outcome,
    /// SASS archs per audited shared object.
    pub sass: BTreeMap<String, Vec<String>>,
    pub ptx: BTreeMap<String, Vec<String>>,
    /// The package declares no CUDA code (C++ extensions only): no device code, none planned.
    pub cpu_only: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub recipe: String,
    /// No recipe: review items are listed, not required to be explained.
    pub recipe_less: bool,
    pub source: String,
    /// The sdist's sha256 or the git commit the source was at (what `--write-recipe` pins).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_pin: Option<String>,
    pub work_tree: PathBuf,
    pub files_scanned: usize,
    /// Files the rules and patches changed (source-relative).
    pub files_changed: Vec<String>,
    pub rewrites: BTreeMap<String, usize>,
    /// Per file (source-relative), the rewrites of each rule in it.
    pub changes: BTreeMap<String, BTreeMap<String, usize>>,
    /// Why each rule that rewrote something exists.
    pub why: BTreeMap<String, String>,
    pub patches: Vec<Applied>,
    pub review: Vec<ReviewRow>,
    pub unexplained: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stable_abi: Option<StableAbi>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
    pub build: Option<BuildSummary>,
    /// Every module of the built package imported on the target torch, and why any did not.
    pub import_sweep: Option<build_ext::check::Sweep>,
    /// A tree of JIT extensions: the prebuild (it replaces the wheel, the import sweep and the
    /// smoke test; its check loads each extension with no compiler on PATH).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jit: Option<build_ext::jit::Outcome>,
    /// The smoke test's own report (`ARCHSMITH_SMOKE` line).
    pub smoke: Option<serde_json::Value>,
    /// The package's own test suite run against the wheel, where the source ships one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tests: Option<package_tests::TestsReport>,
    pub seconds: f64,
}

/// A port that ran but did not verify: review items nobody explained, or a smoke test whose
/// numbers are wrong. (A build that fails is `build_ext::BuildFailure`.)
#[derive(Debug, Serialize)]
pub struct VerifyFailure {
    /// `review` or `smoke`.
    pub stage: &'static str,
    pub message: String,
    /// The smoke test's report, when it got that far.
    pub smoke: Option<serde_json::Value>,
}

impl std::fmt::Display for VerifyFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.message)
    }
}

impl std::error::Error for VerifyFailure {}

/// Why a port that ran did not verify: the CLI exits 1 on either; anything else is an error
/// (exit 2). Serialized as the failure itself (its `stage` says which).
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum PortFailure {
    /// The ported tree did not build, audit or import (or still uses a removed API).
    Build(build_ext::BuildFailure),
    /// Review items nobody explained, or a failed smoke test.
    Verify(VerifyFailure),
}

impl ReviewRow {
    /// `file:line: [rule] code — what to do`, as a port warns of an item left to review.
    pub fn warning(&self) -> String {
        format!(
            "{}:{}: [{}] {} — {}",
            self.file, self.line, self.rule, self.code, self.suggestion
        )
    }
}

impl PortFailure {
    /// What the command says of it: the stage, the first error, the log.
    pub fn message(&self, name: &str) -> String {
        match self {
            PortFailure::Build(b) => format!("the ported {name} does not build: {b}"),
            PortFailure::Verify(v) => v.to_string(),
        }
    }
}

impl BuildSummary {
    /// What a port reports of build-ext's outcome.
    pub fn of(built: build_ext::Outcome) -> BuildSummary {
        let audit = &built.record.audit;
        let per_file = |images: fn(&build_ext::check::SoAudit) -> &Vec<String>| {
            audit
                .files
                .iter()
                .map(|f| (f.path.clone(), images(f).clone()))
                .collect()
        };
        BuildSummary {
            sass: per_file(|f| &f.sass),
            ptx: per_file(|f| &f.ptx),
            cpu_only: audit.cpu_only,
            built,
        }
    }
}

/// Every argument checked before any work, a dry run included: an unknown torch or CUDA release
/// and an arch list the chosen releases cannot build stop here, naming the argument.
fn validate(req: &Request) -> Result<()> {
    let kb = kb();
    crate::kb::user_input::torch_and_cuda(req.target.torch.as_ref(), req.target.cuda.as_ref())?;
    let known = |mut v: Vec<&Version>| {
        v.sort();
        v.dedup();
        format!(
            "{}…{}",
            v.first().map_or(String::new(), |x| x.to_string()),
            v.last().map_or(String::new(), |x| x.to_string())
        )
    };
    if let Some(t) = &req.target.torch {
        if kb.torch_row(t).is_none() {
            bail!(
                "--torch {t}: unknown torch release; archsmith knows torch {}",
                known(kb.torch.iter().map(|r| &r.version).collect())
            );
        }
    }
    if let Some(c) = &req.target.cuda {
        if kb.cuda_row(c).is_none() {
            bail!(
                "--cuda {c}: unknown CUDA release; archsmith knows CUDA {}",
                known(kb.cuda.iter().map(|r| &r.version).collect())
            );
        }
    }
    // The form was checked where it was typed. A run that builds parses it once, against the
    // env that compiles, before the source is copied (steps::prepare_build); a dry run or --check
    // compiles nothing, so what the --torch and --cuda given accept is checked here. So is a
    // stable port's: its toolkit depends on the target its rules find, so build-ext makes its
    // plan only at the build, and a bad arch must not wait for the work tree and the rules.
    let checked_here = req.mode != RunMode::Full || req.stable_abi.is_some();
    match (&req.arch, req.mode) {
        (None, RunMode::Full) => bail!("{ARCH_REQUIRED}"),
        (Some(arch), _) if checked_here => {
            let ctx = crate::arch::spec::PlanContext::new(
                req.target.torch.clone(),
                req.target.cuda.clone(),
            );
            crate::arch::spec::Plan::parse(&ctx, arch).map_err(|e| {
                anyhow::anyhow!("--arch {}: {e}", crate::kb::user_input::echo(arch))
            })?;
        }
        _ => {}
    }
    Ok(())
}

/// A port that builds needs the archs to build for.
pub const ARCH_REQUIRED: &str = "--arch SPEC is required to build the port (e.g. --arch 7.5,8.9,9.0); --dry-run and --check build nothing";

/// The recipe of `--src` given without one: a directory, `pypi:NAME==VER` or `git+URL@REV`.
pub fn recipe_less(src: &str) -> Result<Recipe> {
    let name_of = |s: &str| -> String {
        let n: String = s
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c.to_ascii_lowercase()
                } else {
                    '-'
                }
            })
            .collect();
        let n = n.trim_matches('-').to_string();
        if n.is_empty() {
            "extension".into()
        } else {
            n
        }
    };
    let mut source = recipe::Source {
        path: None,
        git: None,
        commit: None,
        pypi: None,
        sha256: None,
    };
    let name;
    if src.starts_with("pypi:") {
        // The same grammar build-ext reads.
        let SourceSpec::Pypi { name: n, version } = SourceSpec::parse(src)? else {
            bail!("--src {src}: write pypi:NAME==VERSION");
        };
        name = name_of(&n);
        source.pypi = Some(format!("{n}=={version}"));
    } else if let Some(rest) = src.strip_prefix("git+") {
        let Some((url, rev)) = rest
            .rsplit_once('@')
            .filter(|(u, r)| !r.is_empty() && !r.contains('/') && u.contains("://"))
        else {
            bail!("--src {src}: write git+URL@REV, e.g. git+https://github.com/owner/repo@v1.0 (a tag, branch or commit)");
        };
        name = name_of(
            url.trim_end_matches('/')
                .rsplit('/')
                .next()
                .unwrap_or("extension")
                .trim_end_matches(".git"),
        );
        source.git = Some(url.to_string());
        source.commit = Some(rev.to_string());
    } else {
        let dir = Path::new(src);
        if !dir.is_dir() {
            bail!("--src {src}: no such directory (for PyPI write pypi:NAME==VER, for git git+URL@REV)");
        }
        let script = ["setup.py", "pyproject.toml"]
            .iter()
            .any(|f| dir.join(f).is_file());
        // A tree of JIT extensions (torch's load()) has no build script: build-ext prebuilds it.
        if !script && build_ext::jit::find(dir)?.sites.is_empty() {
            bail!(
                "--src {src}: neither setup.py nor pyproject.toml there, and no load()/load_inline() call; give the directory the extension builds from"
            );
        }
        let dir = dir.canonicalize().with_context(|| format!("--src {src}"))?;
        name = name_of(
            &dir.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
        );
        source.path = Some(dir);
    }
    Ok(Recipe::generic(&name, source))
}

/// `--stable-namespace` (`explicit`), else the package of the recipe's module (`legacy_demo._C` →
/// `legacy_demo`), else the source directory's name, else (a `pypi:` or `git+` source, no
/// directory to name it) the recipe's name, which is the package's: `neural_renderer_pytorch`,
/// not a bare `ext_`.
pub fn stable_namespace(explicit: Option<&str>, src: Option<&str>, recipe: &Recipe) -> String {
    if let Some(ns) = explicit {
        return ns.to_string();
    }
    let src = src.map(PathBuf::from).filter(|p| p.exists());
    match recipe
        .build
        .module
        .split('.')
        .next()
        .filter(|p| !p.is_empty())
    {
        Some(package) => package.to_string(),
        None if src.is_some() => crate::codemod::stable_bindings::namespace_of(src.as_ref()),
        None => crate::codemod::stable_bindings::namespace_named(&recipe.name),
    }
}

/// `95 modules: 90 import; not installed: cityscapesscripts (4 modules); other: 1`.
pub fn sweep_summary(sweep: &build_ext::check::Sweep) -> String {
    let total = sweep.imported.len() + sweep.failures.len();
    let mut s = format!(
        "import sweep: {} of {total} modules import",
        sweep.imported.len()
    );
    let missing = sweep.missing();
    if !missing.is_empty() {
        s.push_str(&format!("; not installed: {}", missing.join(", ")));
    }
    for kind in ["removed-api", "error"] {
        let n = sweep.failures.iter().filter(|f| f.kind == kind).count();
        if n > 0 {
            s.push_str(&format!("; {kind}: {n}"));
        }
    }
    s
}

/// The source directory and a label naming where it came from.
/// The source directory, a label naming where it came from, and what pins it (the sdist's sha256
/// or the commit a git source is at).
fn fetch(r: &Recipe, src: Option<&Path>) -> Result<(PathBuf, String, Option<String>)> {
    let kind = r.source_kind()?;
    if let Some(dir) = src {
        if !dir.is_dir() {
            bail!("--src {}: not a directory", dir.display());
        }
        let mut label = dir.display().to_string();
        if let SourceKind::Git { commit, .. } = &kind {
            match workdir::head_commit(dir) {
                Some(head) if head == *commit => label.push_str(&format!(" (commit {commit})")),
                Some(head) => {
                    crate::errln!(
                        "note: --src {} is at commit {}, not the {} that recipe {} pins; fine if it holds that commit's files (the patches are checked as they apply)",
                        dir.display(),
                        &head[..12],
                        &commit[..12],
                        r.name
                    );
                    label.push_str(&format!(
                        " (commit {}, recipe pins {})",
                        &head[..12],
                        &commit[..12]
                    ));
                }
                None => {}
            }
        }
        return Ok((dir.to_path_buf(), label, None));
    }
    match kind {
        SourceKind::Path(p) => {
            let label = if p.starts_with(paths::repo_root()) {
                format!("{} (in this repository)", rel(&p, &paths::repo_root()))
            } else {
                p.display().to_string()
            };
            Ok((p.clone(), label, None))
        }
        SourceKind::Git { url, commit } => {
            let cache = paths::cache_dir().join("sources").join(&r.name);
            let dir = workdir::git_checkout(&url, &commit, &cache)?;
            let head = workdir::head_commit(&dir);
            Ok((dir, format!("{url} @ {commit}"), head))
        }
        SourceKind::Pypi { spec, sha256 } => {
            let (name, version) = spec.split_once("==").unwrap_or((&spec, ""));
            let torch = kb().releases.newest_torch.clone();
            let env = python::ensure_torch_env(&torch)?;
            let sdist = build_ext::source::download_sdist(name, version)?;
            let got = crate::stamp::hash_file(&sdist)?;
            if !sha256.is_empty() && got != sha256 {
                bail!(
                    "{}: sha256 {got}, recipe {} pins {sha256}; the sdist changed or the recipe is wrong",
                    sdist.display(),
                    r.name
                );
            }
            let unpack = paths::cache_dir()
                .join("sources")
                .join(&r.name)
                .join(&got[..12]);
            let _ = fs::remove_dir_all(&unpack);
            let resolved = build_ext::source::Resolved {
                spec: SourceSpec::Sdist(sdist.clone()),
                path: sdist,
                hash: got.clone(),
            };
            let dir = build_ext::source::materialize(&resolved, &unpack, &env.python)?;
            Ok((
                dir,
                format!("pypi:{spec} (sha256 {})", &got[..12]),
                Some(got),
            ))
        }
    }
}

fn rel(p: &Path, root: &Path) -> String {
    p.strip_prefix(root).unwrap_or(p).display().to_string()
}

/// A review item a rule reported: where, which rule, the code and what to check.
#[derive(Debug, Clone)]
pub struct Item {
    file: String,
    line: usize,
    rule: String,
    code: String,
    suggestion: String,
}

fn review_items(rep: &codemod::Report, root: &Path) -> Vec<Item> {
    rep.files
        .iter()
        .flat_map(|f| {
            f.review.iter().map(|r| Item {
                file: rel(&f.path, root),
                line: r.line,
                rule: r.rule.clone(),
                code: r.code.clone(),
                suggestion: r.suggestion.clone(),
            })
        })
        .collect()
}

/// Items found after the rules but gone after the patches are resolved by the patch(es) that
/// touched their file; items still there must match an `[[accepted]]` entry.
fn resolve_review(
    after_rules: &[Item],
    remaining: &[Item],
    patches: &[Applied],
    accepted: &[recipe::Accepted],
    recipe_less: bool,
) -> Vec<ReviewRow> {
    let key = |i: &Item| (i.file.clone(), i.rule.clone(), i.code.clone());
    let mut left: BTreeMap<(String, String, String), usize> = BTreeMap::new();
    for i in remaining {
        *left.entry(key(i)).or_default() += 1;
    }
    let mut rows = Vec::new();
    for i in after_rules {
        let k = key(i);
        match left.get_mut(&k) {
            Some(n) if *n > 0 => {
                *n -= 1;
                continue; // still there: handled below with its post-patch line
            }
            _ => {}
        }
        let by: Vec<&str> = patches
            .iter()
            .filter(|p| p.files.contains(&i.file))
            .map(|p| p.patch.as_str())
            .collect();
        rows.push(ReviewRow {
            file: i.file.clone(),
            line: i.line,
            rule: i.rule.clone(),
            code: i.code.clone(),
            resolution: if by.is_empty() {
                "gone after the patches".into()
            } else {
                format!("patch {}", by.join(", "))
            },
            suggestion: i.suggestion.clone(),
            explained: true,
        });
    }
    for i in remaining {
        let ok = accepted.iter().find(|a| {
            a.file == i.file
                && a.rule == i.rule
                && a.code.as_deref().is_none_or(|c| i.code.contains(c))
        });
        rows.push(ReviewRow {
            file: i.file.clone(),
            line: i.line,
            rule: i.rule.clone(),
            code: i.code.clone(),
            resolution: match ok {
                Some(a) => format!("accepted: {}", a.reason),
                None if recipe_less => "to review".into(),
                None => "UNEXPLAINED".into(),
            },
            suggestion: i.suggestion.clone(),
            explained: ok.is_some(),
        });
    }
    rows
}

/// Runs the smoke script with the unpacked wheel first on PYTHONPATH, then `beside` (the
/// wheel's requirements the import sweep installed beside the env); returns its report, or the
/// failure it reported (`Ok(Err(_))`).
pub fn smoke(
    python: &Path,
    script: &Path,
    args: &[String],
    site: &Path,
    beside: &[PathBuf],
) -> Result<Result<serde_json::Value, VerifyFailure>> {
    let t = Instant::now();
    let path =
        std::env::join_paths(std::iter::once(site).chain(beside.iter().map(PathBuf::as_path)))?;
    let out = Cmd::new(python)
        .arg(script)
        .args(args)
        .env("PYTHONPATH", path)
        .env_remove("CUDA_HOME")
        .env_remove("CUDA_PATH")
        .env_remove("LD_LIBRARY_PATH")
        .dir(site)
        .output()?;
    for l in out
        .stdout
        .lines()
        .filter(|l| !l.starts_with("ARCHSMITH_SMOKE "))
    {
        crate::errln!("  {l}");
    }
    let report = out
        .stdout
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("ARCHSMITH_SMOKE "))
        .map(serde_json::from_str::<serde_json::Value>)
        .transpose()
        .context("the smoke test's ARCHSMITH_SMOKE line is not JSON")?;
    match (out.success(), report) {
        (true, Some(mut r)) if r["ok"] == true => {
            r["seconds"] = serde_json::json!(t.elapsed().as_secs_f64());
            Ok(Ok(r))
        }
        (_, Some(r)) => {
            let problems: Vec<String> = r["problems"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|p| format!("  {}", p.as_str().unwrap_or_default()))
                        .collect()
                })
                .unwrap_or_default();
            Ok(Err(VerifyFailure {
                stage: "smoke",
                message: format!(
                    "smoke test {} failed:\n{}",
                    script.display(),
                    problems.join("\n")
                ),
                smoke: Some(r),
            }))
        }
        (_, None) => Ok(Err(VerifyFailure {
            stage: "smoke",
            message: format!(
                "smoke test {} failed before reporting ({}):\n{}",
                script.display(),
                out.status
                    .map_or("killed".into(), |c| format!("exit code {c}")),
                out.stderr.trim()
            ),
            smoke: None,
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `pypi:` source has no directory to name the namespace: the package's name does
    /// (neural-renderer-pytorch's operators were `torch.ops.ext_*` before).
    #[test]
    fn a_stable_namespace_is_named_after_the_package() {
        let source = |pypi: Option<&str>| recipe::Source {
            path: None,
            git: None,
            commit: None,
            pypi: pypi.map(String::from),
            sha256: None,
        };
        let r = Recipe::generic(
            "neural-renderer-pytorch",
            source(Some("neural-renderer-pytorch==1.1.3")),
        );
        let ns = |src: Option<&str>| stable_namespace(None, src, &r);
        assert_eq!(
            ns(Some("pypi:neural-renderer-pytorch==1.1.3")),
            "neural_renderer_pytorch"
        );
        assert_eq!(ns(None), "neural_renderer_pytorch");
        let dir = tempfile::Builder::new().prefix("3d-ops").tempdir().unwrap();
        assert!(ns(dir.path().to_str()).starts_with("ext_3d_ops"));
        assert_eq!(stable_namespace(Some("mine"), None, &r), "mine");
    }

    fn item(file: &str, line: usize, rule: &str, code: &str) -> Item {
        Item {
            file: file.into(),
            line,
            rule: rule.into(),
            code: code.into(),
            suggestion: "check it".into(),
        }
    }

    #[test]
    fn review_items_are_credited_to_patches_accepted_or_unexplained() {
        let same = "TORCH_CHECK(false, \"(%d vs %d)\", a, b);";
        let after_rules = vec![
            item("a.cu", 3, "at-assert", "AT_ASSERTM(x.is_cuda(), \"x\");"),
            // the same line twice in one file: one fixed by the patch, one left
            item("b.cu", 10, "printf-in-check", same),
            item("b.cu", 20, "printf-in-check", same),
            item(
                "c.cu",
                5,
                "at-assert",
                "AT_ASSERTM(x.is_contiguous(), \"x\");",
            ),
        ];
        let remaining = vec![
            item("b.cu", 20, "printf-in-check", same),
            item(
                "c.cu",
                5,
                "at-assert",
                "AT_ASSERTM(x.is_contiguous(), \"x\");",
            ),
        ];
        let patches = vec![Applied {
            patch: "0001-fix.patch".into(),
            files: vec!["a.cu".into(), "b.cu".into()],
        }];
        let accepted = vec![recipe::Accepted {
            file: "c.cu".into(),
            rule: "at-assert".into(),
            code: Some("is_contiguous".into()),
            reason: "invariant".into(),
        }];
        let rows = resolve_review(&after_rules, &remaining, &patches, &accepted, false);
        // Without a recipe the same item is to review, with the rule's suggestion, not blocking.
        let loose = resolve_review(&after_rules, &remaining, &patches, &[], true);
        assert!(loose
            .iter()
            .filter(|r| !r.explained)
            .all(|r| r.resolution == "to review" && r.suggestion == "check it"));
        let got: Vec<(&str, usize, &str, bool)> = rows
            .iter()
            .map(|r| (r.file.as_str(), r.line, r.resolution.as_str(), r.explained))
            .collect();
        assert_eq!(
            got,
            [
                ("a.cu", 3, "patch 0001-fix.patch", true),
                ("b.cu", 20, "patch 0001-fix.patch", true),
                ("b.cu", 20, "UNEXPLAINED", false),
                ("c.cu", 5, "accepted: invariant", true),
            ]
        );
    }
}
