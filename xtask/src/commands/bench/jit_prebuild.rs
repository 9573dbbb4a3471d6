//! `bench jit-prebuild`: a JIT tree's triggers in one pool of job slots vs one at a time
//! ([`crate::bench::jit_prebuild_pool`]).

use crate::bench::jit_prebuild_pool::{
    default_source, jit_prebuild_pool, JitPrebuildBenchRequest, JitPrebuildReport,
};
use crate::output::{documents, emit, Exit};
use crate::version::Version;
use anyhow::Result;
use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct JitPrebuildArgs {
    /// A tree of JIT extensions (default: the `jit-ext` test fixture, three triggers).
    pub source: Option<PathBuf>,
    /// Archs to build, e.g. `7.5,8.9,9.0` (the `archs --arch` grammar).
    #[arg(long, value_name = "SPEC", default_value = "7.5,8.9,9.0")]
    pub arch: crate::arch::spec::ArchSpec,
    /// torch release for archsmith's env (default: the newest known).
    #[arg(long, value_name = "VER", value_parser = crate::kb::user_input::torch_release)]
    pub torch: Option<Version>,
    /// Use this Python (with torch installed) instead of archsmith's env.
    #[arg(long, value_name = "PATH", value_parser = crate::python::interpreter_arg)]
    pub python: Option<PathBuf>,
    /// Where the prebuilds go (one folder per run).
    #[arg(long, value_name = "DIR", default_value = "target/bench-jit-prebuild")]
    pub out: PathBuf,
    /// Runs of each side, the order alternating; the fastest of each is compared.
    #[arg(long, default_value_t = 2)]
    pub rounds: u32,
    #[command(flatten)]
    pub output: crate::output::JsonOutput,
}

pub fn jit_prebuild(args: JitPrebuildArgs) -> Result<Exit> {
    let req = JitPrebuildBenchRequest {
        source: match args.source {
            Some(s) => s,
            None => default_source()?,
        },
        arch: args.arch,
        torch: args.torch,
        python: args.python,
        out: args.out,
        rounds: args.rounds,
    };
    emit(
        args.output.json,
        documents::BENCH_JIT_PREBUILD,
        &jit_prebuild_pool(&req)?,
        JitPrebuildReport::table,
    )?;
    Ok(Exit::Success)
}
