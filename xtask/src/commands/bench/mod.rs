//! `cargo xtask bench …`: measured comparisons against the tool a user would otherwise use, each
//! in one run on the same machine. One module per benchmark.

mod abi_checkers;
mod audit;
mod build_ext;
mod codemod;
mod jit_hook;
mod jit_prebuild;
mod load_check;
mod manylinux;
mod memory_limit;
mod stable_port;
mod torch_range;

use crate::output::Exit;
use anyhow::Result;
use clap::{Args, Subcommand};

#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub what: BenchCommand,
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// archsmith `verify binary` on a wheel vs `unzip` + `cuobjdump --list-elf` per shared object.
    #[command(after_help = "Example:\n  archsmith bench audit --runs 5")]
    Audit(audit::AuditArgs),
    /// archsmith's clean build vs the plain front end (same TORCH_CUDA_ARCH_LIST and MAX_JOBS),
    /// and the no-op rebuild of each, in one run.
    #[command(after_help = "Example:\n  archsmith bench build-ext --arch 7.5,8.9,9.0 --rounds 2")]
    BuildExt(build_ext::BuildExtBench),
    /// How `codemod --check` grows with a file's size: generated files of one legacy check a
    /// line (5k, 10k, 20k, 40k lines), the time of each and its growth against linear.
    #[command(after_help = "Example:\n  archsmith bench codemod --lines 5000,10000,20000,40000")]
    Codemod(codemod::CodemodArgs),
    /// What the load() hook's `.pth` costs a Python start where it has nothing to do: `python -c
    /// pass` in a throwaway venv without it, with it, and with the eager import of before.
    #[command(after_help = "Example:\n  archsmith bench jit-hook --runs 15")]
    JitHook(jit_hook::JitHookArgs),
    /// A tree of JIT extensions prebuilt with its triggers in one pool of job slots (the
    /// default) vs one at a time (`--serial-extensions`), each from an empty output dir.
    #[command(
        after_help = "Example:\n  archsmith bench jit-prebuild --arch 7.5,8.9,9.0 --rounds 2"
    )]
    JitPrebuild(jit_prebuild::JitPrebuildArgs),
    /// The load check's verdict for every compiled module (of an env, or of wheels unpacked
    /// beside it) vs importing each in a fresh interpreter after `import torch`: agreement, time.
    #[command(
        after_help = "Example:\n  archsmith bench load-check --python .venv/bin/python --wheel torchvision-0.21.0-cp311-cp311-manylinux1_x86_64.whl"
    )]
    LoadCheck(load_check::LoadCheckArgs),
    /// archsmith's build vs plain `pip wheel` with MAX_JOBS = cores, each in a memory cgroup with
    /// the same limit (needs root): which one the kernel kills, and each one's peak.
    #[command(
        after_help = "Example:\n  archsmith bench memory-limit --source ./causal_conv1d-1.5.2 --torch 2.6.0 --limit-gib 5"
    )]
    MemoryLimit(memory_limit::MemoryLimitArgs),
    /// The range verdict (`verify binary --target 'torch>=A,<B'`) for every shared object of some
    /// wheels vs importing each in an env of every release: agreement, time.
    #[command(
        after_help = "Example:\n  archsmith bench torch-range --python envs/torch-2.11/bin/python --python envs/torch-2.15/bin/python --wheel torchvision-0.29.2-cp311-cp311-manylinux_2_28_x86_64.whl"
    )]
    TorchRange(torch_range::TorchRangeArgs),
    /// The range verdict side by side with torch-abi-audit and kernel-abi-check (from PyPI) on
    /// every shared object of some wheels: each verdict, the disagreements with the exports that
    /// decide them, each tool's time.
    #[command(
        after_help = "Example:\n  archsmith bench abi-checkers --wheel torchvision-0.29.2-py3-none-manylinux_2_28_x86_64.whl --torch-range 'torch>=2.11,<2.16'"
    )]
    AbiCheckers(abi_checkers::AbiCheckersArgs),
    /// The platform tag archsmith gives a wheel vs `auditwheel show` (from PyPI): the tag its
    /// symbol versions allow, the libraries outside the policies' lists, each tool's time.
    #[command(
        after_help = "Example:\n  archsmith bench manylinux --wheel legacy_demo-0.1-cp310-abi3-manylinux_2_34_x86_64.whl"
    )]
    Manylinux(manylinux::ManylinuxArgs),
    /// One stable-ABI build of a recipe vs the ordinary build of every torch release it covers
    /// (the matrix a kernel hub builds), each from an empty output dir: wall, CPU, bytes.
    #[command(
        after_help = "Example:\n  archsmith bench stable-port legacy-demo --arch 9.0 --torch 2.10.0,2.11.0,2.15.0"
    )]
    StablePort(stable_port::StablePortArgs),
}

pub fn run(args: BenchArgs) -> Result<Exit> {
    match args.what {
        BenchCommand::Audit(a) => audit::audit(a),
        BenchCommand::BuildExt(a) => build_ext::build_ext(a),
        BenchCommand::Codemod(a) => codemod::codemod(a),
        BenchCommand::JitHook(a) => jit_hook::jit_hook(a),
        BenchCommand::JitPrebuild(a) => jit_prebuild::jit_prebuild(a),
        BenchCommand::LoadCheck(a) => load_check::load_check(a),
        BenchCommand::MemoryLimit(a) => memory_limit::memory_limit(a),
        BenchCommand::TorchRange(a) => torch_range::torch_range(a),
        BenchCommand::AbiCheckers(a) => abi_checkers::abi_checkers(a),
        BenchCommand::Manylinux(a) => manylinux::manylinux(a),
        BenchCommand::StablePort(a) => stable_port::stable_port(a),
    }
}
