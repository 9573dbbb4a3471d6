//! `bench jit-hook`: the load() hook's cost to a Python start where it is inert
//! ([`crate::bench::jit_hook_startup`]).

use crate::bench::jit_hook_startup::{jit_hook_startup, JitHookStartupReport};
use crate::output::{documents, emit, Exit};
use anyhow::Result;
use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct JitHookArgs {
    /// The Python whose throwaway venv is timed (default: python3 on PATH).
    #[arg(long, value_name = "PATH", value_parser = crate::python::interpreter_arg)]
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
        JitHookStartupReport::table,
    )?;
    Ok(Exit::Success)
}
