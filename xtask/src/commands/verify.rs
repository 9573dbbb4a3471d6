//! `cargo xtask verify …`: `verify binary` (SASS/PTX carried, and with `--target` whether it
//! loads: docs/verify-binary.md), `verify env` (docs/verify-env.md), `verify pins`.

use crate::cuda_arch::Cc;
use crate::output::{documents, Exit};
use crate::verify::binary_check::{audit, BinaryRequest, Report};
use anyhow::Result;
use clap::{Args, Subcommand};
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct VerifyArgs {
    #[command(subcommand)]
    pub what: VerifyCommand,
}

#[derive(Debug, Subcommand)]
pub enum VerifyCommand {
    /// Which SASS and PTX ELF files, directories or wheels really carry (read from the fatbin
    /// headers in pure Rust). Exit 0 ok, 1 an expectation failed, 2 unreadable or malformed input.
    #[command(
        after_help = "Example:\n  archsmith verify binary dist/my_ext-1.0-cp311-cp311-linux_x86_64.whl --expect-arch 7.5,8.9,9.0 --strict"
    )]
    Binary(BinaryArgs),
    /// A Python environment with torch: expected versions, pairing, CUDA, what torch's libraries
    /// carry, GPUs, cuDNN, conda. Exit 0 all passed, 1 a check failed, 2 bad input.
    #[command(
        after_help = "Example:\n  archsmith verify env --python .venv/bin/python --expect torch==2.6.0 --expect-arch 7.5,8.0,8.6,9.0 --gpu L4 --junit verify-env.xml"
    )]
    Env(EnvArgs),
    /// A repository's requirement files (requirements*.txt, constraints, pyproject.toml):
    /// contradictions, CUDA variants, torch pairs, Python and GPU fit. Exit 1 on a finding.
    #[command(after_help = "Example:\n  archsmith verify pins . --gpu \"RTX 5090\"")]
    Pins(PinsArgs),
}

#[derive(Debug, Args)]
pub struct PinsArgs {
    /// A repository directory or one requirements file (default: the current directory).
    #[arg(default_value = ".")]
    pub path: PathBuf,
    /// A GPU the pinned torch must run on (repeatable).
    #[arg(long = "gpu", value_name = "NAME")]
    pub gpus: Vec<String>,
    /// The Python version the pins must have wheels for, e.g. 3.13 (elsewhere `--python` is an
    /// interpreter's path; `--python VER` still works here).
    #[arg(long = "python-version", alias = "python", value_name = "VER")]
    pub python: Option<crate::version::Version>,
    #[command(flatten)]
    pub output: crate::output::JsonOutput,
    #[command(flatten)]
    pub findings: crate::lint::FindingsArgs,
}

