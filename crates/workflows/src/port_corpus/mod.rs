//! The regression corpus: real packages that archsmith ported or built, each with its source, the
//! command and the outcome last recorded (`xtask/data/port-corpus.toml`). `cargo xtask corpus`
//! runs them all, or those named, through archsmith's own CLI as a user would (`--json`), and
//! compares what each did with what was recorded: the archs in each built module, the modules
//! imported, the smoke test's and the package's own tests' counts, the rewrites and review items,
//! the exit status and the failing stage. It is the opt-in tier (hours) to run before resolving a
//! change to port-extension, build-ext or the codemods: fixtures show the classes a change meant
//! to handle; the corpus shows what it did to code nobody tuned it to.

use crate::process::Cmd;
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The manifest's file in this repository.
pub fn default_manifest() -> PathBuf {
    crate::paths::repo_root().join("xtask/data/port-corpus.toml")
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    #[serde(rename = "package")]
    pub packages: Vec<Entry>,
}

/// One real package: where it comes from, what was run, what it did.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    pub name: String,
    /// `pypi:NAME==VER`, or `git+URL@COMMIT` (with `subdir` for a package inside the tree).
    pub source: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subdir: Option<String>,
    /// The archsmith command and its flags, without the source and `--json`: `["port-extension",
    /// "--arch", "7.5,8.9,9.0"]` (the source goes in as `--src`) or `["build-ext", …]` (as the
    /// source directory).
    pub command: Vec<String>,
    /// The document that reports it (the measurement the outcome was first recorded from).
    pub reported: String,
    /// Why the entry is as it is (an `env` it needs, a known limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Variables the package's own build reads (`CAUSAL_CONV1D_FORCE_BUILD`, `FORCE_CUDA`), set
    /// as its users set them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// When the outcome was recorded, and how long that run took.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorded: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect: Option<Outcome>,
}

/// What a run did, as compared between runs: what a user relies on, not timings or paths.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Outcome {
    pub exit: i32,
    /// The stage that failed (`compile`, `audit`, `import`, `smoke`, `tests`, `review`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
    /// Each built module's device code: `sm_90`, and `compute_90` for PTX.
    #[serde(default)]
    pub archs: BTreeMap<String, Vec<String>>,
    #[serde(default)]
    pub cpu_only: bool,
    /// Every module that imported (the import sweep's, else the build's).
    #[serde(default)]
    pub imported: Vec<String>,
    /// The port's rewrites and the review items left.
    #[serde(default)]
    pub rewrites: u64,
    #[serde(default)]
    pub review: u64,
    /// Whether the smoke test passed, and its calls by status (`ran`, `raised`, `crashed`,
    /// `skipped`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub smoke_ok: Option<bool>,
    #[serde(default)]
    pub smoke: BTreeMap<String, u64>,
    /// The package's own tests: `passed`, `failed`, `skipped`, `needs_gpu`, `not_collected`.
    #[serde(default)]
    pub tests: BTreeMap<String, u64>,
    /// A stable-ABI port's promise, read from its wheel: the target, the CUDA runtime and the
    /// driver floor (`torch >= 2.10; linked in (CUDA 12.4); driver >= 525.60.13`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stable_abi: Option<String>,
}

impl Manifest {
    pub fn read(path: &Path) -> Result<Manifest> {
        let text = crate::input_file::read_text(path, "the corpus manifest")?;
        let m: Manifest =
            toml::from_str(&text).with_context(|| format!("reading {}", path.display()))?;
        for e in &m.packages {
            e.check()
                .with_context(|| format!("{}: `{}`", path.display(), e.name))?;
        }
        Ok(m)
    }

