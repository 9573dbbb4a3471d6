//! `bench jit-hook`: what archsmith's load() hook costs every Python start of an env it was
//! installed into, where it has nothing to do (no `TORCH_EXTENSIONS_DIR` manifest): `python -c
//! pass` in a throwaway venv without the hook, with it, and with the `.pth` of before issue 50
//! (which imported the hook module unconditionally), medians of the same number of runs, in one
//! run; and the modules a start imports in each state.

use crate::build_ext::jit::install_hook;
use crate::output::Table;
use crate::process::Cmd;
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The `.pth` line before issue 50: an unconditional import of the hook module.
const EAGER_PTH_LINE: &str = "import archsmith_jit_hook";

#[derive(Debug, Serialize)]
pub struct JitHookStartupReport {
    pub python: String,
    pub runs: usize,
    /// Median `python -c pass`, milliseconds.
    pub without_hook_ms: f64,
    pub inert_hook_ms: f64,
    pub eager_hook_ms: f64,
    /// Modules a start imports beyond those without the hook.
    pub inert_extra_modules: Vec<String>,
    pub eager_extra_modules: Vec<String>,
}

/// A throwaway venv of `python` (no pip) and its site-packages.
pub struct Venv {
    _dir: tempfile::TempDir,
    pub python: PathBuf,
    pub purelib: PathBuf,
}

impl Venv {
    pub fn new(python: &Path) -> Result<Venv> {
        let dir = tempfile::tempdir()?;
        let venv = Cmd::new(python)
            .args(["-m", "venv", "--without-pip"])
            .arg(dir.path().join("env"));
        let out = venv.output()?;
        if !out.success() {
            bail!("{}", venv.failure_message(&out));
        }
        let py = dir.path().join("env/bin/python");
        let purelib = Cmd::new(&py)
            .args([
                "-c",
                "import sysconfig; print(sysconfig.get_paths()['purelib'])",
            ])
            .read()
            .context("reading the venv's site-packages")?;
        Ok(Venv {
            python: py,
            purelib: PathBuf::from(purelib.trim()),
            _dir: dir,
        })
    }

    /// The modules loaded once `python -c …` starts, with `env` set and the usual
    /// `TORCH_EXTENSIONS_DIR`/`ARCHSMITH_JIT_PREBUILD` taken away first.
    pub fn startup_modules(&self, env: &[(&str, &Path)]) -> Result<BTreeSet<String>> {
        let mut cmd = Cmd::new(&self.python)
            .args(["-c", "import sys; print('\\n'.join(sys.modules))"])
            .env_remove("TORCH_EXTENSIONS_DIR")
            .env_remove("ARCHSMITH_JIT_PREBUILD");
        for (k, v) in env {
            cmd = cmd.env(k, v);
        }
        Ok(cmd.read()?.lines().map(str::to_string).collect())
    }

    fn median_start(&self, runs: usize) -> Result<Duration> {
        let cmd = Cmd::new(&self.python)
            .args(["-c", "pass"])
            .env_remove("TORCH_EXTENSIONS_DIR")
            .env_remove("ARCHSMITH_JIT_PREBUILD");
        let mut times = Vec::with_capacity(runs);
        for _ in 0..runs.max(1) {
            let t = Instant::now();
            let out = cmd.output()?;
            times.push(t.elapsed());
            if !out.success() {
                bail!("{}", cmd.failure_message(&out));
            }
        }
        times.sort();
        Ok(times[times.len() / 2])
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The three states, `runs` starts each, interleaved by state (none, inert, eager).
pub fn jit_hook_startup(python: &Path, runs: usize) -> Result<JitHookStartupReport> {
    let venv = Venv::new(python)?;
    let base = venv.startup_modules(&[])?;
    let without = venv.median_start(runs)?;
    let pth = install_hook(&venv.purelib)?;
    let inert_mods = venv.startup_modules(&[])?;
    let inert = venv.median_start(runs)?;
    fs_err::write(&pth, format!("{EAGER_PTH_LINE}\n"))?;
    let eager_mods = venv.startup_modules(&[])?;
    let eager = venv.median_start(runs)?;
    let extra = |m: &BTreeSet<String>| m.difference(&base).cloned().collect::<Vec<_>>();
    Ok(JitHookStartupReport {
        python: python.display().to_string(),
        runs,
        without_hook_ms: ms(without),
        inert_hook_ms: ms(inert),
        eager_hook_ms: ms(eager),
        inert_extra_modules: extra(&inert_mods),
        eager_extra_modules: extra(&eager_mods),
    })
}

impl JitHookStartupReport {
    /// The aligned table people read (`--json` prints the report itself).
    pub fn table(&self) -> String {
        let r = self;
        let mut t = Table::new(["python -c pass", "median", "modules beyond no hook"]);
        let list = |m: &[String]| match m.len() {
            0 => "none".to_string(),
            n => format!("{n}: {}", m.join(" ")),
        };
        t.row([
            "no hook".into(),
            format!("{:.1} ms", r.without_hook_ms),
            "-".into(),
        ]);
        t.row([
            "hook installed, inert".into(),
            format!("{:.1} ms", r.inert_hook_ms),
            list(&r.inert_extra_modules),
        ]);
        t.row([
            "hook imported eagerly (before issue 50)".into(),
            format!("{:.1} ms", r.eager_hook_ms),
            list(&r.eager_extra_modules),
        ]);
        format!(
            "{}{}, median of {} starts each\n",
            t.render(),
            r.python,
            r.runs
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 50: the hook's `.pth` made every `python -c pass` import importlib.abc, hashlib and
    /// json. Inert, it imports nothing a start without it does not; with a manifest in
    /// `TORCH_EXTENSIONS_DIR` it loads the hook. Module sets, not times.
    #[test]
    fn the_inert_hook_imports_nothing_and_a_manifest_wakes_it() {
        let python = crate::process::which("python3").expect("python3 on PATH");
        let venv = Venv::new(&python).unwrap();
        let base = venv.startup_modules(&[]).unwrap();
        install_hook(&venv.purelib).unwrap();
        let inert = venv.startup_modules(&[]).unwrap();
        assert_eq!(
            inert.difference(&base).collect::<Vec<_>>(),
            Vec::<&String>::new()
        );
        let ext = tempfile::tempdir().unwrap();
        let empty = venv
            .startup_modules(&[("TORCH_EXTENSIONS_DIR", ext.path())])
            .unwrap();
        assert!(!empty.contains("archsmith_jit_hook"), "no manifest yet");
        fs_err::write(ext.path().join("archsmith-jit.json"), "{}").unwrap();
        let woken = venv
            .startup_modules(&[("TORCH_EXTENSIONS_DIR", ext.path())])
            .unwrap();
        assert!(woken.contains("archsmith_jit_hook"), "{woken:?}");
    }
}
