//! The compiler boundary for archs: every nvcc a build runs gets exactly the plan's device code,
//! whatever flags the extension's build script passes.
//!
//! Extensions hard-code `-gencode`/`-arch` flags (built by a comprehension, an f-string, CMake's
//! own `CMAKE_CUDA_ARCHITECTURES`), or set `TORCH_CUDA_ARCH_LIST` in `setup.py`; torch's
//! `_get_cuda_arch_flags` then adds nothing of the plan, and nvcc 13 stops at the first arch it
//! no longer compiles. Reading build scripts for such flags cannot be exact (a `-arch arm64` for
//! clang on macOS is not nvcc's), so the guard sits where the flags arrive: a `CUDA_HOME` whose
//! `bin/nvcc` is a wrapper that runs `archsmith nvcc-guard`, which removes the arch flags of the
//! command line (and of `NVCC_APPEND_FLAGS`/`NVCC_PREPEND_FLAGS`), puts the plan's in their place
//! and executes the real nvcc (or the compiler cache's wrapper of it). Every other entry of the
//! home is a link to the real toolkit's. torch's ninja path takes `PYTORCH_NVCC`, its distutils
//! path `$CUDA_HOME/bin/nvcc`: both point at the wrapper. CMake resolves `CUDACXX` to the nvcc of
//! the toolkit it finds, so for CMake the guard is the compile launcher instead
//! (`CMAKE_CUDA_COMPILER_LAUNCHER`, which CMake prefixes to every CUDA compile):
//! `nvcc-guard --launcher NVCC ARGS…` runs the NVCC it is given.
//!
//! Each guarded invocation appends one JSON line to a log; [`Guard::report`] reads it after the
//! build and says which archs the extension asked for that the build does not carry.

use crate::arch::spec::Plan;
use crate::build_insight::compile_record;
use crate::build_insight::memory_gate::Gate;
use crate::toolchain::Toolchain;
use anyhow::{Context, Result};
use fs_err as fs;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

mod measured;

/// The nvcc the guard runs (the toolkit's, or the compiler cache's wrapper of it).
pub const REAL_VAR: &str = "ARCHSMITH_NVCC_REAL";
/// The plan's flags, space-separated (a gencode flag holds no space).
pub const FLAGS_VAR: &str = "ARCHSMITH_NVCC_ARCH_FLAGS";
/// Where each invocation is recorded.
pub const LOG_VAR: &str = "ARCHSMITH_NVCC_GUARD_LOG";

/// Options that take the arch as their next argument or after `=`.
const ARCH_OPTIONS: [&str; 8] = [
    "-gencode",
    "--generate-code",
    "-arch",
    "--gpu-architecture",
    "-code",
    "--gpu-code",
    "--list-gpu-arch",
    "--list-gpu-code",
];

/// Options that mean nvcc produces device code (a compile, a device link, PTX or cubin output).
const DEVICE_MODES: [&str; 14] = [
    "-c",
    "--compile",
    "-dc",
    "--device-c",
    "-dw",
    "--device-w",
    "-dlink",
    "--device-link",
    "-ptx",
    "--ptx",
    "-cubin",
    "--cubin",
    "-fatbin",
    "--fatbin",
];

/// A command line with its arch flags taken out and the plan's put in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rewritten {
    pub args: Vec<String>,
    /// The arch flags found, each as one `-opt=value` string.
    pub removed: Vec<String>,
    /// Whether the plan's flags were added (the command makes device code).
    pub added: bool,
}

/// `-gencode=arch=compute_75,code=sm_75` for `-gencode arch=…` and `-gencode=arch=…` alike; the
/// option when `arg` is not an arch option.
fn arch_option(arg: &str) -> Option<&'static str> {
    let name = arg.split_once('=').map_or(arg, |(n, _)| n);
    ARCH_OPTIONS.iter().copied().find(|o| *o == name)
}

/// Removes every arch flag of `args` and, when the command makes device code (or named an arch),
/// appends `plan` instead.
pub fn rewrite(args: &[String], plan: &[String]) -> Rewritten {
    let mut out = Vec::with_capacity(args.len() + plan.len());
    let mut removed = Vec::new();
    let mut device = false;
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if let Some(opt) = arch_option(a) {
            if a.contains('=') {
                removed.push(a.clone());
                i += 1;
            } else {
                let value = args.get(i + 1).cloned().unwrap_or_default();
                removed.push(format!("{opt}={value}"));
                i += 2;
            }
            continue;
        }
        if DEVICE_MODES.contains(&a.as_str()) || a.ends_with(".cu") {
            device = true;
        }
        out.push(a.clone());
        i += 1;
    }
    let added = device || !removed.is_empty();
    if added {
        out.extend(plan.iter().cloned());
    }
    Rewritten {
        args: out,
        removed,
        added,
    }
}