    /// The entries named (all when none), in the manifest's order; an unknown name is an error
    /// that lists the known ones.
    pub fn select(&self, names: &[String]) -> Result<Vec<&Entry>> {
        if let Some(unknown) = names
            .iter()
            .find(|n| !self.packages.iter().any(|e| &e.name == *n))
        {
            bail!(
                "no package `{unknown}` in the corpus; it has: {}",
                self.packages
                    .iter()
                    .map(|e| e.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        Ok(self
            .packages
            .iter()
            .filter(|e| names.is_empty() || names.contains(&e.name))
            .collect())
    }

    /// The manifest as TOML, for `--record`, under the comment lines that open `previous` (the
    /// file as it was: its header says what the file is and is kept).
    pub fn to_toml(&self, previous: &str) -> Result<String> {
        let header: String = previous
            .lines()
            .take_while(|l| l.starts_with('#') || l.trim().is_empty())
            .map(|l| format!("{l}\n"))
            .collect();
        Ok(format!("{header}{}", toml::to_string_pretty(self)?))
    }
}

impl Entry {
    fn check(&self) -> Result<()> {
        match self.command.first().map(String::as_str) {
            Some("port-extension" | "build-ext") => {}
            other => bail!("`command` starts with port-extension or build-ext, not {other:?}"),
        }
        if self.command.iter().any(|a| a == "--json" || a == "--src") {
            bail!("`command` holds neither --json nor --src: the corpus adds them");
        }
        if !(self.source.starts_with("pypi:") || self.git().is_some()) {
            bail!(
                "`source` is pypi:NAME==VER or git+URL@COMMIT, not `{}`",
                self.source
            );
        }
        Ok(())
    }

    /// `(URL, commit)` of a git source.
    fn git(&self) -> Option<(&str, &str)> {
        self.source.strip_prefix("git+")?.rsplit_once('@')
    }

    /// Where the command reads the source from: a checkout under `checkouts` (named as the
    /// repository, at the recorded commit), else the source itself; `Err(reason)` when it
    /// cannot be reached here.
    pub fn resolve_source(
        &self,
        checkouts: Option<&Path>,
    ) -> Result<std::result::Result<String, String>> {
        let Some((url, commit)) = self.git() else {
            return Ok(Ok(self.source.clone()));
        };
        let repo = url.trim_end_matches('/').trim_end_matches(".git");
        let repo = repo.rsplit('/').next().unwrap_or(repo);
        let Some(dir) = checkouts.map(|c| c.join(repo)).filter(|d| d.is_dir()) else {
            return Ok(match &self.subdir {
                None => Ok(self.source.clone()),
                Some(_) => Err(format!(
                    "a package inside {url}: give --checkouts DIR with {repo}/ checked out at {commit}"
                )),
            });
        };
        let head = Cmd::new("git")
            .args(["-C"])
            .arg(&dir)
            .args(["rev-parse", "HEAD"])
            .read()
            .with_context(|| format!("reading the commit of {}", dir.display()))?;
        if !head.starts_with(commit) {
            bail!(
                "{} is at {head}, not at {commit} as the corpus records: check out {commit} there",
                dir.display()
            );
        }
        let dir = self.subdir.as_ref().map_or(dir.clone(), |s| dir.join(s));
        Ok(Ok(dir.display().to_string()))
    }

    /// The command line, less the program: the source placed as the command takes it.
    pub fn argv(&self, source: &str) -> Vec<String> {
        let mut argv = vec![self.command[0].clone()];
        if self.command[0] == "port-extension" {
            argv.extend(["--src".to_string(), source.to_string()]);
        } else {
            argv.push(source.to_string());
        }
        argv.extend(self.command[1..].iter().cloned());
        argv.push("--json".into());
        argv
    }
}

/// What one package's run came to.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    pub name: String,
    /// `same`, `changed`, `new` (nothing recorded), `skipped` (the source is not reachable here)
    /// or `error` (the command did not run or printed no document).
    pub verdict: &'static str,
    pub seconds: f64,
    /// `compiled 499 s`, or `reused` (a stamped wheel of the identical tree and toolchain).
    pub build: String,
    /// For `changed`: `field: recorded → now`. For `skipped` and `error`: why.
    pub notes: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
    /// The run's full stderr.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log: Option<PathBuf>,
}

/// Runs one entry with `program` (archsmith itself) in its own directory under `logs`, its
/// stderr logged there.
pub fn run(entry: &Entry, program: &Path, checkouts: Option<&Path>, logs: &Path) -> Result<Run> {
    let mut run = Run {
        name: entry.name.clone(),
        verdict: "skipped",
        seconds: 0.0,
        build: String::new(),
        notes: Vec::new(),
        outcome: None,
        log: None,
    };
    let source = match entry.resolve_source(checkouts)? {
        Ok(s) => s,
        Err(why) => {
            run.notes.push(why);
            return Ok(run);
        }
    };
    std::fs::create_dir_all(logs)?;
    let log = logs.join(format!("{}.log", entry.name));
    let started = std::time::Instant::now();
    // Its own directory to run in: build-ext writes `dist/` where it runs, never the user's tree.
    let work = logs.join("runs").join(&entry.name);
    std::fs::create_dir_all(&work)?;
    let mut cmd = Cmd::new(program).args(entry.argv(&source)).dir(&work);
    for (k, v) in &entry.env {
        cmd = cmd.env(k, v);
    }
    let out = cmd.output_logging_stderr(&log)?;
    run.seconds = started.elapsed().as_secs_f64();
    run.log = Some(log.clone());
    // With --json the document is all the command prints on stdout.
    let Ok(doc) = serde_json::from_str::<serde_json::Value>(&out.stdout) else {
        run.verdict = "error";
        run.notes.push(format!(
            "exit {:?} and no JSON document; {}",
            out.status,
            first_error_line(&log)
        ));
        return Ok(run);
    };
    let outcome = Outcome::read(&doc, out.status.unwrap_or(-1));
    let build = build_section(&doc);
    run.build = match (build["reused"].as_bool(), build["build_seconds"].as_f64()) {
        (Some(true), _) => "reused".into(),
        (_, Some(s)) => format!("compiled {s:.0} s"),
        _ => String::new(),
    };
    match &entry.expect {
        None => run.verdict = "new",
        Some(expect) => {
            run.notes = expect.differences(&outcome);
            run.verdict = if run.notes.is_empty() {
                "same"
            } else {
                "changed"
            };
        }
    }
    run.outcome = Some(outcome);
    Ok(run)
}

/// `corpus --list`: each package, its source, command and when it was recorded.
pub fn list_table(entries: &[&Entry]) -> String {
    let mut t = crate::output::Table::new(["PACKAGE", "SOURCE", "COMMAND", "RECORDED"]);
    for e in entries {
        t.row([
            e.name.clone(),
            e.source.clone(),
            e.command.join(" "),
            e.recorded.clone().unwrap_or_else(|| "never".into()),
        ]);
    }
    t.render()
}

/// What each run came to, and what differs.
pub fn runs_table(runs: &[Run]) -> String {
    let mut t =
        crate::output::Table::new(["PACKAGE", "VERDICT", "TIME", "BUILD", "WHAT DIFFERS / WHY"]);
    for r in runs {
        t.row([
            r.name.clone(),
            r.verdict.to_string(),
            format!("{:.0} s", r.seconds),
            r.build.clone(),
            r.notes.join("; "),
        ]);
    }
    t.render()
}

/// The first line of a log that says `error`, for a run that printed no document.
fn first_error_line(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .find(|l| l.starts_with("error"))
        .or_else(|| text.lines().last())
        .unwrap_or("no output")
        .chars()
        .take(300)
        .collect()
}

/// A port's `stable_abi` section in one line; None for an ordinary port.
fn stable_abi_of(s: &serde_json::Value) -> Option<String> {
    let target = s["torch_target_version"].as_str()?;
    // A port reads both from the built wheel's device code; a CPU-only wheel has none.
    if s["cuda_runtime"].is_null() && s["driver_floor"].is_null() {
        return Some(format!("torch >= {target}; no device code"));
    }
    let field = |k: &str| s[k].as_str().unwrap_or("not read").to_string();
    Some(format!(
        "torch >= {target}; CUDA runtime {}; driver >= {}",
        field("cuda_runtime"),
        field("driver_floor")
    ))
}

impl Outcome {
    /// The outcome in a port-extension or build-ext document (`--json`).
    pub fn read(doc: &serde_json::Value, exit: i32) -> Outcome {
        let build = build_section(doc);
        let mut archs = archs_of(build);
        // A JIT prebuild (build-ext's `jit`, a port's `jit`): each extension's audited images.
        let jit = &doc["jit"];
        for e in jit["extensions"].as_array().into_iter().flatten() {
            let module = e["module"].as_str().unwrap_or("?").to_string();
            archs.insert(module, jit_images(e));
        }
        let names = |v: &serde_json::Value| -> Vec<String> {
            let mut n: Vec<String> = v
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|m| m.as_str().map(str::to_string))
                .collect();
            n.sort();
            n
        };
        let mut imported = match doc["import_sweep"]["imported"].as_array() {
            Some(_) => names(&doc["import_sweep"]["imported"]),
            None => names(&build["imported"]),
        };
        // A JIT prebuild's proof: each trigger rerun with no compiler loaded its extension.
        for t in jit["loaded_offline"].as_array().into_iter().flatten() {
            if t["ok"] == true {
                imported.extend(t["module"].as_str().map(str::to_string));
            }
        }
        imported.sort();
        imported.dedup();
        let failure = &doc["failure"];
        Outcome {
            exit,
            failed: failure["stage"].as_str().map(str::to_string),
            archs,
            cpu_only: build["cpu_only"].as_bool().unwrap_or(false)
                || build["audit"]["cpu_only"].as_bool().unwrap_or(false),
            imported,
            rewrites: doc["rewrites"]
                .as_object()
                .map_or(0, |r| r.values().filter_map(|n| n.as_u64()).sum()),
            review: doc["unexplained"].as_u64().unwrap_or(0),
            smoke_ok: doc["smoke"]["ok"]
                .as_bool()
                .or_else(|| failure["smoke"]["ok"].as_bool()),
            smoke: smoke_counts(doc),
            tests: test_counts(doc),
            stable_abi: stable_abi_of(&doc["stable_abi"]),
        }
    }

    /// `field: recorded → now` for each field that differs.
    pub fn differences(&self, now: &Outcome) -> Vec<String> {
        let (a, b) = (
            serde_json::to_value(self).unwrap_or_default(),
            serde_json::to_value(now).unwrap_or_default(),
        );
        let mut keys: Vec<&String> = a
            .as_object()
            .into_iter()
            .flatten()
            .chain(b.as_object().into_iter().flatten())
            .map(|(k, _)| k)
            .collect();
        keys.sort();
        keys.dedup();
        keys.into_iter()
            .filter(|k| a.get(*k) != b.get(*k))
            .map(|k| {
                let show = |v: Option<&serde_json::Value>| {
                    v.map_or("nothing".to_string(), |v| v.to_string())
                };
                format!("{k}: {} → {}", show(a.get(k)), show(b.get(k)))
            })
            .collect()
    }
}

/// The build's part of a document: build-ext prints `result` (a wheel; a JIT prebuild is its
/// `jit`), a port nests `build`.
fn build_section(doc: &serde_json::Value) -> &serde_json::Value {
    if doc["document"] == "build-ext" {
        &doc["result"]
    } else {
        &doc["build"]
    }
}

/// Each built module's device code, from a build's `sass`/`ptx` maps (a port's `build`) or its
/// `audit.files` (build-ext's document).
fn archs_of(build: &serde_json::Value) -> BTreeMap<String, Vec<String>> {
    let mut archs: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut add = |file: &str, images: &serde_json::Value, prefix: &str| {
        let module = module_name(file);
        let list = archs.entry(module).or_default();
        for a in images
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|a| a.as_str())
        {
            let a = a.trim_start_matches("sm_").trim_start_matches("compute_");
            list.push(format!("{prefix}{a}"));
        }
        list.sort();
        list.dedup();
    };
    for kind in ["sass", "ptx"] {
        let prefix = if kind == "sass" { "sm_" } else { "compute_" };
        for (file, images) in build[kind].as_object().into_iter().flatten() {
            add(file, images, prefix);
        }
    }
    for f in build["audit"]["files"].as_array().into_iter().flatten() {
        let file = f["path"].as_str().unwrap_or("?");
        add(file, &f["sass"], "sm_");
        add(file, &f["ptx"], "compute_");
    }
    archs
}

