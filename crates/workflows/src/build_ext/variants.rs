//! `build-ext SRC --torch A,B,C [--python X,Y]`: the wheels a package publishes, one per torch
//! release and Python, as a package's release job (cibuildwheel, Hugging Face's kernel-builder)
//! makes them, on one machine.
//!
//! Each variant is an ordinary build in its own env (`--torch X`, made from the host's Python or
//! each `--python`: a release such as 3.12 found on the machine, or an interpreter) with the
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
    /// The Python release the env was made from, when `--python` chose it (`3.12`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub python_release: Option<Version>,
    /// The env built and verified with.
    pub python: PathBuf,
    /// The build's outcome; None when it failed.
    pub outcome: Option<Box<Outcome>>,
    /// Why the build failed (its message and first compiler error).
    pub failure: Option<String>,
    /// Why this combination was not built: torch publishes no wheel for that Python.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
}

/// Whether one variant's wheel loads in one variant's env.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LoadCell {
    /// The torch the wheel was built for.
    pub wheel: Version,
    /// The torch of the env it was loaded into.
    pub env: Version,
    /// With `--python`: the Python of the wheel's variant and of the env.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wheel_python: Option<Version>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub env_python: Option<Version>,
    pub loads: bool,
    /// The first file that does not, and why.
    pub reason: Option<String>,
}

/// Every variant and the load table.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Variants {
    pub variants: Vec<Variant>,
    pub loads: Vec<LoadCell>,
    /// With `--kernels-layout`: the variants as a local Hugging Face kernel repository, each
    /// loaded by the `kernels` loader in its own env.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernels: Option<super::hf_kernels::Layout>,
    pub seconds: f64,
}

impl Variants {
    /// True when every variant built and loads in its own env.
    pub fn ok(&self) -> bool {
        self.variants
            .iter()
            .all(|v| v.outcome.is_some() || v.skipped.is_some())
            && self
                .loads
                .iter()
                .filter(|c| c.wheel == c.env && c.wheel_python == c.env_python)
                .all(|c| c.loads)
            && self
                .kernels
                .as_ref()
                .is_none_or(|k| k.variants.iter().all(|v| v.loaded))
    }
}