/// `NVCC_APPEND_FLAGS`/`NVCC_PREPEND_FLAGS` without their arch flags (nvcc splits them on
/// spaces), and the flags taken out.
fn strip_env_flags(value: &str) -> (String, Vec<String>) {
    let words: Vec<String> = value.split_whitespace().map(str::to_string).collect();
    let r = rewrite(&words, &[]);
    (r.args.join(" "), r.removed)
}

/// One line of the log.
#[derive(Debug, Serialize, Deserialize)]
struct Record {
    removed: Vec<String>,
    added: bool,
    sources: Vec<String>,
}

/// `archsmith nvcc-guard ARGS…`: rewrites, records, and runs the real nvcc with the same stdin,
/// stdout and stderr; returns its exit status.
pub fn run(args: &[OsString]) -> Result<i32> {
    let (real, args) = match args {
        [flag, nvcc, rest @ ..] if flag == "--launcher" => (nvcc.clone(), rest),
        _ => (
            std::env::var_os(REAL_VAR).with_context(|| {
                format!("{REAL_VAR} is not set: nvcc-guard runs inside an archsmith build, as the nvcc of its CUDA_HOME")
            })?,
            args,
        ),
    };
    let plan: Vec<String> = std::env::var(FLAGS_VAR)
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let args: Vec<String> = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let mut r = rewrite(&args, &plan);
    let mut cmd = std::process::Command::new(&real);
    for var in ["NVCC_APPEND_FLAGS", "NVCC_PREPEND_FLAGS"] {
        if let Ok(v) = std::env::var(var) {
            let (kept, removed) = strip_env_flags(&v);
            if !removed.is_empty() {
                r.removed.extend(removed);
                cmd.env(var, kept);
            }
        }
    }
    let sources: Vec<String> = args
        .iter()
        .filter(|a| a.ends_with(".cu"))
        .cloned()
        .collect();
    let log = std::env::var_os(LOG_VAR).map(PathBuf::from);
    if let Some(log) = &log {
        let record = Record {
            removed: r.removed.clone(),
            added: r.added,
            sources: sources.clone(),
        };
        compile_record::append(log, &serde_json::to_string(&record)?)?;
    }
    if sources.is_empty() || !r.added {
        // Not a compile (a version query, a dependency scan): run it as it is.
        return cmd
            .args(&r.args)
            .status()
            .map(|s| s.code().unwrap_or(1))
            .with_context(|| format!("running {}", Path::new(&real).display()));
    }
    measured::run(cmd, r.args, &plan, &sources, log.as_deref())
}

/// A guard set up for one build.
#[derive(Debug, Clone)]
pub struct Guard {
    /// The `CUDA_HOME` the build sees.
    pub cuda_home: PathBuf,
    /// Its `bin/nvcc` (the wrapper).
    pub nvcc: PathBuf,
    /// The wrapper CMake runs as `CMAKE_CUDA_COMPILER_LAUNCHER`.
    pub launcher: PathBuf,
    pub log: PathBuf,
    real: PathBuf,
    flags: Vec<String>,
    cmake_architectures: String,
    /// The build's memory pool every guarded compile waits in.
    pub gate: Option<Gate>,
    /// Where nvcc's `--time` files go; None when a compiler cache runs nvcc (which also means
    /// no peak is measured).
    time_dir: Option<PathBuf>,
    /// The peaks kept across builds.
    pub peaks: PathBuf,
}

/// How a guard measures: the memory budget of the build's pool (None: no pool) and whether the
/// guard runs the toolkit's own nvcc (`direct`) or a compiler cache's. Only a direct compile is
/// measured whole: nvcc times its phases, and its peak is the compile's own. Through a cache, a
/// hit compiles nothing and sccache runs a miss in its server, outside the process tree the guard
/// watches, so neither a phase time nor a peak of it is taken (nor kept for the next build).
#[derive(Debug, Clone)]
pub struct Measure {
    pub budget_bytes: Option<u64>,
    pub direct: bool,
    /// The memory ledger shared with other builds (a tree's pool, [`super::job_pool`]); by
    /// default the build's own.
    pub ledger: Option<PathBuf>,
}

