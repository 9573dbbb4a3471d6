//! The build command and the environment it runs in: the toolkit, the plan's arch list, the
//! jobs, the compiler cache's and the arch guard's wrappers, the NVIDIA wheels' headers, the build
//! hooks. No shell: every value is one argument or one variable.

use super::arch_guard::Guard;
use super::jobs::Parallelism;
use super::{nvidia_wheel_dirs, EnvInfo};
use crate::arch::spec::Plan;
use crate::compiler_cache::shared_sources::SharedSourceCache;
use crate::compiler_cache::CompilerCache;
use crate::process::Cmd;
use crate::python;
use crate::toolchain::Toolchain;
use std::path::{Path, PathBuf};

/// What a build runs with, decided by the earlier steps.
pub struct Setup<'a> {
    pub env: &'a EnvInfo,
    pub tc: &'a Toolchain,
    pub plan: &'a Plan,
    pub par: &'a Parallelism,
    /// `uv build` or `pip wheel` ([`super::front_end`]).
    pub builder: &'a str,
    pub cache: Option<&'a CompilerCache>,
    /// Files several extensions compile, compiled once (with extensions built at once).
    pub shared_sources: Option<&'a SharedSourceCache>,
    pub guard: Option<&'a Guard>,
    /// `--cpu-only`: no `FORCE_CUDA`.
    pub cpu_only: bool,
    /// A stable-ABI build's `TORCH_TARGET_VERSION` ([`super::Request::stable_abi_target`]).
    pub stable_abi_target: Option<&'a str>,
    /// Where `ninja` is, for an env that has none ([`ninja_for`]).
    pub ninja_dir: Option<&'a Path>,
    /// The pool of job slots shared with builds beside this one ([`super::Request::pool`]).
    pub pool: Option<&'a super::job_pool::PoolShare>,
}

impl Setup<'_> {
    /// The `ninja` the build runs: the env's own, else the one [`ninja_for`] found.
    fn ninja(&self) -> Option<PathBuf> {
        let own = self.env.python.parent().map(|bin| bin.join("ninja"));
        own.filter(|n| crate::process::is_executable(n))
            .or_else(|| self.ninja_dir.map(|d| d.join("ninja")))
    }

    /// The build command with its environment (`MAX_JOBS` the caller may have set removed
    /// where the build joins a pool: ninja ignores the pool when given `-j`).
    pub fn apply_env(&self, mut cmd: Cmd) -> Cmd {
        if self.pool.is_some() {
            cmd = cmd.env_remove("MAX_JOBS");
        }
        for (k, v) in build_env(self) {
            cmd = cmd.env(k, v);
        }
        cmd
    }
}

/// The directory of a `ninja` for builds in `env`, when the env's own bin dir has none (a user's
/// `--python ENV`): the system's, else PyPI's (archsmith's build tools). torch's load() refuses
/// to compile without ninja ("Ninja is required to load C++ extensions") and BuildExtension
/// falls back to one slow compile at a time: a build supplies its build tools itself. `required`
/// (the JIT prebuild): an error when none can be had; else a warning, and the build goes on.
pub fn ninja_for(env: &EnvInfo, required: bool) -> anyhow::Result<Option<PathBuf>> {
    let has_own = env
        .python
        .parent()
        .is_some_and(|bin| crate::process::is_executable(&bin.join("ninja")));
    if has_own {
        return Ok(None);
    }
    let tools =
        crate::toolchain::buildtools::ensure(&crate::paths::cache_dir().join("tools"), &mut |m| {
            crate::errln!("archsmith: {m}")
        });
    match tools {
        Ok(t) => Ok(t.ninja.parent().map(Path::to_path_buf)),
        Err(e) if required => Err(e.context(format!(
            "{} has no ninja, which torch's load() needs: install it there (`pip install ninja`)",
            env.python.display()
        ))),
        Err(e) => {
            crate::errln!(
                "archsmith: warning: {} has no ninja and none could be had ({e:#}): setuptools compiles one file at a time",
                env.python.display()
            );
            Ok(None)
        }
    }
}

/// The build command for the source copy in `tree`, writing its wheel into `wheel_dir`.
pub fn build_command(s: &Setup, tree: &Path, wheel_dir: &Path) -> Cmd {
    let env = s.env;
    let cmd = if s.builder == "pip wheel" {
        Cmd::new(&env.python)
            .args([
                "-m",
                "pip",
                "wheel",
                "-v",
                "--no-build-isolation",
                "--no-deps",
                "--no-cache-dir",
                "-w",
            ])
            .arg(wheel_dir)
            .arg(tree)
    } else {
        let uv = python::installer::uv_binary().unwrap_or_else(|| PathBuf::from("uv"));
        python::installer::uv_cmd(&uv)
            .args(["build", "--wheel", "--no-build-isolation", "--python"])
            .arg(&env.python)
            .arg("--out-dir")
            .arg(wheel_dir)
            .arg(tree)
    };
    s.apply_env(cmd).dir(tree)
}

