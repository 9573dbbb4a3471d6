//! `build-ext SRC --torch A,B,C`: the wheels a package publishes, one per torch release, as a
//! package's release job (cibuildwheel, Hugging Face's kernel-builder) makes them, on one machine.
//!
//! Each variant is an ordinary build in its own env (`--torch X`, the host's Python) with the
//! toolkit of that torch's CUDA major (13.x from PyPI, 12.x/11.x from Debian's archive), into
//! `OUT/torch-X/`. What is identical across variants is reused, not redone: the source (a PyPI
//! sdist is fetched once into the download cache), each CUDA toolkit (variants of one major
//! share it), each torch env. Then every wheel is load-checked against every variant's env by
//! its real exports: a table of which wheel loads where, the answer to "can one wheel serve
//! several torches?" (a stable-ABI build can; an ordinary one is tied to its torch).

use super::{Built, Outcome, Request};
use crate::verify::load_check::LoadReport;
use crate::version::Version;
use anyhow::{bail, Result};
use std::path::PathBuf;

/// One variant's build.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Variant {
    /// The torch asked for (`2.6.0`).
    pub torch: Version,
    /// The env built and verified with.
    pub python: PathBuf,
    /// The build's outcome; None when it failed.
    pub outcome: Option<Box<Outcome>>,
    /// Why the build failed (its message and first compiler error).
    pub failure: Option<String>,
}

/// Whether one variant's wheel loads in one variant's env.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LoadCell {
    /// The torch the wheel was built for.
    pub wheel: Version,
    /// The torch of the env it was loaded into.
    pub env: Version,
    pub loads: bool,
    /// The first file that does not, and why.
    pub reason: Option<String>,
}

/// Every variant and the load table.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Variants {
    pub variants: Vec<Variant>,
    pub loads: Vec<LoadCell>,
    pub seconds: f64,
}

impl Variants {
    /// True when every variant built and loads in its own env.
    pub fn ok(&self) -> bool {
        self.variants.iter().all(|v| v.outcome.is_some())
            && self
                .loads
                .iter()
                .filter(|c| c.wheel == c.env)
                .all(|c| c.loads)
    }
}

/// Builds `req` once per torch in `torches` (each into `req.out/torch-X`), then load-checks every
/// wheel in every variant's env. `req.target` must name no torch, CUDA or Python: each variant
/// takes its own.
pub fn build_variants(req: &Request, torches: &[Version]) -> Result<Variants> {
    if req.target.cuda.is_some() || req.target.python.is_some() {
        bail!("--torch with several releases builds each in archsmith's env of that torch with its own CUDA major's toolkit: drop --cuda and --python");
    }
    let start = std::time::Instant::now();
    let mut variants = Vec::new();
    for (i, torch) in torches.iter().enumerate() {
        crate::errln!(
            "archsmith: variant {}/{}: torch {torch}",
            i + 1,
            torches.len()
        );
        let python = crate::python::ensure_torch_env(torch)?.python;
        let mut one = req.clone();
        one.target.torch = Some(torch.clone());
        one.target.python = Some(python.clone());
        one.out = req.out.join(format!("torch-{torch}"));
        let (outcome, failure) = match super::build(&one)? {
            Ok(Built::Wheel(o)) => (Some(o), None),
            Ok(Built::Jit(_)) => bail!("--torch with several releases builds wheels; a tree of JIT extensions is prebuilt for one torch at a time"),
            Err(f) => (None, Some(f.to_string())),
        };
        variants.push(Variant {
            torch: torch.clone(),
            python,
            outcome,
            failure,
        });
    }
    let mut loads = Vec::new();
    for built in &variants {
        let Some(outcome) = &built.outcome else {
            continue;
        };
        for env in &variants {
            let report = LoadReport::check(&env.python, std::slice::from_ref(&outcome.wheel))?;
            loads.push(LoadCell {
                wheel: built.torch.clone(),
                env: env.torch.clone(),
                loads: report.loads,
                reason: report
                    .modules
                    .iter()
                    .find(|m| !m.loads)
                    .map(|m| m.reason.clone().unwrap_or_default()),
            });
        }
    }
    Ok(Variants {
        variants,
        loads,
        seconds: start.elapsed().as_secs_f64(),
    })
}

impl Variants {
    /// For people: one row per variant (torch, CUDA, the archs read from the wheel, time), then
    /// the load table (a row per wheel, a column per env), then each refusal's reason.
    pub fn table(&self) -> String {
        let mut t = crate::output::Table::new(["TORCH", "CUDA", "WHEEL", "SASS / PTX", "BUILT"]);
        for v in &self.variants {
            match &v.outcome {
                Some(o) => t.row([
                    o.torch.clone(),
                    o.nvcc.clone(),
                    o.wheel.display().to_string(),
                    o.audit
                        .files
                        .iter()
                        .flat_map(|f| f.sass.iter().chain(&f.ptx).cloned())
                        .collect::<std::collections::BTreeSet<_>>()
                        .into_iter()
                        .collect::<Vec<_>>()
                        .join(" "),
                    if o.reused {
                        "reused".into()
                    } else {
                        format!("{:.0} s", o.build_seconds)
                    },
                ]),
                None => t.row([
                    v.torch.to_string(),
                    "-".into(),
                    format!(
                        "FAILED: {}",
                        v.failure
                            .as_deref()
                            .unwrap_or_default()
                            .lines()
                            .next()
                            .unwrap_or_default()
                    ),
                    "-".into(),
                    "-".into(),
                ]),
            }
        }
        let mut out = t.render();
        let envs: Vec<&Version> = self.variants.iter().map(|v| &v.torch).collect();
        let mut header = vec!["WHEEL FOR \\ LOADS IN".to_string()];
        header.extend(envs.iter().map(|e| format!("torch {e}")));
        let mut m = crate::output::Table::new(header);
        let mut reasons = Vec::new();
        for v in self.variants.iter().filter(|v| v.outcome.is_some()) {
            let mut row = vec![format!("torch {}", v.torch)];
            for env in &envs {
                let cell = self
                    .loads
                    .iter()
                    .find(|c| c.wheel == v.torch && c.env == **env);
                row.push(match cell {
                    Some(c) if c.loads => "loads".into(),
                    Some(c) => {
                        reasons.push(format!(
                            "  torch {}'s wheel in torch {}: {}",
                            c.wheel,
                            c.env,
                            c.reason.as_deref().unwrap_or("?")
                        ));
                        "refused".into()
                    }
                    None => "-".into(),
                });
            }
            m.row(row);
        }
        out.push('\n');
        out.push_str(&m.render());
        for r in reasons {
            out.push_str(&r);
            out.push('\n');
        }
        out.push_str(&format!("({:.0} s in all)\n", self.seconds));
        out
    }
}