impl Measure {
    /// What a build's compiles draw on: the memory free for builds now, or the pool's that it
    /// shares with other builds. `direct`: no compiler cache between the guard and nvcc.
    pub fn of_build(pool: Option<&super::job_pool::PoolShare>, direct: bool) -> Measure {
        let budget = pool.map_or_else(
            || super::jobs::memory_budget_bytes(crate::host::mem_available_gib()),
            |p| p.budget,
        );
        Measure {
            budget_bytes: Some(budget),
            direct,
            ledger: pool.map(|p| p.ledger.clone()),
        }
    }
}

/// What the guard saw in a build.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Report {
    /// nvcc invocations that made device code.
    pub compiles: usize,
    /// Of those, the ones whose own arch flags differed from the plan's.
    pub overridden: usize,
    /// Archs the extension's flags named that the plan does not have (`sm_35`, `compute_60`).
    pub asked_not_built: Vec<String>,
    /// The distinct arch flags it passed that are not the plan's.
    pub flags: Vec<String>,
    /// The compile whose largest process had the highest peak resident memory: its `.cu` file,
    /// the peak in bytes and the compile's milliseconds (measured, not the jobs model's estimate).
    pub heaviest: Option<(String, u64, u64)>,
}

impl Report {
    /// A sentence for the build's warnings, when the extension asked for something else.
    pub fn warning(&self, plan: &Plan) -> Option<String> {
        if self.overridden == 0 {
            return None;
        }
        let asked = if self.asked_not_built.is_empty() {
            "its own arch flags".to_string()
        } else {
            self.asked_not_built.join(", ")
        };
        Some(format!(
            "the extension's build asked nvcc for {asked} ({}) in {} of {} compiles; they were built for {} instead (--own-arch-flags keeps the extension's flags)",
            self.flags.join(" "),
            self.overridden,
            self.compiles,
            plan.torch_cuda_arch_list()
        ))
    }
}

/// `sm_75`, `compute_90a` and the like named in `flag`.
fn archs_in(flag: &str) -> impl Iterator<Item = String> + '_ {
    static RE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    RE.get_or_init(|| regex::Regex::new(r"\b(?:sm|compute|lto)_\d+[af]?\b").expect("arch regex"))
        .find_iter(flag)
        .map(|m| m.as_str().to_string())
}

impl Guard {
    /// The guard of one build, wheel or JIT tree alike: none when the package keeps its own arch
    /// flags (`--own-arch-flags`); else written under `dir` in front of `real` (the toolkit's
    /// nvcc, or the compiler cache's wrapper: then not `direct`), measuring against the build's
    /// memory or its pool's.
    pub fn for_build(
        own_arch_flags: bool,
        dir: &Path,
        tc: &Toolchain,
        plan: &Plan,
        real: PathBuf,
        pool: Option<&super::job_pool::PoolShare>,
    ) -> Result<Option<Guard>> {
        if own_arch_flags {
            return Ok(None);
        }
        let direct = real == tc.nvcc();
        let measure = Measure::of_build(pool, direct);
        Guard::prepare(dir, tc, plan, real, measure).map(Some)
    }

    /// Writes the guard's `CUDA_HOME` under `dir`: links to every entry of the toolkit's home and
    /// of its `bin/`, except `bin/nvcc`, a wrapper that runs this executable's `nvcc-guard`.
    /// `real` is what the guard runs (the toolkit's nvcc or the compiler cache's wrapper).
    pub fn prepare(
        dir: &Path,
        tc: &Toolchain,
        plan: &Plan,
        real: PathBuf,
        measure: Measure,
    ) -> Result<Guard> {
        let home = dir.join("cuda-home");
        if home.exists() {
            fs::remove_dir_all(&home)?;
        }
        let bin = home.join("bin");
        fs::create_dir_all(&bin)?;
        let link_all = |from: &Path, to: &Path, skip: &str| -> Result<()> {
            for e in fs::read_dir(from)? {
                let e = e?;
                let name = e.file_name();
                if name == skip {
                    continue;
                }
                std::os::unix::fs::symlink(e.path(), to.join(&name)).with_context(|| {
                    format!("linking {} into {}", e.path().display(), to.display())
                })?;
            }
            Ok(())
        };
        link_all(&tc.cuda_home, &home, "bin")?;
        link_all(&tc.bin_dir(), &bin, "nvcc")?;
        let exe = std::env::current_exe().context("finding archsmith's own executable")?;
        let nvcc = bin.join("nvcc");
        crate::compiler_cache::write_wrapper(
            &nvcc,
            "written by archsmith build-ext: the arch guard (build_ext/arch_guard.rs)",
            &[exe.display().to_string(), "nvcc-guard".to_string()],
        )?;
        let launcher = dir.join("nvcc-guard-launcher");
        crate::compiler_cache::write_wrapper(
            &launcher,
            "written by archsmith build-ext: the arch guard as CMake's CUDA compile launcher",
            &[
                exe.display().to_string(),
                "nvcc-guard".to_string(),
                "--launcher".to_string(),
            ],
        )?;
        let log = dir.join("nvcc-guard.jsonl");
        let _ = fs::remove_file(&log);
        let time_dir = measure.direct.then(|| dir.join("nvcc-time"));
        if let Some(d) = &time_dir {
            fs::create_dir_all(d)?;
        }
        Ok(Guard {
            cuda_home: home,
            nvcc,
            launcher,
            log,
            real,
            flags: plan.gencode(),
            cmake_architectures: plan.cmake_cuda_architectures(),
            gate: measure.budget_bytes.map(|b| {
                Gate::new(
                    measure
                        .ledger
                        .clone()
                        .unwrap_or_else(|| dir.join("memory-ledger")),
                    b,
                )
            }),
            time_dir,
            peaks: crate::build_insight::peaks::default_path_for_env(),
        })
    }

