//! `cargo xtask build-torch --arch SPEC (--src DIR | --torch VER)`: thin CLI over
//! [`crate::build_torch`]; `--verify-wheel WHEEL` runs only the verify step on a wheel.

use crate::build_output::progress::Mode;
use crate::build_torch::{self, plan::parse_set, report, Request};
use crate::compiler_cache::CacheKind;
use crate::output::{documents, print_json, Exit};
use crate::verify::torch_wheel;
use crate::version::Version;
use anyhow::Result;
use clap::{Args, ValueEnum};
use std::path::PathBuf;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Stage {
    Configure,
}

#[derive(Debug, Args)]
pub struct BuildTorchArgs {
    /// Archs to build, e.g. `7.5,8.9,9.0` (the `archs --arch` grammar); none with `--set
    /// USE_CUDA=0`, a CPU-only build.
    #[arg(long, value_name = "SPEC")]
    pub arch: Option<crate::arch::spec::ArchSpec>,
    /// A PyTorch checkout or unpacked source tarball.
    #[arg(long, value_name = "DIR", conflicts_with = "version")]
    pub src: Option<PathBuf>,
    /// A torch release to clone with its submodules into archsmith's cache (needs network), e.g.
    /// 2.6.0; `--version` is its older spelling.
    #[arg(
        long = "torch",
        visible_alias = "version",
        value_name = "VER",
        value_parser = crate::kb::user_input::torch_release
    )]
    pub version: Option<Version>,
    /// CUDA release to build with (default: the newest toolkit here that this torch supports).
    #[arg(long, value_name = "VER", value_parser = crate::kb::user_input::cuda_release)]
    pub cuda: Option<Version>,
    /// The Python to build with (default: python3 on PATH).
    #[arg(long, value_name = "PATH", value_parser = crate::python::interpreter_arg)]
    pub python: Option<PathBuf>,
    /// GPUs to advise for (does an official wheel already run there?).
    #[arg(long = "gpu", value_name = "NAME")]
    pub gpus: Vec<String>,
    /// Where the wheel, its record, the log and .ninja_log go.
    #[arg(long, value_name = "DIR", default_value = "dist")]
    pub out: PathBuf,
    /// Concurrent compile jobs (default: from cores and available memory).
    #[arg(long, value_name = "N")]
    pub jobs: Option<u32>,
    /// Compiler cache, through CMake's compiler launchers.
    #[arg(long, value_enum)]
    pub cache: Option<CacheKind>,
    /// Send the compiles to an sccache-dist scheduler (`http://HOST:PORT`; implies --cache
    /// sccache); docs/build-ext.md shows a cluster's configuration.
    #[arg(long, value_name = "SCHEDULER_URL")]
    pub dist: Option<String>,
    /// The client token the scheduler expects, read from FILE; default: ARCHSMITH_DIST_TOKEN.
    #[arg(long, value_name = "FILE", requires = "dist")]
    pub dist_token_file: Option<PathBuf>,
    /// Override a build variable: `--set USE_CUDNN=0` (checked against the tree like the rest).
    #[arg(long = "set", value_name = "NAME=VALUE", value_parser = parse_set)]
    pub sets: Vec<(String, String)>,
    /// Print the plan (advice, preflight, sourceable env and command) and build nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Stop after this stage.
    #[arg(long, value_enum, conflicts_with = "targets")]
    pub stop_after: Option<Stage>,
    /// Build only this ninja target (a CMake target such as c10_cuda, an output, or a source
    /// file of the tree such as aten/src/ATen/native/cuda/AbsKernel.cu), after configuring; no
    /// wheel: each step's output is audited for the archs, and the whole build is estimated.
    #[arg(long = "only", value_name = "NINJA_TARGET")]
    pub targets: Vec<String>,
    /// Only verify this wheel against --arch (and --cuda, --python); with `--set USE_CUDA=0`, as
    /// a CPU-only wheel.
    #[arg(long, value_name = "WHEEL")]
    pub verify_wheel: Option<PathBuf>,
    #[command(flatten)]
    pub output: crate::output::JsonOutput,
}

pub fn run(args: BuildTorchArgs) -> Result<Exit> {
    let req = request(&args)?;
    let arch = req.arch_spec()?.map(str::to_string);
    if let Some(wheel) = &args.verify_wheel {
        let r = torch_wheel::check_wheel(&torch_wheel::Request {
            wheel: wheel.clone(),
            arch,
            cuda: args.cuda.clone(),
            python: args.python.clone(),
        })?;
        if args.output.json {
            print_json(documents::BUILD_TORCH_VERIFY_WHEEL, &r)?;
        } else {
            crate::out!("{}", r.table());
        }
        return Ok(Exit::passed(r.ok));
    }
    // A dry run of a release not cloned yet needs no tree for its advice: nothing is fetched.
    if let Some(b) = build_torch::before_clone(&req)? {
        match args.output.json {
            true => print_json(documents::BUILD_TORCH_BEFORE_CLONE, &b)?,
            false => crate::out!("{}", report::before_clone(&b)),
        }
        return Ok(if b.failed() {
            Exit::Refused
        } else {
            Exit::Success
        });
    }
    let o = build_torch::run(&req)?;
    if args.output.json {
        print_json(documents::BUILD_TORCH, &o)?;
    } else if req.dry_run || o.prepared.failed() {
        crate::out!(
            "{}",
            report::prepared(&o.prepared, req.dry_run, req.stop_after_configure)
        );
    } else if o.build_failed.is_none() {
        crate::out!("{}", report::outcome(&o));
    }
    if let Some(f) = &o.build_failed {
        crate::errln!("error: {f}");
    }
    Ok(if o.prepared.failed() {
        Exit::Refused
    } else if o.build_failed.is_some()
        || o.verify.as_ref().is_some_and(|v| !v.ok)
        || o.slice.as_ref().is_some_and(|s| !s.ok)
    {
        Exit::Failed
    } else {
        Exit::Success
    })
}

fn request(args: &BuildTorchArgs) -> Result<Request> {
    Ok(Request {
        arch: args.arch.clone(),
        src: args.src.clone(),
        version: args.version.clone(),
        cuda: args.cuda.clone(),
        python: args.python.clone(),
        gpus: args.gpus.clone(),
        out: args.out.clone(),
        jobs: args.jobs,
        cache: args.cache,
        dist: crate::compiler_cache::dist::Dist::from_flags(
            args.dist.as_deref(),
            args.dist_token_file.as_deref(),
        )?,
        sets: args.sets.clone(),
        dry_run: args.dry_run,
        stop_after_configure: args.stop_after == Some(Stage::Configure),
        targets: args.targets.clone(),
        progress: if args.output.json {
            Mode::Plain
        } else {
            Mode::Auto
        },
    })
}
