//! `bench load-check`: the load check against what Python really does, in one run: for each env,
//! every compiled module of the env itself, or every shared object of each wheel given (unpacked
//! beside it; not the libraries auditwheel vendored under `NAME.libs/`), gets
//! archsmith's verdict — all of them in one process — and is then imported in a fresh
//! interpreter after `import torch`, one at a time, as a user would try each. Reports both times,
//! their ratio, and every module where the two disagree.

use crate::python::import_check::{import_in_fresh_interpreter, ImportOutcome};
use crate::verify::load_check::linker::{file_name, Objects};
use crate::verify::load_check::{check_paths, LoadVerdict, Target};
use anyhow::Result;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(Debug, Clone, Default)]
pub struct LoadBenchRequest {
    /// The envs (interpreters) to load into.
    pub pythons: Vec<PathBuf>,
    /// Extension wheels to check in each env; none: the env's own compiled modules.
    pub wheels: Vec<PathBuf>,
}

/// One compiled module in one env: the verdict and what Python did.
#[derive(Debug, Serialize)]
pub struct ModuleRow {
    pub env: String,
    /// The wheel it came from (None: the env's own site-packages).
    pub wheel: Option<String>,
    pub module: String,
    pub verdict_loads: bool,
    pub reason: Option<String>,
    pub failure: Option<&'static str>,
    pub python_loads: bool,
    /// Python's dynamic linker accepted it (it loaded, or only its init code raised afterwards:
    /// `torch._C` loaded a second time refuses to initialise again).
    pub python_linked: bool,
    /// The exception Python raised (the loader's message), when it did not load.
    pub python_error: Option<String>,
    /// The verdict and Python agree (a module whose init code raised after linking counts as linked).
    pub agree: bool,
}

#[derive(Debug, Serialize)]
pub struct LoadBenchReport {
    pub rows: Vec<ModuleRow>,
    /// (env, wheel) pairs, and how many of them load whole (every module) by each side.
    pub pairs: usize,
    pub pairs_agree: usize,
    pub modules: usize,
    pub modules_agree: usize,
    /// archsmith's verdicts for every module, all envs, one process (env reading included).
    pub archsmith_s: f64,
    /// One fresh interpreter per module.
    pub python_s: f64,
    pub ratio: f64,
}

/// Runs the comparison.
pub fn run(req: &LoadBenchRequest) -> Result<LoadBenchReport> {
    let mut rows = Vec::new();
    let (mut ours, mut theirs) = (0.0, 0.0);
    let mut pairs = Vec::new();
    for python in &req.pythons {
        let sets = module_sets(python, &req.wheels)?;
        for (wheel, site, files) in &sets {
            crate::errln!(
                "archsmith: {} ← {}: {} compiled modules",
                python.display(),
                wheel.as_deref().unwrap_or("its own site-packages"),
                files.len()
            );
            let started = Instant::now();
            let mut objects = Objects::default();
            let target = Target::from_python(python, &mut objects)?;
            let verdicts = check_paths(&target, &mut objects, files)?;
            ours += started.elapsed().as_secs_f64();
            let started = Instant::now();
            let mut pair_rows = Vec::new();
            for (file, v) in files.iter().zip(&verdicts) {
                let truth = import_in_fresh_interpreter(
                    python,
                    file,
                    v.kind,
                    &module_name(site, file),
                    &v.preloads(&target),
                )?;
                pair_rows.push(row(python, wheel.as_deref(), site, file, v, truth));
            }
            theirs += started.elapsed().as_secs_f64();
            let whole = |f: fn(&ModuleRow) -> bool| pair_rows.iter().all(f);
            pairs.push(whole(|r| r.verdict_loads) == whole(|r| r.python_linked));
            rows.extend(pair_rows);
        }
    }
    Ok(LoadBenchReport {
        pairs: pairs.len(),
        pairs_agree: pairs.iter().filter(|a| **a).count(),
        modules: rows.len(),
        modules_agree: rows.iter().filter(|r| r.agree).count(),
        ratio: theirs / ours.max(1e-9),
        archsmith_s: ours,
        python_s: theirs,
        rows,
    })
}

pub(crate) type ModuleSet = (Option<String>, PathBuf, Vec<PathBuf>);