/// The variables a build gets (on top of the caller's environment).
pub fn build_env(s: &Setup) -> Vec<(String, String)> {
    let (env, tc, plan, par) = (s.env, s.tc, s.plan, s.par);
    let (cache, guard) = (s.cache, s.guard);
    let env_bin = env
        .python
        .parent()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    // The arch guard's nvcc first, then the compiler-cache wrappers, then the toolkit, then the
    // env's bin dir (ninja: torch's BuildExtension runs `ninja` from PATH), then the caller's PATH.
    let mut path_head: Vec<String> = guard
        .map(|g| g.bin_dir().display().to_string())
        .into_iter()
        .chain(cache.map(|c| c.wrappers.display().to_string()))
        .collect();
    let mut vars: Vec<(String, String)> = Vec::new();
    for (k, v) in tc.env_vars() {
        match k {
            "PATH" => path_head.push(v),
            "LD_LIBRARY_PATH" => vars.push((k.to_string(), prepend("LD_LIBRARY_PATH", vec![v]))),
            _ => vars.push((k.to_string(), v)),
        }
    }
    path_head.push(env_bin);
    path_head.extend(s.ninja_dir.map(|d| d.display().to_string()));
    vars.push(("PATH".into(), prepend("PATH", path_head)));
    vars.push(("TORCH_CUDA_ARCH_LIST".into(), plan.torch_cuda_arch_list()));
    // CMake-built extensions: CMake's own search finds a system nvcc (/usr/bin/nvcc) before PATH's.
    vars.push(("CUDACXX".into(), tc.nvcc().display().to_string()));
    vars.extend(job_vars(s));
    // Extensions that gate CUDA on torch.cuda.is_available() build it anyway on a GPU-less host
    // (unless the build is meant to be CPU-only).
    if !s.cpu_only {
        vars.push(("FORCE_CUDA".into(), "1".into()));
    }
    vars.push(("PYTHONUNBUFFERED".into(), "1".into()));
    // Library headers (cuBLAS, cuSPARSE, cuSOLVER, cuDNN, NCCL…): a CUDA_HOME made of the compiler
    // wheels lacks them, but the torch env holds NVIDIA's wheels of the very libraries torch loads
    // at run time, headers included. CPATH is searched after every -I, so CUDA_HOME still wins for
    // the toolkit's own headers.
    let (inc, lib) = nvidia_wheel_dirs(&env.purelib, tc.cuda.major());
    if !inc.is_empty() {
        vars.push(("CPATH".into(), append("CPATH", inc)));
    }
    if !lib.is_empty() {
        vars.push(("LIBRARY_PATH".into(), append("LIBRARY_PATH", lib)));
    }
    if let Some(c) = cache {
        vars.extend(c.env(&super::scratch::scratch_root()));
    }
    if let Some(g) = guard {
        vars.extend(g.env());
    }
    if par.extensions > 1 {
        vars.extend(build_hook_vars(par));
        if let Some(c) = s.shared_sources {
            vars.extend(c.env());
        }
    }
    if let Some(target) = s.stable_abi_target {
        if par.extensions <= 1 {
            vars.extend(hooks_on_path());
        }
        vars.push(("ARCHSMITH_STABLE_ABI_TARGET".into(), target.to_string()));
    }
    vars
}

/// How many compiles the build runs: `MAX_JOBS` and nvcc's `--threads`, or the pool it shares
/// with the builds beside it.
fn job_vars(s: &Setup) -> Vec<(String, String)> {
    let par = s.par;
    let mut vars = Vec::new();
    match s.pool {
        Some(pool) => {
            // One `ninja --version` per build: both answers hang on it.
            let joins = s
                .ninja()
                .is_some_and(|n| super::job_pool::ninja_joins_jobservers(&n));
            vars.extend(pool.env(joins));
            vars.extend(
                pool.max_jobs(joins)
                    .map(|j| ("MAX_JOBS".to_string(), j.to_string())),
            );
        }
        None => vars.push(("MAX_JOBS".into(), par.jobs.to_string())),
    }
    if par.nvcc_threads > 1 {
        let mut flags = std::env::var("NVCC_APPEND_FLAGS").unwrap_or_default();
        if !flags.is_empty() {
            flags.push(' ');
        }
        flags.push_str(&format!("--threads={}", par.nvcc_threads));
        vars.push(("NVCC_APPEND_FLAGS".into(), flags));
    }
    vars
}

/// PYTHONPATH with the build hooks first (nothing where they cannot be found).
fn hooks_on_path() -> Vec<(String, String)> {
    let Ok(root) = crate::data::data_root() else {
        return Vec::new();
    };
    let hooks = root.join(crate::data::BUILD_HOOKS);
    vec![(
        "PYTHONPATH".into(),
        prepend("PYTHONPATH", vec![hooks.display().to_string()]),
    )]
}

/// The build hooks (build_ext/build_hooks/sitecustomize.py) build that many extensions at once
/// in one pool of as many job slots (a jobserver every extension's ninja joins; MAX_JOBS shared
/// out between them where ninja is older than 1.13), and turn ninja back on where a package
/// switched it off.
/// Where the hooks cannot be found the build runs as setuptools would.
fn build_hook_vars(par: &Parallelism) -> Vec<(String, String)> {
    let mut vars = hooks_on_path();
    if vars.is_empty() {
        return vars;
    }
    vars.extend([
        (
            "ARCHSMITH_PARALLEL_EXTENSIONS".into(),
            par.extensions.to_string(),
        ),
        (
            "ARCHSMITH_EXT_MAX_JOBS".into(),
            (par.jobs / par.extensions).max(1).to_string(),
        ),
        ("ARCHSMITH_FORCE_NINJA".into(), "1".into()),
    ]);
    vars
}

/// `first` joined with `:`, then the caller's value of `name`.
fn prepend(name: &str, first: Vec<String>) -> String {
    let mut parts = first;
    if let Ok(old) = std::env::var(name) {
        if !old.is_empty() {
            parts.push(old);
        }
    }
    parts.join(":")
}

fn append(name: &str, dirs: Vec<String>) -> String {
    let mut parts = Vec::new();
    if let Ok(old) = std::env::var(name) {
        if !old.is_empty() {
            parts.push(old);
        }
    }
    parts.extend(dirs);
    parts.join(":")
}
