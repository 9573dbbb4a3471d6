//! A source tree that holds several extension builds — a repository with one `setup.py` per op
//! under `lib/`, driven by a `make.sh` — found, listed and ported one package at a time, with one
//! summary row per package. A root that is itself a package (a `setup.py`, a `pyproject.toml` or
//! `load()` calls outside any package below) is not a tree: it ports as before.

use crate::build_ext::job_pool::{JobPool, PoolShare};
use crate::build_ext::{self, source};
use crate::output::Table;
use anyhow::{bail, Result};
use fs_err as fs;
use regex::Regex;
use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::sync::LazyLock;
use std::time::Instant;

/// One extension build found below a tree's root.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Member {
    /// Relative to the root (`chamfer3D`, `lib/roi_align`).
    pub dir: PathBuf,
    /// What makes it a build: `setup.py`, `pyproject.toml`, or `load()` (JIT calls, no script).
    pub kind: &'static str,
    /// The shell scripts that build it, `make.sh:4` each.
    pub driven_by: Vec<String>,
}

/// Folders of vendored code: their build scripts belong to someone else's project.
const VENDORED: [&str; 5] = [
    "third_party",
    "thirdparty",
    "3rdparty",
    "vendor",
    "external",
];

/// A build script that builds extensions (a `setup.py` of plain Python packages is not one).
static NAMES_EXTENSIONS: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\b(CUDAExtension|CppExtension|Extension\s*\(|ext_modules|cpp_extension|BuildExtension|scikit_build|scikit-build)")
        .expect("extension words")
});

/// The builds of `root` when it is a directory and a tree of packages rather than a package: no build script of its own, and
/// a `setup.py`/`pyproject.toml` below it. A root whose only builds are `load()` calls is one
/// JIT package (stylegan2-ada-pytorch's `torch_utils/ops` import `torch_utils` from the root):
/// build-ext prebuilds it whole, as before.
pub fn as_tree(root: &Path) -> Result<Option<Vec<Member>>> {
    let own = ["setup.py", "pyproject.toml"]
        .iter()
        .any(|f| root.join(f).is_file());
    if own || !root.is_dir() {
        return Ok(None);
    }
    let members = members(root)?;
    Ok(members
        .iter()
        .any(|m| m.kind != "load()")
        .then_some(members))
}
/// The extension builds below `root`, in path order: each `setup.py`/`pyproject.toml` that names
/// extensions, each folder of `load()` calls outside those, and for each the shell scripts that
/// run its build.
pub fn members(root: &Path) -> Result<Vec<Member>> {
    let files = source::tree_files(root)?;
    let vendored = |rel: &Path| {
        rel.components().any(|c| match c {
            Component::Normal(n) => VENDORED.contains(&n.to_string_lossy().as_ref()),
            _ => false,
        })
    };
    let mut found: BTreeMap<PathBuf, Member> = BTreeMap::new();
    for rel in files.iter().filter(|r| !vendored(r)) {
        let name = rel.file_name().map(|n| n.to_string_lossy().into_owned());
        let kind = match name.as_deref() {
            Some("setup.py") => "setup.py",
            Some("pyproject.toml") => "pyproject.toml",
            _ => continue,
        };
        let text = fs::read(root.join(rel)).unwrap_or_default();
        if !NAMES_EXTENSIONS.is_match(&String::from_utf8_lossy(&text)) {
            continue;
        }
        let dir = rel.parent().map(Path::to_path_buf).unwrap_or_default();
        // A setup.py beside a pyproject.toml is one package.
        found.entry(dir.clone()).or_insert(Member {
            dir,
            kind,
            driven_by: Vec::new(),
        });
    }
    let packages: Vec<PathBuf> = found.keys().cloned().collect();
    for site in build_ext::jit::find(root)?.sites {
        let file = PathBuf::from(&site.file);
        if vendored(&file) || packages.iter().any(|p| file.starts_with(p)) {
            continue;
        }
        // The top folder of the calling module: its imports reach its own package.
        let dir = match file.components().count() {
            0 | 1 => PathBuf::new(),
            _ => file.components().take(1).collect(),
        };
        found.entry(dir.clone()).or_insert(Member {
            dir,
            kind: "load()",
            driven_by: Vec::new(),
        });
    }
    for (dir, at) in script_builds(root, &files)? {
        if let Some(m) = found.get_mut(&dir) {
            m.driven_by.push(at);
        }
    }
    Ok(found.into_values().collect())
}

