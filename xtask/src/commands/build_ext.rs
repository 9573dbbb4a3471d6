//! `cargo xtask build-ext SOURCE --arch SPEC`: thin CLI over [`crate::build_ext`].

use crate::build_ext::{self, Built, CacheKind, Request, SourceSpec};
use crate::build_output::progress::Mode;
use crate::output::{documents, print_json, Exit};
use anyhow::Result;
use clap::Args;
use serde_json::json;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct BuildExtArgs {
    /// A directory with setup.py/pyproject.toml (or with torch load() calls: prebuilt), an sdist or pypi:NAME==VER.
    pub source: String,
    /// Archs to build, e.g. `7.5,8.9,9.0` or `8.0,9.0+PTX` (the `archs --arch` grammar).
    #[arg(long, value_name = "SPEC")]
    pub arch: crate::arch::spec::ArchSpec,
    /// The torch release(s) to build for (default: the newest known, or --python's). Several,
    /// comma-separated (`2.0.1,2.6.0,2.15.0`): one wheel per release, each in its own env with
    /// its CUDA major's toolkit, into OUT/torch-X/, then a table of which wheel loads in which env.
    #[arg(long, value_name = "VER", value_delimiter = ',', value_parser = crate::kb::user_input::torch_release)]
    pub torch: Vec<crate::version::Version>,
    /// The CUDA release to compile with (default: the one torch was built with; must share its
    /// major).
    #[arg(long, value_name = "VER", value_parser = crate::kb::user_input::cuda_release)]
    pub cuda: Option<crate::version::Version>,
    /// A Python with torch installed to build and verify with instead of archsmith's env. For
    /// variants, comma-separated Pythons to make each torch's env from, each a release (`3.12`:
    /// found on PATH or under pyenv) or an interpreter: `--torch 2.6.0,2.15.0 --python 3.11,3.12`
    /// builds four wheels, into OUT/torch-X-pyY/.
    #[arg(long, value_name = "PATH", value_delimiter = ',', value_parser = crate::python::python_choice)]
    pub python: Vec<crate::python::PythonChoice>,
    /// With variants: also lay them out as a local Hugging Face kernel repository
    /// (OUT/kernels/NAME/build/torchXY-cxx11-cuXYZ-x86_64-linux/) and load each with the
    /// `kernels` loader in its own env.
    #[arg(long)]
    pub kernels_layout: bool,
    /// Where the wheel, its record and the build log go.
    #[arg(long, value_name = "DIR", default_value = "dist")]
    pub out: PathBuf,
    /// Compiler cache for the C++ and nvcc steps (installed from PyPI when not on PATH).
    #[arg(long, value_enum)]
    pub cache: Option<CacheKind>,
    /// Concurrent compile jobs (MAX_JOBS); default from cores and available memory (2.5 GiB a job).
    #[arg(long, value_name = "N")]
    pub jobs: Option<u32>,
    /// Let the extension's own nvcc arch flags (-gencode, -arch, CMAKE_CUDA_ARCHITECTURES) through;
    /// by default every nvcc the build runs gets exactly --arch, and the wheel is audited for it.
    #[arg(long)]
    pub own_arch_flags: bool,
    /// Build a package's extensions (a JIT tree's triggers) one after another, as setuptools
    /// does; by default as many at once as cores and memory allow, in one pool of job slots.
    #[arg(long)]
    pub serial_extensions: bool,
    /// Build a directory whose git submodules are empty (a clone without --recursive) anyway;
    /// what includes them fails and is reported. By default it stops first, naming the fix.
    #[arg(long)]
    pub skip_missing_submodules: bool,
    /// The build is meant to compile no GPU code (a package's own CPU-only switch set, e.g.
    /// FORCE_ONLY_CPU=1): FORCE_CUDA is not set, and the wheel must carry no device code.
    #[arg(long)]
    pub cpu_only: bool,
    /// Send the compiles to an sccache-dist scheduler (`http://HOST:PORT`), through sccache
    /// (implies --cache sccache); docs/build-ext.md shows a cluster's configuration.
    #[arg(long, value_name = "SCHEDULER_URL")]
    pub dist: Option<String>,
    /// The client token the scheduler expects (its client_auth), read from FILE; default: the
    /// ARCHSMITH_DIST_TOKEN variable.
    #[arg(long, value_name = "FILE", requires = "dist")]
    pub dist_token_file: Option<PathBuf>,
    /// Also say on which torch releases of a range the built wheel loads, by their real exports
    /// (as `verify binary --target`): stable or tied, file by file.
    #[arg(long, value_name = "'torch>=A,<B'")]
    pub torch_range: Option<String>,
    #[command(flatten)]
    pub output: crate::output::JsonOutput,
}

pub fn run(args: BuildExtArgs) -> Result<Exit> {
    use crate::python::PythonChoice;
    // Variants: several torches, several Pythons, or a Python named by its release.
    let variants = args.torch.len() > 1
        || args.kernels_layout
        || args.python.len() > 1
        || args
            .python
            .iter()
            .any(|p| matches!(p, PythonChoice::Release(_)));
    let single_python = match args.python.first() {
        Some(PythonChoice::Interpreter(p)) if !variants => Some(p.clone()),
        _ => None,
    };
    let target = crate::python::TargetEnv {
        torch: (args.torch.len() == 1 && !variants).then(|| args.torch[0].clone()),
        cuda: args.cuda.clone(),
        python: single_python,
    };
    let req = Request {
        source: SourceSpec::parse(&args.source)?,
        arch: args.arch.clone(),
        target,
        out: args.out.clone(),
        cache: args.cache,
        jobs: args.jobs,
        own_arch_flags: args.own_arch_flags,
        serial_extensions: args.serial_extensions,
        skip_missing_submodules: args.skip_missing_submodules,
        stable_abi_target: None,
        pool: None,
        prepared: None,
        cpu_only: args.cpu_only,
        dist: crate::compiler_cache::dist::Dist::from_flags(
            args.dist.as_deref(),
            args.dist_token_file.as_deref(),
        )?,
        progress: Mode::Auto,
    };
    if variants {
        let torches = match args.torch.is_empty() {
            true => vec![crate::kb::kb().releases.newest_torch.clone()],
            false => args.torch.clone(),
        };
        let v =
            build_ext::variants::build_variants(&req, &torches, &args.python, args.kernels_layout)?;
        if args.output.json {
            print_json(
                documents::BUILD_EXT_VARIANTS,
                &json!({ "ok": v.ok(), "variants": v }),
            )?;
        } else {
            crate::out!("{}", v.table());
        }
        return Ok(if v.ok() { Exit::Success } else { Exit::Failed });
    }
    let (doc, text) = match build_ext::build(&req)? {
        Ok(Built::Jit(o)) => (json!({ "ok": true, "jit": o }), Ok(o.table())),
        Ok(Built::Wheel(mut o)) => {
            if let Some(spec) = &args.torch_range {
                o.check_torch_range(spec)?;
            }
            (json!({ "ok": true, "result": o }), Ok(o.table()))
        }
        Err(f) => (json!({ "ok": false, "failure": f }), Err(f)),
    };
    if args.output.json {
        print_json(documents::BUILD_EXT, &doc)?;
    }
    let Ok(text) = text.map_err(|f| crate::errln!("error: {f}")) else {
        return Ok(Exit::Failed);
    };
    if !args.output.json {
        crate::out!("{text}");
    }
    Ok(Exit::Success)
}