    /// The variables that route every nvcc through the guard; they go after the toolkit's and
    /// the compiler cache's, which they override.
    pub fn env(&self) -> Vec<(String, String)> {
        let home = self.cuda_home.display().to_string();
        let nvcc = self.nvcc.display().to_string();
        let mut vars: Vec<(String, String)> = vec![
            ("CUDA_HOME".into(), home.clone()),
            ("CUDA_PATH".into(), home),
            ("PYTORCH_NVCC".into(), nvcc.clone()),
            ("CUDACXX".into(), nvcc),
            (
                "CMAKE_CUDA_COMPILER_LAUNCHER".into(),
                self.launcher.display().to_string(),
            ),
            // CMake ≥ 3.20 starts CMAKE_CUDA_ARCHITECTURES from it when a project sets none.
            ("CUDAARCHS".into(), self.cmake_architectures.clone()),
            (REAL_VAR.into(), self.real.display().to_string()),
            (FLAGS_VAR.into(), self.flags.join(" ")),
            (LOG_VAR.into(), self.log.display().to_string()),
            (measured::PEAKS_VAR.into(), self.peaks.display().to_string()),
        ];
        vars.extend(self.gate.iter().flat_map(Gate::env));
        vars.extend(
            self.time_dir
                .iter()
                .map(|d| (measured::TIME_DIR_VAR.to_string(), d.display().to_string())),
        );
        vars
    }

    /// The measured compiles of the build (in the order they ended).
    pub fn compiles(&self) -> Vec<compile_record::CompileRecord> {
        std::fs::read_to_string(&self.log)
            .map(|t| compile_record::parse(&t))
            .unwrap_or_default()
    }

    /// The guard's bin dir, for the front of `PATH` (a build script that runs `nvcc` by name).
    pub fn bin_dir(&self) -> PathBuf {
        self.cuda_home.join("bin")
    }

    /// Reads the log of the build.
    pub fn report(&self) -> Result<Report> {
        let text = match std::fs::read_to_string(&self.log) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(e).with_context(|| format!("reading {}", self.log.display())),
        };
        let plan: BTreeSet<&str> = self.flags.iter().map(String::as_str).collect();
        let plan_archs: BTreeSet<String> = self.flags.iter().flat_map(|f| archs_in(f)).collect();
        let mut report = Report::default();
        let (mut flags, mut asked) = (BTreeSet::new(), BTreeSet::new());
        for line in text.lines() {
            if let Some(m) = compile_record::parse(line).pop() {
                let file = m.sources.first().cloned().unwrap_or_default();
                if report
                    .heaviest
                    .as_ref()
                    .is_none_or(|h| m.peak_rss_bytes > h.1)
                    // 0: not measured (a compiler cache ran it).
                    && m.peak_rss_bytes > 0
                {
                    report.heaviest =
                        Some((file, m.peak_rss_bytes, m.end_ms.saturating_sub(m.start_ms)));
                }
                continue;
            }
            let Ok(r) = serde_json::from_str::<Record>(line) else {
                continue;
            };
            if !r.added {
                continue;
            }
            report.compiles += 1;
            // The same archs in another spelling (CMake's `--generate-code=…,code=[sm_75]`,
            // torch's own flags for the plan) are the plan.
            let named: BTreeSet<String> = r.removed.iter().flat_map(|f| archs_in(f)).collect();
            if r.removed.is_empty() || named == plan_archs {
                continue;
            }
            report.overridden += 1;
            for f in r.removed.iter().filter(|f| !plan.contains(f.as_str())) {
                flags.insert(f.clone());
            }
            asked.extend(named.difference(&plan_archs).cloned());
        }
        report.flags = flags.into_iter().collect();
        report.asked_not_built = asked.into_iter().collect();
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    const PLAN: [&str; 2] = [
        "-gencode=arch=compute_75,code=sm_75",
        "-gencode=arch=compute_90,code=sm_90",
    ];