/// The folders shell scripts build in (`cd lib/nms && python setup.py install`, `pip install
/// ./ops`), relative to the root, each with the script line that does it.
fn script_builds(root: &Path, files: &[PathBuf]) -> Result<Vec<(PathBuf, String)>> {
    // `cd DIR` after a line's start or a separator, or opening a subshell (`(cd DIR && …)`).
    static CD: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"(?:^|[;&|]|(\())\s*cd\s+([^\s;&|)]+)").expect("cd"));
    static PIP: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"pip3?\s+install\s+(?:-[-\w]+(?:=\S+)?\s+)*([./][^\s;&|]*)").expect("pip")
    });
    let mut out = Vec::new();
    for rel in files
        .iter()
        .filter(|r| r.extension().is_some_and(|e| e == "sh"))
    {
        let text = fs::read_to_string(root.join(rel)).unwrap_or_default();
        let base = rel.parent().map(Path::to_path_buf).unwrap_or_default();
        let mut cwd = base.clone();
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or_default();
            let at = format!("{}:{}", rel.display(), n + 1);
            // What the line builds happens where the line's own `cd`s lead; a subshell's `cd`
            // ends with its line.
            let mut here = cwd.clone();
            for cd in CD.captures_iter(line) {
                here = match &cd[2] {
                    "~" | "-" => base.clone(),
                    d => normalize(&here.join(d)),
                };
                if cd.get(1).is_none() {
                    cwd = here.clone();
                }
            }
            if line.contains("setup.py") {
                out.push((here.clone(), at.clone()));
            }
            if let Some(p) = PIP.captures(line) {
                out.push((normalize(&here.join(&p[1])), at));
            }
        }
    }
    Ok(out)
}

/// `a/b/../c/.` → `a/c`, lexically (a folder of the tree, which need not exist).
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
            _ => {}
        }
    }
    out
}

/// The member `--package PATH` names (relative to the root, or the same folder as an absolute or
/// `./` path); an error listing them otherwise.
pub fn named<'a>(root: &Path, members: &'a [Member], path: &str) -> Result<&'a Member> {
    let wanted = match Path::new(path).strip_prefix(root) {
        Ok(rel) => normalize(rel),
        Err(_) => normalize(Path::new(path)),
    };
    match members.iter().find(|m| m.dir == wanted) {
        Some(m) => Ok(m),
        None => bail!(
            "--package {path}: not one of the extension builds under {}: {}",
            root.display(),
            listing(members)
        ),
    }
}