/// A JIT extension's SASS and PTX, as a wheel's are listed.
fn jit_images(e: &serde_json::Value) -> Vec<String> {
    let list = |k: &str| -> Vec<String> {
        e[k].as_array()
            .into_iter()
            .flatten()
            .filter_map(|a| a.as_str())
            .map(|a| {
                a.trim_start_matches("sm_")
                    .trim_start_matches("compute_")
                    .to_string()
            })
            .collect()
    };
    let mut images: Vec<String> = list("sass").iter().map(|a| format!("sm_{a}")).collect();
    images.extend(list("ptx").iter().map(|a| format!("compute_{a}")));
    images.sort();
    images
}

/// The generic smoke test's calls by status.
fn smoke_counts(doc: &serde_json::Value) -> BTreeMap<String, u64> {
    let mut smoke = BTreeMap::new();
    for m in doc["smoke"]["modules"].as_object().into_iter().flatten() {
        for c in m.1["calls"].as_array().into_iter().flatten() {
            let status = c["status"].as_str().unwrap_or("?").to_string();
            *smoke.entry(status).or_insert(0) += 1;
        }
    }
    smoke
}

/// The package's own tests' counts, where it ran them.
fn test_counts(doc: &serde_json::Value) -> BTreeMap<String, u64> {
    let mut tests = BTreeMap::new();
    if doc["tests"].is_object() {
        for k in ["passed", "failed", "skipped", "needs_gpu"] {
            tests.insert(k.to_string(), doc["tests"][k].as_u64().unwrap_or(0));
        }
        tests.insert(
            "not_collected".into(),
            doc["tests"]["errors"].as_u64().unwrap_or(0),
        );
    }
    tests
}