/// For each wheel, its compiled modules unpacked under a directory kept for the run; without
/// wheels, the env's own site-packages.
pub(crate) fn module_sets(python: &Path, wheels: &[PathBuf]) -> Result<Vec<ModuleSet>> {
    if wheels.is_empty() {
        let info = crate::python::probe(python, crate::python::Depth::Files)?;
        let files =
            crate::verify::load_check::compiled_modules(&info.purelib, &mut Objects::default())?;
        return Ok(vec![(None, info.purelib, files)]);
    }
    let root = crate::paths::cache_dir().join("bench").join("load-check");
    let mut sets = Vec::new();
    for wheel in wheels {
        let name = file_name(wheel).trim_end_matches(".whl").to_string();
        let dir = root.join(&name);
        if !dir.join(".unpacked").exists() {
            let _ = fs_err::remove_dir_all(&dir);
            crate::wheel::Wheel::open(wheel)?.extract_all(&dir)?;
            fs_err::write(dir.join(".unpacked"), "")?;
        }
        // Every shared object the package itself ships: its modules and the libraries it loads
        // with torch.ops.load_library; not the copies auditwheel vendored under `NAME.libs/`.
        let files: Vec<PathBuf> = crate::verify::load_check::shared_objects(&dir)?
            .into_iter()
            .filter(|f| !crate::verify::load_check::vendored(&dir, f))
            .collect();
        sets.push((Some(file_name(wheel).to_string()), dir, files));
    }
    Ok(sets)
}

/// `torchvision/_C.so` → `torchvision._C`.
pub(crate) fn module_name(site: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(site).unwrap_or(file);
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().to_string())
        .collect();
    if let Some(last) = parts.last_mut() {
        *last = last.split('.').next().unwrap_or("").to_string();
    }
    parts.join(".")
}

fn row(
    python: &Path,
    wheel: Option<&str>,
    site: &Path,
    file: &Path,
    v: &LoadVerdict,
    truth: ImportOutcome,
) -> ModuleRow {
    let linked = truth.loads || !truth.link_failed();
    ModuleRow {
        env: python.display().to_string(),
        wheel: wheel.map(str::to_string),
        module: file
            .strip_prefix(site)
            .unwrap_or(file)
            .display()
            .to_string(),
        verdict_loads: v.loads,
        reason: v.reason.clone(),
        failure: v.failure,
        agree: v.loads == linked,
        python_linked: linked,
        python_loads: truth.loads,
        python_error: truth.error,
    }
}

impl LoadBenchReport {
    pub fn table(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let width = self
            .rows
            .iter()
            .map(|r| r.module.len())
            .max()
            .unwrap_or(6)
            .max(6);
        let mut last = None;
        for r in &self.rows {
            let head = (r.env.as_str(), r.wheel.as_deref());
            if last != Some(head) {
                let _ = writeln!(
                    out,
                    "\n{} {}",
                    r.env,
                    r.wheel.as_deref().unwrap_or("(the env's own modules)")
                );
                last = Some(head);
            }
            let said = |l: bool| if l { "loads" } else { "fails" };
            let _ = writeln!(
                out,
                "  {:<width$}  archsmith {:<5}  python {:<5}  {}{}",
                r.module,
                said(r.verdict_loads),
                said(r.python_loads),
                if r.agree { "" } else { "DISAGREE " },
                r.failure.unwrap_or(""),
            );
        }
        let _ = writeln!(
            out,
            "\npairs agreeing: {}/{}   modules agreeing: {}/{}\narchsmith (all verdicts, one process): {:.2} s   python (fresh interpreter per module): {:.2} s   ratio {:.1}x",
            self.pairs_agree, self.pairs, self.modules_agree, self.modules, self.archsmith_s, self.python_s, self.ratio
        );
        out
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn module_names_follow_the_package_path() {
        let site = std::path::Path::new("/s");
        assert_eq!(
            super::module_name(site, std::path::Path::new("/s/torchvision/_C.so")),
            "torchvision._C"
        );
        assert_eq!(
            super::module_name(
                site,
                std::path::Path::new("/s/xformers/_C.cpython-311-x86_64-linux-gnu.so")
            ),
            "xformers._C"
        );
    }
}