/// `chamfer2D (setup.py), chamfer3D (setup.py, make.sh:3)`.
pub fn listing(members: &[Member]) -> String {
    members
        .iter()
        .map(|m| {
            let mut what = vec![m.kind.to_string()];
            what.extend(m.driven_by.iter().cloned());
            format!("{} ({})", shown(&m.dir), what.join(", "))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn shown(dir: &Path) -> String {
    match dir.as_os_str().is_empty() {
        true => ".".into(),
        false => dir.display().to_string(),
    }
}

/// One package's outcome in a tree port.
#[derive(Debug, serde::Serialize)]
pub struct Row {
    #[serde(flatten)]
    pub member: Member,
    pub ok: bool,
    /// `ported` (`dry run`), or the stage that stopped it (`compile`, `smoke`, `error`).
    pub outcome: String,
    /// The archs built, per shared object, and the modules imported: what `port-extension`
    /// reports of one package.
    pub report: Option<serde_json::Value>,
    /// Why it failed: the first error.
    pub error: Option<String>,
    pub seconds: f64,
    /// When its port started, in seconds from the tree port's start: with packages ported at
    /// once, their spans overlap.
    pub started_s: f64,
}

/// What a tree port did: one row per package.
#[derive(Debug, serde::Serialize)]
pub struct TreeReport {
    pub tree: PathBuf,
    pub packages: Vec<Row>,
}

impl TreeReport {
    pub fn ok(&self) -> bool {
        self.packages.iter().all(|r| r.ok)
    }

    /// One row per package: what it is, what happened, the archs built and what imported.
    pub fn table(&self) -> String {
        let mut t = Table::new(["package", "build", "outcome", "seconds"]);
        for r in &self.packages {
            let detail = match (&r.report, &r.error) {
                (_, Some(e)) => e.lines().next().unwrap_or_default().to_string(),
                (Some(rep), None) => package_detail(rep),
                (None, None) => String::new(),
            };
            t.row([
                shown(&r.member.dir),
                r.member.kind.to_string(),
                format!("{}: {detail}", r.outcome),
                format!("{:.0}", r.seconds),
            ]);
        }
        let ported = self.packages.iter().filter(|r| r.ok).count();
        format!(
            "{}\n{ported} of {} packages under {} ported, or would be (a dry run)\n",
            t.render(),
            self.packages.len(),
            self.tree.display()
        )
    }
}

/// What a tree port comes to: the one package `--package` names, to port as any package, or the
/// rows of all of them.
pub enum TreePort {
    One(PathBuf),
    All(TreeReport),
}

/// Ports one package directory; with a pool, its build joins it.
pub type PortOne<'a> = dyn Fn(&Path, Option<PoolShare>) -> Result<Result<super::Outcome, super::PortFailure>>
    + Sync
    + 'a;

/// Lists the builds under `root`, then resolves `package` (`--package`) to its package, or ports
/// each with `port` (`one_only`: the caller can port a single package only, as `--write-recipe`
/// can). `building`: `Some(jobs)` when the ports build, at once in one pool of `jobs` job slots
/// (default: as many as cores and memory allow); `None` (a dry run), one after another.
pub fn port_tree(
    root: &Path,
    members: &[Member],
    (package, one_only): (Option<&str>, Option<&str>),
    building: Option<Option<u32>>,
    port: &PortOne,
) -> Result<TreePort> {
    crate::errln!(
        "archsmith: {} holds {} extension builds: {}",
        root.display(),
        members.len(),
        listing(members)
    );
    if let Some(path) = package {
        return Ok(TreePort::One(root.join(&named(root, members, path)?.dir)));
    }
    if let Some(flag) = one_only {
        bail!("{flag} takes one package: add --package PATH (one of the packages above)");
    }
    let mem = crate::host::mem_available_gib();
    let pool = match building {
        // Not under build-ext's scratch root, whose next build removes every folder it does not
        // know to be locked.
        Some(jobs) if members.len() > 1 => Some(JobPool::new(
            &std::env::temp_dir(),
            jobs.unwrap_or_else(|| build_ext::jobs::pool_slots(crate::host::cores(), mem)),
            build_ext::jobs::memory_budget_bytes(mem),
        )?),
        _ => None,
    };
    Ok(TreePort::All(port_each(root, members, pool.as_ref(), port)))
}

/// Ports each member with `port`, in path order: with a pool, each starts as soon as the pool
/// has a free slot and holds it to its end (its build's compiles take further slots from the
/// same pool), so packages build at once and their compiles never outnumber the slots; without
/// one, one after another. A package that fails, or whose port stops on an error, is its row,
/// and the others still run.
pub fn port_each(
    root: &Path,
    members: &[Member],
    pool: Option<&JobPool>,
    port: &PortOne,
) -> TreeReport {
    let began = Instant::now();
    if let Some(p) = pool {
        crate::errln!(
            "archsmith: porting {} packages in one pool of {} job slots",
            members.len(),
            p.share().slots
        );
    }
    let one = |i: usize, m: &Member| {
        crate::errln!(
            "archsmith: package {} of {}: {} ({})",
            i + 1,
            members.len(),
            shown(&m.dir),
            m.kind
        );
        let share = pool.map(|p| p.share().clone());
        let started = began.elapsed().as_secs_f64();
        row(m, started, began, port(&root.join(&m.dir), share))
    };
    let packages = match pool {
        None => members.iter().enumerate().map(|(i, m)| one(i, m)).collect(),
        Some(p) => std::thread::scope(|s| {
            let mut running = Vec::new();
            for (i, m) in members.iter().enumerate() {
                let slot = p.take();
                let one = &one;
                running.push(s.spawn(move || {
                    let slot = slot?;
                    let r = one(i, m);
                    drop(slot);
                    Ok::<Row, anyhow::Error>(r)
                }));
            }
            running
                .into_iter()
                .zip(members)
                .map(|(h, m)| match h.join() {
                    Ok(Ok(r)) => r,
                    Ok(Err(e)) => row(m, 0.0, began, Err(e)),
                    Err(_) => row(m, 0.0, began, Err(anyhow::anyhow!("its port panicked"))),
                })
                .collect()
        }),
    };
    TreeReport {
        tree: root.to_path_buf(),
        packages,
    }
}

/// One package's row from its port's result; it started `started` seconds after the tree port
/// `began`, and ends now.
fn row(
    m: &Member,
    started: f64,
    began: Instant,
    result: Result<Result<super::Outcome, super::PortFailure>>,
) -> Row {
    let ended = began.elapsed().as_secs_f64();
    let (ok, outcome, report, error) = match result {
        Ok(Ok(o)) => {
            let outcome = match o.diff.is_some() {
                true => "dry run",
                false => "ported",
            };
            (
                true,
                outcome.to_string(),
                serde_json::to_value(&o).ok(),
                None,
            )
        }
        Ok(Err(f)) => {
            let (stage, text) = match &f {
                super::PortFailure::Build(b) => (b.stage.to_string(), b.to_string()),
                super::PortFailure::Verify(v) => (v.stage.to_string(), v.to_string()),
            };
            (false, stage, serde_json::to_value(&f).ok(), Some(text))
        }
        Err(e) => (false, "error".to_string(), None, Some(format!("{e:#}"))),
    };
    if let Some(e) = &error {
        crate::errln!("archsmith: {} failed: {e}", shown(&m.dir));
    }
    Row {
        member: m.clone(),
        ok,
        outcome,
        report,
        error,
        seconds: ended - started,
        started_s: started,
    }
}

/// `12 rewrites, 1 to review; sm_75 sm_89 sm_90; imports chamfer_3D` from one port's JSON (a
/// dry run: the rewrites and review items only).
fn package_detail(rep: &serde_json::Value) -> String {
    let rewrites: u64 = rep["rewrites"]
        .as_object()
        .into_iter()
        .flat_map(|m| m.values())
        .filter_map(serde_json::Value::as_u64)
        .sum();
    let review = rep["review"].as_array().map_or(0, Vec::len);
    let mut parts = vec![format!("{rewrites} rewrites, {review} to review")];
    if rep["build"].is_object() {
        let mut archs: Vec<String> = rep["build"]["sass"]
            .as_object()
            .into_iter()
            .flat_map(|m| m.values())
            .flat_map(|v| v.as_array().cloned().unwrap_or_default())
            .filter_map(|a| a.as_str().map(str::to_string))
            .collect();
        archs.sort();
        archs.dedup();
        parts.push(match archs.is_empty() {
            true => "no device code".to_string(),
            false => archs.join(" "),
        });
        let imported: Vec<&str> = rep["import_sweep"]["imported"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(serde_json::Value::as_str)
            .collect();
        parts.push(format!("imports {}", imported.join(", ")));
    }
    if let Some(why) = rep["smoke"]["skipped"].as_str() {
        parts.push(format!("smoke skipped: {why}"));
    }
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
    }

    /// A subshell's `cd` (`(cd ops/add && python setup.py …)`) builds in that folder, and the
    /// next line starts where the script was; before, `(cd` was not read as a `cd` at all.
    #[test]
    fn a_subshell_cd_drives_its_folder_for_its_line_only() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(
            root,
            "build.sh",
            "(cd ops/add && python setup.py build_ext)\n( cd ops/mul; python setup.py install )\npython setup.py sdist\n",
        );
        let files = source::tree_files(root).unwrap();
        let got = script_builds(root, &files).unwrap();
        assert_eq!(
            got,
            [
                (PathBuf::from("ops/add"), "build.sh:1".to_string()),
                (PathBuf::from("ops/mul"), "build.sh:2".to_string()),
                (PathBuf::new(), "build.sh:3".to_string()),
            ]
        );
    }

    /// Issue 62: five packages in subfolders, four built by a driving script, one plain Python
    /// setup.py (no extension), a vendored one, and a folder of load() calls.
    #[test]
    fn a_tree_lists_its_extension_builds_and_the_script_lines_that_drive_them() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let ext = "from torch.utils.cpp_extension import CUDAExtension\nsetup(ext_modules=[CUDAExtension('x', ['x.cu'])])\n";
        for p in [
            "lib/nms",
            "lib/roi_align",
            "lib/roi_pool",
            "lib/dcn",
            "ops/sparse",
        ] {
            write(root, &format!("{p}/setup.py"), ext);
        }
        write(
            root,
            "docs/setup.py",
            "from setuptools import setup\nsetup(name='docs')\n",
        );
        write(root, "third_party/pybind11/setup.py", ext);
        write(
            root,
            "jit/corr.py",
            "from torch.utils.cpp_extension import load\ncorr = load('corr', ['corr.cpp'])\n",
        );
        write(
            root,
            "make.sh",
            "#!/bin/bash\ncd lib/nms\npython setup.py build_ext --inplace  # nms\ncd ../roi_align && python setup.py install\ncd ..\ncd roi_pool; python setup.py develop\ncd ../..\npip install -v ./lib/dcn\n",
        );
        assert!(as_tree(root).unwrap().is_some());
        let got = members(root).unwrap();
        let rows: Vec<(String, &str, Vec<String>)> = got
            .iter()
            .map(|m| (shown(&m.dir), m.kind, m.driven_by.clone()))
            .collect();
        assert_eq!(
            rows,
            [
                ("jit".to_string(), "load()", vec![]),
                (
                    "lib/dcn".to_string(),
                    "setup.py",
                    vec!["make.sh:8".to_string()]
                ),
                (
                    "lib/nms".to_string(),
                    "setup.py",
                    vec!["make.sh:3".to_string()]
                ),
                (
                    "lib/roi_align".to_string(),
                    "setup.py",
                    vec!["make.sh:4".to_string()]
                ),
                (
                    "lib/roi_pool".to_string(),
                    "setup.py",
                    vec!["make.sh:6".to_string()]
                ),
                ("ops/sparse".to_string(), "setup.py", vec![]),
            ]
        );
        assert_eq!(
            named(root, &got, "lib/nms/").unwrap().dir,
            PathBuf::from("lib/nms")
        );
        assert_eq!(
            named(root, &got, &root.join("ops/sparse").display().to_string())
                .unwrap()
                .dir,
            PathBuf::from("ops/sparse")
        );
        let e = named(root, &got, "lib").unwrap_err().to_string();
        assert!(e.contains("lib/nms (setup.py, make.sh:3)"), "{e}");
        // A package root is not a tree, nor one whose only builds are load() calls.
        let jit_only = tempfile::tempdir().unwrap();
        write(
            jit_only.path(),
            "torch_utils/ops/bias_act.py",
            "from torch.utils.cpp_extension import load\nx = load('b', ['b.cpp'])\n",
        );
        assert_eq!(members(jit_only.path()).unwrap().len(), 1);
        assert!(as_tree(jit_only.path()).unwrap().is_none());
        write(root, "setup.py", ext);
        assert!(as_tree(root).unwrap().is_none());
    }
}