    #[test]
    fn every_spelling_of_an_arch_flag_is_replaced_by_the_plan() {
        let r = rewrite(
            &s(&[
                "-c",
                "k.cu",
                "-gencode",
                "arch=compute_35,code=sm_35",
                "--generate-code=arch=compute_60,code=[sm_60,compute_60]",
                "-arch=sm_50",
                "-arch",
                "sm_52",
                "--gpu-architecture=compute_61",
                "-code=sm_61",
                "-O3",
                "-Xcompiler",
                "-march=native",
            ]),
            &s(&PLAN),
        );
        assert_eq!(
            r.args,
            s(&[
                "-c",
                "k.cu",
                "-O3",
                "-Xcompiler",
                "-march=native",
                PLAN[0],
                PLAN[1]
            ])
        );
        assert_eq!(r.removed.len(), 6, "{:?}", r.removed);
        assert_eq!(r.removed[0], "-gencode=arch=compute_35,code=sm_35");
        assert_eq!(r.removed[3], "-arch=sm_52");
        assert!(r.added);
    }

    #[test]
    fn commands_that_make_no_device_code_pass_through() {
        for args in [
            s(&["--version"]),
            s(&["-E", "x.cpp"]),
            s(&["-M", "-x", "cu", "-"]),
        ] {
            let r = rewrite(&args, &s(&PLAN));
            assert_eq!(r.args, args);
            assert!(!r.added && r.removed.is_empty());
        }
        // A dangling `-arch` (the end of the line) is taken out, not read past.
        let r = rewrite(&s(&["-dlink", "-arch"]), &s(&PLAN));
        assert_eq!(r.removed, s(&["-arch="]));
    }

    #[test]
    fn env_flags_lose_their_archs_only() {
        let (kept, removed) =
            strip_env_flags("--threads=2 -gencode arch=compute_35,code=sm_35 -lineinfo");
        assert_eq!(kept, "--threads=2 -lineinfo");
        assert_eq!(removed, s(&["-gencode=arch=compute_35,code=sm_35"]));
    }

    #[test]
    fn the_report_names_what_was_asked_and_not_built() {
        let d = tempfile::tempdir().unwrap();
        let guard = Guard {
            cuda_home: d.path().into(),
            nvcc: d.path().join("nvcc"),
            launcher: d.path().join("launcher"),
            log: d.path().join("log"),
            real: "nvcc".into(),
            flags: s(&PLAN),
            cmake_architectures: "75-real;90-real".into(),
            gate: None,
            time_dir: None,
            peaks: d.path().join("peaks.json"),
        };
        assert_eq!(guard.report().unwrap(), Report::default());
        let lines = [
            // torch's own flags for the plan: nothing to say.
            r#"{"removed":["-gencode=arch=compute_75,code=sm_75","-gencode=arch=compute_90,code=sm_90"],"added":true,"sources":["a.cu"]}"#,
            r#"{"removed":["-gencode=arch=compute_35,code=sm_35","-gencode=arch=compute_75,code=sm_75"],"added":true,"sources":["b.cu"]}"#,
            // CMake's spelling of the plan.
            r#"{"removed":["--generate-code=arch=compute_75,code=[sm_75]","--generate-code=arch=compute_90,code=[sm_90]"],"added":true,"sources":["c.cu"]}"#,
            r#"{"removed":[],"added":false,"sources":[]}"#,
            "not json",
        ];
        std::fs::write(&guard.log, lines.join("\n")).unwrap();
        let r = guard.report().unwrap();
        assert_eq!(r.compiles, 3);
        assert_eq!(r.overridden, 1);
        assert_eq!(r.asked_not_built, s(&["compute_35", "sm_35"]));
        assert_eq!(r.flags, s(&["-gencode=arch=compute_35,code=sm_35"]));
    }
}