/// Builds `req` once per torch in `torches` and Python in `pythons` (none: the host's), each into
/// `req.out/torch-X` (`torch-X-pyY` with `--python`), then load-checks every wheel in every
/// variant's env. `req.target` must name no CUDA or Python: each variant takes its own.
pub fn build_variants(
    req: &Request,
    torches: &[Version],
    pythons: &[crate::python::PythonChoice],
    kernels_layout: bool,
) -> Result<Variants> {
    if req.target.cuda.is_some() || req.target.python.is_some() {
        bail!("variants build each torch in archsmith's env of it with its own CUDA major's toolkit: drop --cuda, and give --python as Pythons to make the envs from (3.12 or an interpreter)");
    }
    if kernels_layout && pythons.len() > 1 {
        bail!("--kernels-layout with several Pythons: the kernels loader's variants are per torch and CUDA, one build serving every Python; build for one Python (or none: the host's)");
    }
    let start = std::time::Instant::now();
    // Each Python found once, before anything builds: a missing one stops the run at once.
    let mut bases: Vec<(Option<Version>, PathBuf)> = Vec::new();
    for p in pythons {
        let interpreter = p.interpreter()?;
        let release = crate::python::probe(&interpreter, crate::python::Depth::Files)?
            .python
            .major_minor();
        bases.push((Some(release), interpreter));
    }
    if bases.is_empty() {
        bases.push((None, crate::python::host_python()?));
    }
    let total = torches.len() * bases.len();
    let mut variants = Vec::new();
    for torch in torches {
        for (release, base) in &bases {
            let label = variant_label(torch, release.as_ref());
            if let Some(why) = release.as_ref().and_then(|r| no_wheel_for(torch, r)) {
                crate::errln!(
                    "archsmith: variant {}/{total}: {label}: skipped: {why}",
                    variants.len() + 1
                );
                variants.push(Variant {
                    torch: torch.clone(),
                    python_release: release.clone(),
                    python: base.clone(),
                    outcome: None,
                    failure: None,
                    skipped: Some(why),
                });
                continue;
            }
            crate::errln!("archsmith: variant {}/{total}: {label}", variants.len() + 1);
            variants.push(build_one(req, torch, release.as_ref(), base)?);
        }
    }
    let (loads, own_envs) = load_table(&variants)?;
    let kernels = match kernels_layout {
        true => Some(kernels_layout_of(&req.out, &variants, &own_envs)?),
        false => None,
    };
    Ok(Variants {
        variants,
        loads,
        kernels,
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// Why torch `torch` has no build for Python `python` (the knowledge base's range of the
/// release's wheels), as cibuildwheel skips what a project does not support; None when it has.
fn no_wheel_for(torch: &Version, python: &Version) -> Option<String> {
    let row = crate::kb::kb().torch_row(torch)?;
    let mm = python.major_minor();
    (mm < row.python_min || mm > row.python_max).then(|| {
        format!(
            "torch {torch} publishes wheels for Python {}–{}",
            row.python_min, row.python_max
        )
    })
}

/// `torch 2.6.0`, or `torch 2.6.0, Python 3.12`.
fn variant_label(torch: &Version, python: Option<&Version>) -> String {
    match python {
        Some(p) => format!("torch {torch}, Python {p}"),
        None => format!("torch {torch}"),
    }
}

/// One variant: its env (made from `base`), its build into its own directory.
fn build_one(
    req: &Request,
    torch: &Version,
    release: Option<&Version>,
    base: &std::path::Path,
) -> Result<Variant> {
    let python = crate::python::ensure_torch_env_with(torch, base)?.python;
    let mut one = req.clone();
    one.target.torch = Some(torch.clone());
    one.target.python = Some(python.clone());
    one.out = req.out.join(match release {
        Some(p) => format!("torch-{torch}-py{p}"),
        None => format!("torch-{torch}"),
    });
    let (outcome, failure) = match super::build(&one)? {
        Ok(Built::Wheel(o)) => (Some(o), None),
        Ok(Built::Jit(_)) => bail!(
            "variants are wheels; a tree of JIT extensions is prebuilt for one torch at a time"
        ),
        Err(f) => (None, Some(f.to_string())),
    };
    Ok(Variant {
        torch: torch.clone(),
        python_release: release.cloned(),
        python,
        outcome,
        failure,
        skipped: None,
    })
}

/// The built variants laid out as `OUT/kernels/NAME/build/<variant>/`, then `get_local_kernel`
/// in each variant's env: it must find and import that variant. `own_envs`: each variant's own
/// env as the load table read it (its torch's CUDA and C++ ABI), by variant.
fn kernels_layout_of(
    out: &std::path::Path,
    variants: &[Variant],
    own_envs: &[Option<OwnEnv>],
) -> Result<super::hf_kernels::Layout> {
    use super::hf_kernels;
    let staging = out.join("kernels");
    let mut laid = Vec::new();
    let mut name = String::new();
    let mut repo = staging.clone();
    for (v, own) in variants.iter().zip(own_envs) {
        let (Some(o), Some(own)) = (&v.outcome, own) else {
            continue;
        };
        let torch: Version = o.record.torch.parse()?;
        let variant = hf_kernels::variant_name(&torch, own.cuda.as_deref(), own.cxx_abi)?;
        let archs: Vec<String> = o
            .record
            .torch_cuda_arch_list
            .split(';')
            .map(|a| a.trim_end_matches("+PTX").to_string())
            .collect();
        repo = staging.join(hf_kernels_name(&o.wheel));
        let (kernel, files) = hf_kernels::lay_out(&repo, &o.wheel, &variant, &archs)?;
        name = kernel;
        laid.push((v, variant, torch, files));
    }
    let mut out_variants = Vec::new();
    for (v, variant, torch, files) in laid {
        crate::errln!(
            "archsmith: loading {} with {} in torch {torch}'s env",
            repo.display(),
            hf_kernels::LOADER
        );
        let (ok, detail) = hf_kernels::load_with_kernels(&v.python, &repo)?;
        let loaded = ok && detail.ends_with(&format!("from {variant}"));
        out_variants.push(hf_kernels::LaidOut {
            variant,
            torch,
            files,
            loaded,
            detail,
        });
    }
    Ok(hf_kernels::Layout {
        repo,
        name,
        variants: out_variants,
    })
}

/// The repository's directory name: the wheel's distribution name.
fn hf_kernels_name(wheel: &std::path::Path) -> String {
    wheel
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.split('-').next())
        .unwrap_or("kernel")
        .to_string()
}

/// A variant's own env as the load check read it.
struct OwnEnv {
    cuda: Option<String>,
    cxx_abi: crate::binary::dynamic::CxxAbi,
}

/// Every built wheel load-checked in every variant's env, by its real exports; and, by variant,
/// its own env as that check read it.
fn load_table(variants: &[Variant]) -> Result<(Vec<LoadCell>, Vec<Option<OwnEnv>>)> {
    let mut loads = Vec::new();
    let mut own_envs: Vec<Option<OwnEnv>> = variants.iter().map(|_| None).collect();
    for (i, built) in variants.iter().enumerate() {
        let Some(outcome) = &built.outcome else {
            continue;
        };
        for (j, env) in variants.iter().enumerate() {
            if env.skipped.is_some() {
                continue;
            }
            let report = LoadReport::check(&env.python, std::slice::from_ref(&outcome.wheel))?;
            if i == j {
                own_envs[i] = Some(OwnEnv {
                    cuda: report.cuda.clone(),
                    cxx_abi: report.torch_cxx_abi,
                });
            }
            loads.push(LoadCell {
                wheel: built.torch.clone(),
                env: env.torch.clone(),
                wheel_python: built.python_release.clone(),
                env_python: env.python_release.clone(),
                loads: report.loads,
                reason: report
                    .modules
                    .iter()
                    .find(|m| !m.loads)
                    .map(|m| m.reason.clone().unwrap_or_default()),
            });
        }
    }
    Ok((loads, own_envs))
}

impl Variants {
    /// For people: one row per variant (torch, CUDA, the archs read from the wheel, time), then
    /// the load table (a row per wheel, a column per env), then each refusal's reason.
    pub fn table(&self) -> String {
        let mut t = crate::output::Table::new(["TORCH", "CUDA", "WHEEL", "SASS / PTX", "BUILT"]);
        for v in &self.variants {
            match &v.outcome {
                Some(o) => t.row([
                    match &v.python_release {
                        Some(p) => format!("{} py{p}", o.record.torch),
                        None => o.record.torch.clone(),
                    },
                    o.record.nvcc.clone(),
                    o.wheel.display().to_string(),
                    o.record
                        .audit
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
                        format!("{:.0} s", o.record.build_seconds)
                    },
                ]),
                None if v.skipped.is_some() => t.row([
                    variant_label(&v.torch, v.python_release.as_ref()),
                    "-".into(),
                    format!("skipped: {}", v.skipped.as_deref().unwrap_or_default()),
                    "-".into(),
                    "-".into(),
                ]),
                None => t.row([
                    variant_label(&v.torch, v.python_release.as_ref()),
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
        out.push('\n');
        out.push_str(&self.load_matrix());
        if let Some(k) = &self.kernels {
            out.push_str(&format!(
                "\nHugging Face kernel repository {} ({}), loaded with {} in each variant's env:\n",
                k.repo.display(),
                k.name,
                super::hf_kernels::LOADER
            ));
            let mut kt = crate::output::Table::new(["  VARIANT", "TORCH", "LOADER"]);
            for v in &k.variants {
                kt.row([
                    format!("  {}", v.variant),
                    v.torch.to_string(),
                    match v.loaded {
                        true => v.detail.clone(),
                        false => format!("FAILED: {}", v.detail),
                    },
                ]);
            }
            out.push_str(&kt.render());
        }
        out.push_str(&format!("({:.0} s in all)\n", self.seconds));
        out
    }
}

impl Variants {
    /// The load table: a row per built wheel, a column per env, then each refusal's reason.
    fn load_matrix(&self) -> String {
        let mut out = String::new();
        let envs: Vec<(&Version, Option<&Version>)> = self
            .variants
            .iter()
            .filter(|v| v.skipped.is_none())
            .map(|v| (&v.torch, v.python_release.as_ref()))
            .collect();
        let mut header = vec!["WHEEL FOR \\ LOADS IN".to_string()];
        header.extend(envs.iter().map(|(t, p)| variant_label(t, *p)));
        let mut m = crate::output::Table::new(header);
        let mut reasons = Vec::new();
        for v in self.variants.iter().filter(|v| v.outcome.is_some()) {
            let mut row = vec![variant_label(&v.torch, v.python_release.as_ref())];
            for (torch, python) in &envs {
                let cell = self.loads.iter().find(|c| {
                    c.wheel == v.torch
                        && c.wheel_python == v.python_release
                        && c.env == **torch
                        && c.env_python.as_ref() == *python
                });
                row.push(match cell {
                    Some(c) if c.loads => "loads".into(),
                    Some(c) => {
                        reasons.push(format!(
                            "  {}'s wheel in {}: {}",
                            variant_label(&c.wheel, c.wheel_python.as_ref()),
                            variant_label(&c.env, c.env_python.as_ref()),
                            c.reason.as_deref().unwrap_or("?")
                        ));
                        "refused".into()
                    }
                    None => "-".into(),
                });
            }
            m.row(row);
        }
        out.push_str(&m.render());
        for r in reasons {
            out.push_str(&r);
            out.push('\n');
        }
        out
    }
}
