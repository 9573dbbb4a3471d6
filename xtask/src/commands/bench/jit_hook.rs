//! `bench jit-hook`: the load() hook's cost to a Python start where it is inert
//! ([`crate::bench::jit_hook_startup`]).

use crate::bench::jit_hook_startup::{jit_hook_startup, JitHookStartupReport};
use crate::output::{documents, emit, Exit, Table};
use anyhow::Result;
use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct JitHookArgs {
    /// The Python whose throwaway venv is timed (default: python3 on PATH).
    #[arg(long, value_name = "PATH")]
    pub python: Option<PathBuf>,
    /// Starts timed in each state; the median is reported.
    #[arg(long, default_value_t = 15)]
    pub runs: usize,
    #[command(flatten)]
    pub output: crate::output::JsonOutput,
}

pub fn jit_hook(args: JitHookArgs) -> Result<Exit> {
    let python = match args.python {
        Some(p) => p,
        None => crate::process::which("python3")
            .ok_or_else(|| anyhow::anyhow!("no python3 on PATH: pass --python PATH"))?,
    };
    emit(
        args.output.json,
        documents::BENCH_JIT_HOOK,
        &jit_hook_startup(&python, args.runs)?,
        render,
    )?;
    Ok(Exit::Success)
}

fn render(r: &JitHookStartupReport) -> String {
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
