//! `cargo xtask toolchain install|env|list`: CUDA toolchains from PyPI (13.x) or the system (11.x/12.x).

use crate::output::{print_json, Table};
use crate::paths::toolchains_dir;
use crate::toolchain::{self, pypi, system, Source, Toolchain};
use crate::version::Version;
use anyhow::Result;
use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::time::Instant;

#[derive(Debug, Args)]
pub struct ToolchainArgs {
    #[command(subcommand)]
    pub command: ToolchainCommand,
}

#[derive(Debug, Subcommand)]
pub enum ToolchainCommand {
    /// Install (or reuse) the CUDA toolchain for a release: 13.x from NVIDIA's PyPI wheels, 11.x/12.x from the system.
    Install(CudaArgs),
    /// Print sourceable shell exports (CUDA_HOME, CUDA_PATH, PATH, LD_LIBRARY_PATH), installing first if needed.
    Env(CudaArgs),
    /// List archsmith's toolchains and any system CUDA found.
    List {
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args)]
pub struct CudaArgs {
    /// CUDA release, e.g. 13.2 (any 13.x on PyPI), or 12.4 with a system toolkit.
    #[arg(long)]
    pub cuda: Version,
    /// Machine-readable output on stdout.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: ToolchainArgs) -> Result<i32> {
    match args.command {
        ToolchainCommand::Install(a) => install(&a),
        ToolchainCommand::Env(a) => env(&a),
        ToolchainCommand::List { json } => list(json),
    }
}

fn install(args: &CudaArgs) -> Result<i32> {
    let start = Instant::now();
    let tc = toolchain::ensure(&args.cuda)?;
    let seconds = start.elapsed().as_secs_f64();
    let lock = match &tc.source {
        Source::Pypi { .. } => Some(pypi::read_lock(tc.cuda_home())?),
        Source::System { .. } => None,
    };
    if args.json {
        let value = serde_json::json!({
            "toolchain": tc,
            "nvcc": tc.nvcc(),
            "cuobjdump": tc.cuobjdump().exists().then(|| tc.cuobjdump()),
            "lock": lock,
            "seconds": seconds,
        });
        print_json(&value)?;
    } else {
        println!(
            "CUDA {} (nvcc {}) at {}",
            tc.cuda,
            tc.nvcc_version,
            tc.cuda_home.display()
        );
        match (&tc.source, &lock) {
            (Source::Pypi { lock: path }, Some(lock)) => {
                println!(
                    "  from PyPI via {}; lock file {}",
                    lock.installer,
                    path.display()
                );
                let mut t = Table::headerless();
                for p in &lock.packages {
                    t.row([format!("  {}", p.name), p.version.clone()]);
                }
                print!("{}", t.render());
            }
            (Source::System { found_via }, _) => println!("  system toolkit found via {found_via}"),
            _ => {}
        }
        println!(
            "  ({seconds:.2}s)  use it with: eval \"$(cargo xtask toolchain env --cuda {})\"",
            args.cuda
        );
    }
    Ok(0)
}

fn env(args: &CudaArgs) -> Result<i32> {
    let tc = toolchain::ensure(&args.cuda)?;
    if args.json {
        let map: serde_json::Map<String, serde_json::Value> = tc
            .env_vars()
            .into_iter()
            .map(|(k, v)| (k.to_string(), serde_json::Value::String(v)))
            .collect();
        print_json(&map)?;
    } else {
        print!("{}", tc.shell_exports());
    }
    Ok(0)
}

/// One row of `toolchain list`.
#[derive(Debug, serde::Serialize)]
struct Listed {
    source: &'static str,
    cuda: Option<Version>,
    nvcc_version: Option<Version>,
    cuda_home: PathBuf,
    /// How it was found, or why it is unusable.
    note: String,
    usable: bool,
}

fn list(json: bool) -> Result<i32> {
    let dir = toolchains_dir();
    let mut rows = Vec::new();
    let mut names: Vec<PathBuf> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("cuda-"))
        })
        .collect();
    names.sort();
    for home in names {
        rows.push(match pypi::load(&home)? {
            Some(tc) => Listed {
                source: "archsmith",
                cuda: Some(tc.cuda.clone()),
                nvcc_version: Some(tc.nvcc_version.clone()),
                note: pypi::read_lock(&home)
                    .map(|l| format!("PyPI via {}", l.installer))
                    .unwrap_or_default(),
                cuda_home: home,
                usable: true,
            },
            None => Listed {
                source: "archsmith",
                cuda: None,
                nvcc_version: None,
                cuda_home: home,
                note: "incomplete: reinstalled by the next `toolchain install`".into(),
                usable: false,
            },
        });
    }
    let ours = dir.canonicalize().unwrap_or(dir.clone());
    for probe in system::Search::from_env().probe(None) {
        let canonical = probe
            .cuda_home
            .canonicalize()
            .unwrap_or(probe.cuda_home.clone());
        if canonical.starts_with(&ours) || !probe.cuda_home.exists() {
            continue;
        }
        let tc: Option<Toolchain> = probe.toolchain();
        rows.push(Listed {
            source: "system",
            cuda: tc.as_ref().map(|t| t.cuda.clone()),
            nvcc_version: tc.as_ref().map(|t| t.nvcc_version.clone()),
            cuda_home: probe.cuda_home.clone(),
            note: match &probe.result {
                Ok(_) => format!("found via {}", probe.found_via),
                Err(e) => format!("unusable: {}", e.lines().next().unwrap_or_default()),
            },
            usable: tc.is_some(),
        });
    }
    if json {
        print_json(&rows)?;
        return Ok(0);
    }
    if rows.is_empty() {
        println!(
            "no CUDA toolchains: none installed under {} and no system CUDA found",
            dir.display()
        );
        println!("install one with: cargo xtask toolchain install --cuda 13.2");
        return Ok(0);
    }
    let opt = |v: &Option<Version>| v.as_ref().map_or("-".to_string(), |v| v.to_string());
    let mut t = Table::new(["SOURCE", "CUDA", "NVCC", "CUDA_HOME", "NOTE"]);
    for r in &rows {
        t.row([
            r.source.into(),
            opt(&r.cuda),
            opt(&r.nvcc_version),
            r.cuda_home.display().to_string(),
            r.note.clone(),
        ]);
    }
    print!("{}", t.render());
    Ok(0)
}