#[derive(Debug, Args)]
pub struct EnvArgs {
    /// The Python to check (default: python3 on PATH, or ARCHSMITH_PYTHON).
    #[arg(long, value_name = "PATH", value_parser = crate::python::interpreter_arg)]
    pub python: Option<PathBuf>,
    /// A version an installed distribution must have, e.g. torch==2.6.0 (repeatable).
    #[arg(long = "expect", value_name = "NAME==VER", value_parser = crate::verify::env::parse_expect)]
    pub expects: Vec<crate::verify::env::Expect>,
    /// The CUDA torch must be built for (torch.version.cuda), e.g. 12.4.
    #[arg(long, value_name = "VER", value_parser = crate::kb::user_input::cuda_release)]
    pub expect_cuda: Option<crate::version::Version>,
    /// The archs torch's libraries must carry (read from the binaries) and report.
    #[arg(long, value_name = "SPEC", value_parser = crate::verify::binary_check::expected_arch)]
    pub expect_arch: Option<crate::verify::binary_check::ExpectedArch>,
    /// A GPU this environment must run on (repeatable).
    #[arg(long = "gpu", value_name = "NAME")]
    pub gpus: Vec<String>,
    /// Fail when a conda prefix shows in sys.path or torch's build configuration.
    #[arg(long)]
    pub no_conda: bool,
    /// Run a small computation on the GPU (skipped without one).
    #[arg(long)]
    pub gpu_smoke: bool,
    /// Also: does every compiled module that uses torch load on each release of this range
    /// ('torch>=2.11,<2.16'), by the releases' real exports — before an upgrade.
    #[arg(long, value_name = "'torch>=A,<B'")]
    pub torch_range: Option<String>,
    #[command(flatten)]
    pub output: crate::output::JsonOutput,
    /// Also write the checks as JUnit XML (for CI test reports).
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct BinaryArgs {
    /// ELF files (.so, .o, executables), directories (walked) or wheels (.whl).
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// Arch spec the files must carry, e.g. `7.5,8.0,12.0+PTX`: missing SASS/PTX fail (exit 1).
    #[arg(long, value_name = "SPEC", value_parser = crate::verify::binary_check::expected_arch)]
    pub expect_arch: Option<crate::verify::binary_check::ExpectedArch>,
    /// With --expect-arch: images beyond the spec fail too.
    #[arg(long, requires = "expect_arch")]
    pub strict: bool,
    /// A GPU to give a runs-on verdict for (name such as "H100", "RTX 5090"; repeatable).
    #[arg(long = "gpu", value_name = "NAME")]
    pub gpus: Vec<String>,
    /// A compute capability to give a runs-on verdict for, e.g. 8.9 (repeatable).
    #[arg(long = "cc", value_name = "X.Y")]
    pub ccs: Vec<Cc>,
    #[command(flatten)]
    pub output: crate::output::JsonOutput,
    /// Decompress and write every cubin/PTX under DIR (one folder per file).
    #[arg(long, value_name = "DIR")]
    pub extract: Option<PathBuf>,
    /// Threads for inflating wheel members (default: all CPUs).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// Also say whether each file loads: into this Python env after `import torch`, or on each
    /// torch release of a range by their real exports (`'torch>=2.11,<2.16'`); exit 1 if not.
    /// Give an env, a range, or one of each.
    #[arg(long = "target", value_name = "PYTHON|'torch>=A,<B'", value_parser = crate::verify::load_check::LoadTarget::parse)]
    pub targets: Vec<crate::verify::load_check::LoadTarget>,
}

pub fn run(args: VerifyArgs) -> Result<Exit> {
    match args.what {
        VerifyCommand::Binary(b) => binary(b),
        VerifyCommand::Env(e) => env(e),
        VerifyCommand::Pins(p) => pins(p),
    }
}

fn pins(args: PinsArgs) -> Result<Exit> {
    use crate::verify::pins::{check_pins, PinsRequest};
    let (path, gpus, python) = (args.path, args.gpus, args.python);
    let mut report = check_pins(&PinsRequest { path, gpus, python })?;
    report.select(&args.findings.selection())?;
    report.print(args.findings.format(args.output.json, true))?;
    Ok(Exit::passed(report.findings.is_empty()))
}

fn env(args: EnvArgs) -> Result<Exit> {
    use crate::verify::env::{check_env, validate, EnvRequest};
    let req = EnvRequest {
        python: args.python,
        expects: args.expects,
        expect_cuda: args.expect_cuda,
        expect_arch: args.expect_arch,
        gpus: args.gpus,
        no_conda: args.no_conda,
        gpu_smoke: args.gpu_smoke,
        torch_range: args.torch_range,
    };
    validate(&req)?;
    let report = check_env(&req)?;
    if let Some(path) = &args.junit {
        let xml = crate::verify::checks::junit("verify env", &report.items)?;
        fs_err::write(path, xml)?;
    }
    crate::output::emit(args.output.json, documents::VERIFY_ENV, &report, |r| {
        r.table()
    })?;
    Ok(Exit::passed(report.ok))
}

fn binary(args: BinaryArgs) -> Result<Exit> {
    let request = BinaryRequest {
        paths: args.paths,
        expect_arch: args.expect_arch,
        strict: args.strict,
        gpus: args.gpus,
        ccs: args.ccs,
        extract: args.extract,
        threads: args.threads,
    };
    let targets = crate::verify::load_check::check_targets(&args.targets, &request.paths)?;
    let (files, checks) = audit(&request, targets.unpacked())?;
    let report = Report::new(
        &files,
        checks.expectation.as_ref(),
        checks.strict,
        &checks.devices,
    );
    let spec = request.expect_arch.as_deref();
    if args.output.json {
        let mut doc = report.json(spec);
        targets.add_to(&mut doc)?;
        crate::output::print_json(documents::VERIFY_BINARY, &doc)?;
    } else {
        crate::out!("{}{}", report.table(spec), targets.tables());
    }
    crate::verify::binary_check::print_read_errors(&files);
    Ok(Exit::from_code(
        report.exit_code.max(i32::from(!targets.loads())),
    ))
}
