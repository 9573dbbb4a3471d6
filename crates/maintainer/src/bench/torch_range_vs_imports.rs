//! `bench torch-range`: the range verdict (`verify binary --target 'torch>=A,<B'`) for every
//! shared object of some wheels vs importing each one in an env of every release of the range, in
//! one run. The releases are the envs' own torch releases; the verdict reads each release's kept
//! exports list (read from PyPI first when missing, timed apart), the other side starts a fresh
//! interpreter per module and env after `import torch`, as a user trying each release would.
//! Reports both times, their ratio, and every (module, release) where the two disagree.

use super::load_check_vs_python::{module_name, module_sets};
use crate::python::import_check::import_in_fresh_interpreter;
use crate::verify::load_check::linker::Objects;
use crate::verify::load_check::release_exports::ReleaseExports;
use crate::verify::load_check::torch_abi::over_releases;
use anyhow::{anyhow, Result};
use serde::Serialize;
use std::path::PathBuf;
use std::time::Instant;

#[derive(Debug, Clone, Default)]
pub struct RangeBenchRequest {
    /// One env per release (each with torch from PyPI).
    pub pythons: Vec<PathBuf>,
    /// Extension wheels whose shared objects are checked.
    pub wheels: Vec<PathBuf>,
}

/// One shared object on one release: the verdict and what Python did.
#[derive(Debug, Serialize)]
pub struct RangeRow {
    pub wheel: String,
    pub module: String,
    pub torch: String,
    /// The range verdict's entry for this release (true for a file that needs nothing of torch).
    pub verdict_loads: bool,
    pub python_linked: bool,
    pub python_error: Option<String>,
    pub agree: bool,
}

#[derive(Debug, Serialize)]
pub struct RangeBenchReport {
    pub releases: Vec<String>,
    pub rows: Vec<RangeRow>,
    pub agree: usize,
    /// Reading the releases' exports lists (from the cache; from PyPI where one was missing).
    pub lists_s: f64,
    /// Every verdict of every file over the range, one process, lists in memory.
    pub verdicts_s: f64,
    /// One fresh interpreter per module and env.
    pub python_s: f64,
    /// `python_s / (lists_s + verdicts_s)`.
    pub ratio: f64,
}

/// Runs the comparison.
pub fn run(req: &RangeBenchRequest) -> Result<RangeBenchReport> {
    let mut envs = Vec::new();
    for python in &req.pythons {
        let info = crate::python::probe(python, crate::python::Depth::Files)?;
        let torch = info
            .torch
            .ok_or_else(|| anyhow!("{} has no torch", python.display()))?;
        let release: crate::version::Version = crate::version::Version::new(torch.parts());
        envs.push((python.clone(), release));
    }
    envs.sort_by(|a, b| a.1.cmp(&b.1));
    let say = |line: &str| crate::errln!("{line}");
    let started = Instant::now();
    let lists = envs
        .iter()
        .map(|(_, v)| ReleaseExports::of(v, &say))
        .collect::<Result<Vec<_>>>()?;
    let lists_s = started.elapsed().as_secs_f64();
    let sets = module_sets(&envs[0].0, &req.wheels)?;
    let started = Instant::now();
    let mut objects = Objects::default();
    let mut verdicts = Vec::new();
    for (wheel, site, files) in &sets {
        for file in files {
            let object = objects
                .get(file)
                .map_err(|e| anyhow!("{}: {e}", file.display()))?;
            let cuda = crate::verify::load_check::cuda_major(&object.needed);
            let fit = over_releases(&object, &lists, cuda);
            let kind = if object.python_init.is_some() {
                "python-module"
            } else {
                "library"
            };
            verdicts.push((
                wheel.clone().unwrap_or_default(),
                site.clone(),
                file.clone(),
                kind,
                fit,
            ));
        }
    }
    let verdicts_s = started.elapsed().as_secs_f64();
    let started = Instant::now();
    let mut rows = Vec::new();
    for (wheel, site, file, kind, fit) in &verdicts {
        for (i, (python, release)) in envs.iter().enumerate() {
            let truth =
                import_in_fresh_interpreter(python, file, kind, &module_name(site, file), &[])?;
            let linked = truth.loads || !truth.link_failed();
            let verdict_loads = fit.as_ref().is_none_or(|f| f.releases[i].loads);
            rows.push(RangeRow {
                wheel: wheel.clone(),
                module: file
                    .strip_prefix(site)
                    .unwrap_or(file)
                    .display()
                    .to_string(),
                torch: release.to_string(),
                verdict_loads,
                python_linked: linked,
                python_error: truth.error,
                agree: verdict_loads == linked,
            });
        }
    }
    let python_s = started.elapsed().as_secs_f64();
    Ok(RangeBenchReport {
        releases: envs.iter().map(|(_, v)| v.to_string()).collect(),
        agree: rows.iter().filter(|r| r.agree).count(),
        rows,
        ratio: python_s / (lists_s + verdicts_s).max(1e-9),
        lists_s,
        verdicts_s,
        python_s,
    })
}

impl RangeBenchReport {
    /// One row per module and release, then the times.
    pub fn table(&self) -> String {
        let mut t =
            crate::output::Table::new(["WHEEL", "MODULE", "TORCH", "ARCHSMITH", "PYTHON", ""]);
        let said = |l: bool| if l { "loads" } else { "fails" };
        for r in &self.rows {
            t.row([
                r.wheel.clone(),
                r.module.clone(),
                r.torch.clone(),
                said(r.verdict_loads).to_string(),
                said(r.python_linked).to_string(),
                if r.agree {
                    String::new()
                } else {
                    "DISAGREE".into()
                },
            ]);
        }
        format!(
            "{}\nagreeing: {}/{}\narchsmith: exports lists {:.2} s + verdicts {:.2} s   python (fresh interpreter per module and release): {:.2} s   ratio {:.1}x\n",
            t.render(),
            self.agree,
            self.rows.len(),
            self.lists_s,
            self.verdicts_s,
            self.python_s,
            self.ratio
        )
    }
}