/// `pkg/_C.cpython-311-x86_64-linux-gnu.so` → `pkg._C`.
fn module_name(file: &str) -> String {
    let file = file.trim_start_matches("./");
    let (dir, name) = file.rsplit_once('/').unwrap_or(("", file));
    let stem = name.split('.').next().unwrap_or(name);
    if dir.is_empty() {
        stem.to_string()
    } else {
        format!("{}.{stem}", dir.replace('/', "."))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_outcome_is_read_from_a_port_document_and_differences_are_named() {
        let doc = serde_json::json!({
            "schema": 1, "document": "port-extension",
            "rewrites": {"a": 2, "b": 3}, "unexplained": 1,
            "build": {"sass": {"pkg/_C.cpython-311-x86_64-linux-gnu.so": ["sm_75", "sm_90"]},
                      "ptx": {"pkg/_C.cpython-311-x86_64-linux-gnu.so": ["sm_90"]},
                      "imported": ["pkg._C"], "cpu_only": false},
            "import_sweep": {"imported": ["pkg", "pkg._C"]},
            "smoke": {"ok": true, "modules": {"pkg._C": {"calls": [
                {"status": "ran"}, {"status": "skipped"}, {"status": "ran"}]}}},
            "tests": {"passed": 3, "failed": 0, "skipped": 1, "needs_gpu": 2, "errors": 1}
        });
        let o = Outcome::read(&doc, 0);
        assert_eq!(o.archs["pkg._C"], ["compute_90", "sm_75", "sm_90"]);
        assert_eq!(o.imported, ["pkg", "pkg._C"]);
        assert_eq!((o.rewrites, o.review), (5, 1));
        assert_eq!(o.smoke["ran"], 2);
        assert_eq!(o.tests["not_collected"], 1);
        assert!(o.differences(&o).is_empty());
        let mut worse = o.clone();
        worse.tests.insert("passed".into(), 0);
        worse.exit = 1;
        worse.failed = Some("tests".into());
        let d = o.differences(&worse);
        assert_eq!(d.len(), 3, "{d:?}");
        assert!(
            d.iter()
                .any(|l| l.starts_with("failed: nothing → \"tests\"")),
            "{d:?}"
        );
        // A stable-ABI port's promise is part of the outcome: a runtime linked dynamically again
        // is a difference.
        assert_eq!(o.stable_abi, None);
        let mut stable = doc.clone();
        stable["stable_abi"] = serde_json::json!({"torch_target_version": "2.10",
            "cuda_runtime": "linked in (CUDA 12.4)", "driver_floor": "525.60.13"});
        let s = Outcome::read(&stable, 0);
        assert_eq!(
            s.stable_abi.as_deref(),
            Some("torch >= 2.10; CUDA runtime linked in (CUDA 12.4); driver >= 525.60.13")
        );
        stable["stable_abi"]["cuda_runtime"] = "libcudart.so.13".into();
        assert_eq!(s.differences(&Outcome::read(&stable, 0)).len(), 1);
        // A CPU-only stable wheel has neither.
        stable["stable_abi"] = serde_json::json!({"torch_target_version": "2.10"});
        assert_eq!(
            Outcome::read(&stable, 0).stable_abi.as_deref(),
            Some("torch >= 2.10; no device code")
        );
    }

    #[test]
    fn build_ext_documents_are_read_for_a_wheel_and_for_a_jit_prebuild() {
        let wheel = serde_json::json!({"schema": 1, "document": "build-ext", "ok": true,
            "result": {"audit": {"files": [{"path": "t/isotonic_cuda.cpython-311-x86_64-linux-gnu.so",
                "sass": ["sm_75", "sm_90"], "ptx": []}]},
                "imported": ["t.isotonic_cpu", "t.isotonic_cuda"]}});
        let o = Outcome::read(&wheel, 0);
        assert_eq!(o.archs["t.isotonic_cuda"], ["sm_75", "sm_90"]);
        assert_eq!(o.imported, ["t.isotonic_cpu", "t.isotonic_cuda"]);
        let jit = serde_json::json!({"schema": 1, "document": "build-ext", "ok": true,
            "jit": {"extensions": [{"module": "knn", "sass": ["sm_90"], "ptx": ["sm_90"]}],
                "loaded_offline": [{"module": "knn", "ok": true}]}});
        let o = Outcome::read(&jit, 0);
        assert_eq!(o.archs["knn"], ["compute_90", "sm_90"]);
        assert_eq!(o.imported, ["knn"]);
    }

    #[test]
    fn a_failed_port_records_its_stage() {
        let doc = serde_json::json!({"schema": 1, "document": "port-extension", "ok": false,
            "failure": {"stage": "compile", "message": "x"}});
        let o = Outcome::read(&doc, 1);
        assert_eq!((o.exit, o.failed.as_deref()), (1, Some("compile")));
    }

    #[test]
    fn the_manifest_in_the_repository_reads_and_each_entry_names_its_report() {
        let m = Manifest::read(&default_manifest()).unwrap();
        assert!(m.packages.len() >= 15, "{}", m.packages.len());
        for e in &m.packages {
            assert!(
                crate::paths::repo_root().join(&e.reported).is_file(),
                "{}: {}",
                e.name,
                e.reported
            );
        }
        // Recording keeps the header and reads back as the same manifest.
        let text = std::fs::read_to_string(default_manifest()).unwrap();
        let again = m.to_toml(&text).unwrap();
        assert!(again.starts_with("# The regression corpus"), "{again}");
        let back: Manifest = toml::from_str(&again).unwrap();
        assert_eq!(back.packages.len(), m.packages.len());
        let err = m.select(&["nope".into()]).unwrap_err().to_string();
        assert!(err.contains("no package `nope`") && err.contains(&m.packages[0].name));
    }

    #[test]
    fn a_git_package_inside_a_tree_needs_a_checkout() {
        let e: Entry = toml::from_str(
            "name = 'x'\nsource = 'git+https://github.com/o/repo@abc123'\nsubdir = 'pkg'\ncommand = ['port-extension', '--arch', '9.0']\nreported = 'docs/port-extension.md'\n",
        )
        .unwrap();
        let why = e.resolve_source(None).unwrap().unwrap_err();
        assert!(
            why.contains("--checkouts") && why.contains("abc123"),
            "{why}"
        );
        assert_eq!(
            e.argv("/src/pkg"),
            [
                "port-extension",
                "--src",
                "/src/pkg",
                "--arch",
                "9.0",
                "--json"
            ]
        );
    }
}
