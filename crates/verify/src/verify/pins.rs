//! `verify pins`: what a repository's requirement files say about torch and its companions, read
//! with PEP 440/508 (`pep440_rs`, `pep508_rs`): contradictions across files under markers that can
//! both hold, CUDA variants that disagree, torch ↔ torchvision ↔ torchaudio pairs the knowledge
//! base says do not go together, pins with no wheel for the target Python, and with `--gpu` pins
//! that cannot run there (and which release would). Each finding names the files and lines.
//!
//! Sources: `requirements*.txt` and `constraints*.txt` (and `requirements/*.txt`) with their `-r` /
//! `-c` includes and `--index-url` / `--extra-index-url` lines, and `pyproject.toml`'s
//! `[project] dependencies`, `[project.optional-dependencies]` and `[dependency-groups]`.

use crate::arch::advice::variant_runs_on;
use crate::kb::kb;
use crate::version::Version;
use anyhow::{Context, Result};
use pep440_rs::{Operator, VersionSpecifier, VersionSpecifiers};
use pep508_rs::{MarkerTree, Requirement, VersionOrUrl};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use version_ranges::Ranges;

/// The distributions whose versions and CUDA variants must agree with torch's.
const TORCH_FAMILY: [&str; 3] = ["torch", "torchvision", "torchaudio"];

/// One requirement where it was written.
#[derive(Debug, Clone)]
pub struct Pin {
    pub file: PathBuf,
    pub line: usize,
    pub text: String,
    pub name: String,
    pub specifiers: Option<VersionSpecifiers>,
    pub marker: MarkerTree,
    /// The CUDA variant of the index the requirements file installs from (`cu121` for
    /// `--index-url https://download.pytorch.org/whl/cu121`).
    pub index_variant: Option<String>,
}

impl Pin {
    pub fn place(&self) -> String {
        format!("{}:{}", self.file.display(), self.line)
    }

    /// The exact version of an `==` pin (local label kept).
    pub fn exact(&self) -> Option<pep440_rs::Version> {
        let specs = self.specifiers.as_ref()?;
        let mut it = specs.iter();
        let only = it.next()?;
        (it.next().is_none() && matches!(only.operator(), Operator::Equal | Operator::ExactEqual))
            .then(|| only.version().clone())
    }

    /// The CUDA variant this pin names: its local label (`+cu121`) or its index's.
    pub fn variant(&self) -> Option<String> {
        self.exact()
            .and_then(|v| {
                let local = v
                    .local()
                    .iter()
                    .map(|s| s.to_string())
                    .collect::<Vec<_>>()
                    .join(".");
                (local.starts_with("cu") || local == "cpu").then_some(local)
            })
            .or_else(|| self.index_variant.clone())
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    pub kind: &'static str,
    /// `file:line` of every requirement involved.
    pub places: Vec<String>,
    pub message: String,
    pub fix: String,
}

#[derive(Debug, Serialize)]
pub struct PinsReport {
    pub files: Vec<PathBuf>,
    pub requirements: usize,
    pub findings: Vec<Finding>,
    /// Includes that were not followed, and why (`-r https://…`: verify pins reads local files).
    pub not_read: Vec<String>,
}

/// The kinds of finding, as rule ids (`--select`, SARIF): the kind with `-` for spaces.
pub const RULES: &[(&str, &str)] = &[
    (
        "contradiction",
        "Two requirement files pin one distribution to versions that cannot both hold",
    ),
    (
        "cuda-variant",
        "torch, torchvision and torchaudio pinned to different CUDA variants",
    ),
    (
        "pairing",
        "A torchvision or torchaudio pin that is not released with the pinned torch",
    ),
    (
        "python",
        "The pinned torch ships no wheel for the project's Python",
    ),
    (
        "gpu",
        "The pinned torch has no kernel image for a GPU the project must run on",
    ),
    (
        "release",
        "A torch pin names a version that is not a torch release",
    ),
];

impl Finding {
    pub fn rule(&self) -> String {
        self.kind.replace(' ', "-")
    }
}

impl PinsReport {
    /// Prints the report in `format` (the table, the JSON document, or the findings).
    pub fn print(&self, format: crate::lint::Format) -> Result<()> {
        let doc = crate::output::documents::VERIFY_PINS;
        crate::lint::emit(
            format,
            "verify pins",
            doc,
            self,
            Self::table,
            Self::findings,
        )
    }

    /// Only the findings whose rule `sel` allows.
    pub fn select(&mut self, sel: &crate::lint::Selection) -> Result<()> {
        let known: Vec<String> = RULES.iter().map(|(id, _)| id.to_string()).collect();
        sel.check_known(&known, "docs/verify-pins.md")?;
        self.findings.retain(|f| sel.allows(&f.rule()));
        Ok(())
    }

    /// The findings as a linter prints them (each at its first requirement, the others
    /// related), the rules and the one-line summary.
    pub fn findings(
        &self,
    ) -> (
        Vec<crate::lint::Diagnostic>,
        Vec<crate::lint::RuleDoc>,
        String,
    ) {
        use crate::lint::{Diagnostic, Position, RuleDoc};
        // A place is `file:line` (`Pin::place`).
        let at = |place: &str| -> (PathBuf, Position) {
            match place.rsplit_once(':') {
                Some((f, l)) => (PathBuf::from(f), Position::line(l.parse().unwrap_or(1))),
                None => (PathBuf::from(place), Position::line(1)),
            }
        };
        let diags = self
            .findings
            .iter()
            .map(|f| {
                let mut places = f.places.iter().map(|p| at(p));
                let (file, start) = places.next().unwrap_or_else(|| at(""));
                Diagnostic {
                    rule: f.rule(),
                    file,
                    start,
                    end: None,
                    message: f.message.clone(),
                    help: f.fix.clone(),
                    replacement: None,
                    related: places.collect(),
                }
            })
            .collect();
        let rules = RULES
            .iter()
            .map(|(id, summary)| RuleDoc {
                id: id.to_string(),
                summary: summary.to_string(),
                help: "Make the pins agree; each finding names the fix (docs/verify-pins.md)."
                    .into(),
            })
            .collect();
        let summary = self.table().lines().next().unwrap_or_default().to_string();
        (diags, rules, summary)
    }

    pub fn table(&self) -> String {
        let mut s = format!(
            "{} requirements in {} files: {} finding(s)\n",
            self.requirements,
            self.files.len(),
            self.findings.len()
        );
        for n in &self.not_read {
            s += &format!("not read: {n}\n");
        }
        let mut t = crate::output::Table::new(["KIND", "WHERE", "FINDING"]);
        for f in &self.findings {
            // Every place is in the JSON; the table names the first few.
            let shown = match f.places.len() {
                n if n > 4 => format!("{} + {} more", f.places[..3].join(" + "), n - 3),
                _ => f.places.join(" + "),
            };
            t.row([f.kind.to_string(), shown, f.message.clone()]);
            t.row([String::new(), String::new(), format!("fix: {}", f.fix)]);
        }
        if !self.findings.is_empty() {
            s += &t.render();
        }
        s
    }
}

#[derive(Debug, Clone, Default)]
pub struct PinsRequest {
    pub path: PathBuf,
    pub gpus: Vec<String>,
    pub python: Option<Version>,
}

/// The requirement files under `path` (a directory) or `path` itself.
pub fn find_files(path: &Path) -> Result<Vec<PathBuf>> {
    match std::fs::metadata(path) {
        Err(_) => anyhow::bail!(
            "{}: no such file or directory; give a repository or a requirements file",
            path.display()
        ),
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            crate::input_file::check_regular(path)?;
            return Ok(vec![path.to_path_buf()]);
        }
    }
    let mut out = Vec::new();
    for dir in [path.to_path_buf(), path.join("requirements")] {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut names: Vec<PathBuf> = rd.flatten().map(|e| e.path()).collect();
        names.sort();
        for p in names {
            let n = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            let req =
                (n.starts_with("requirements") || n.starts_with("constraints") || dir != path)
                    && n.ends_with(".txt");
            if p.is_file() && (req || (dir == path && n == "pyproject.toml")) {
                out.push(p);
            }
        }
    }
    Ok(out)
}

/// An include line of a requirements file: where it is and what it names.
#[derive(Debug, Clone, PartialEq)]
pub struct Include {
    pub place: String,
    pub target: String,
}

/// What [`read_pins`] read: the files, their pins, and the includes it did not follow.
#[derive(Debug, Default)]
pub struct ReadPins {
    pub files: Vec<PathBuf>,
    pub pins: Vec<Pin>,
    pub not_read: Vec<String>,
}

/// The directory includes must stay in: the git work tree the path is in (a monorepo's
/// `services/api` may include `../../common/requirements.txt`), else the directory given (or the
/// file's own directory).
fn repository_of(path: &Path) -> PathBuf {
    let canon = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let dir = if canon.is_dir() {
        canon
    } else {
        canon.parent().unwrap_or(Path::new("/")).to_path_buf()
    };
    dir.ancestors()
        .find(|d| d.join(".git").exists())
        .map_or(dir.clone(), Path::to_path_buf)
}

/// Reads every pin of `files` (following `-r`/`-c` includes once each, inside `root` only).
pub fn read_pins(files: &[PathBuf], root: &Path) -> Result<ReadPins> {
    let mut out = ReadPins::default();
    let mut seen: std::collections::HashSet<PathBuf> = std::collections::HashSet::new();
    let mut queue: Vec<PathBuf> = files.to_vec();
    while let Some(f) = queue.pop() {
        let canon = std::fs::canonicalize(&f).unwrap_or_else(|_| f.clone());
        if !seen.insert(canon) {
            continue;
        }
        out.files.push(f.clone());
        let text = crate::input_file::read_text(&f, "requirements file")?;
        // pip reads a UTF-8 byte-order mark as no text.
        let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
        if f.file_name().is_some_and(|n| n == "pyproject.toml") {
            out.pins.extend(pyproject_pins(&f, text)?);
            continue;
        }
        let (p, includes) = requirements_pins(&f, text)?;
        out.pins.extend(p);
        for inc in includes {
            if inc.target.contains("://") {
                out.not_read.push(format!(
                    "{}: `{}` is a URL; verify pins reads the repository's own files (download it into the repository and include it by path to check it)",
                    inc.place, inc.target
                ));
                continue;
            }
            let dir = f.parent().unwrap_or(Path::new("."));
            let path = dir.join(&inc.target);
            let inside = std::fs::canonicalize(&path).is_ok_and(|c| c.starts_with(root));
            if path.exists() && !inside {
                anyhow::bail!(
                    "{}: `{}` includes a file outside the repository ({}); verify pins reads only files under it: give the repository that holds both",
                    inc.place,
                    inc.target,
                    root.display()
                );
            }
            if !path.exists() {
                anyhow::bail!(
                    "{}: `{}` includes {}, which does not exist; fix the include",
                    inc.place,
                    inc.target,
                    path.display()
                );
            }
            queue.push(path);
        }
    }
    out.files.sort();
    Ok(out)
}

fn parse_requirement(
    file: &Path,
    line: usize,
    text: &str,
    index_variant: Option<String>,
) -> Result<Pin> {
    let req = Requirement::<pep508_rs::VerbatimUrl>::from_str(text).map_err(|e| {
        anyhow::anyhow!(
            "{}:{line}: `{text}` is not a PEP 508 requirement: {e}",
            file.display()
        )
    })?;
    let (specifiers, index_variant) = match &req.version_or_url {
        Some(VersionOrUrl::VersionSpecifier(s)) => (Some(s.clone()), index_variant),
        // `torch @ https://…/cu118/torch-2.1.0%2Bcu118-cp310-….whl`: the wheel's file name
        // pins the version (with its variant's label) exactly, as pip installs it.
        Some(VersionOrUrl::Url(u)) => {
            let url = u.to_string();
            (
                wheel_version(&url)
                    .and_then(|v| VersionSpecifiers::from_str(&format!("=={v}")).ok()),
                index_variant.or_else(|| variant_of_url(&url)),
            )
        }
        None => (None, index_variant),
    };
    Ok(Pin {
        file: file.to_path_buf(),
        line,
        text: text.to_string(),
        name: req.name.as_ref().to_string(),
        specifiers,
        marker: req.marker,
        index_variant,
    })
}

/// The version in a wheel URL's file name (`torch-2.1.0%2Bcu118-cp310-…whl` → `2.1.0+cu118`).
fn wheel_version(url: &str) -> Option<String> {
    let name = url.split(['?', '#']).next()?.rsplit('/').next()?;
    let stem = name.strip_suffix(".whl")?;
    let version = stem.split('-').nth(1)?;
    let version = version.replace("%2B", "+").replace("%2b", "+");
    pep440_rs::Version::from_str(&version).ok()?;
    Some(version)
}

/// A CUDA variant named by a directory of the URL (`…/whl/cu118/torch-…`).
fn variant_of_url(url: &str) -> Option<String> {
    let path = url.split(['?', '#']).next()?;
    let dirs: Vec<&str> = path.split('/').collect();
    dirs[..dirs.len().saturating_sub(1)]
        .iter()
        .rev()
        .find_map(|d| variant_of_index(d))
}

/// `https://download.pytorch.org/whl/cu121` → `cu121`.
fn variant_of_index(url: &str) -> Option<String> {
    url.trim_end_matches('/')
        .rsplit('/')
        .next()
        .filter(|s| {
            (s.starts_with("cu") && s[2..].chars().all(|c| c.is_ascii_digit()) && s.len() > 2)
                || *s == "cpu"
        })
        .map(str::to_string)
}

/// The logical lines of a requirements file, as pip joins them: a line ending in `\\` goes on
/// into the next (the file's last line too: pip reads what it has), comments dropped; each with
/// its first line's number.
fn logical_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut logical = String::new();
    let mut start = 0;
    for (i, raw) in text.lines().enumerate() {
        if logical.is_empty() {
            start = i + 1;
        }
        let line = raw.split(" #").next().unwrap_or(raw);
        if let Some(cont) = line.trim_end().strip_suffix('\\') {
            logical.push_str(cont);
            logical.push(' ');
            continue;
        }
        logical.push_str(line);
        out.push((start, std::mem::take(&mut logical)));
    }
    if !logical.is_empty() {
        out.push((start, logical));
    }
    out
}

fn requirements_pins(file: &Path, text: &str) -> Result<(Vec<Pin>, Vec<Include>)> {
    let mut pins = Vec::new();
    let mut includes = Vec::new();
    let mut index = None;
    for (start, l) in logical_lines(text) {
        let l = l.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        let mut words = l.split_whitespace();
        let first = words.next().unwrap_or("");
        match first {
            "-r" | "--requirement" | "-c" | "--constraint" => {
                if let Some(f) = words.next() {
                    includes.push(Include {
                        place: format!("{}:{start}", file.display()),
                        target: f.to_string(),
                    });
                }
            }
            "-i" | "--index-url" | "--extra-index-url" => {
                index = words.next().and_then(variant_of_index)
            }
            _ if first.starts_with("--index-url=") || first.starts_with("--extra-index-url=") => {
                index = first.split_once('=').and_then(|(_, u)| variant_of_index(u))
            }
            _ if first.starts_with('-') => {}
            _ => {
                // Per-requirement options (`--hash=…`) are not part of the requirement.
                let req = l.split(" --").next().unwrap_or(l).trim();
                pins.push(parse_requirement(file, start, req, index.clone())?);
            }
        }
    }
    Ok((pins, includes))
}

fn pyproject_pins(file: &Path, text: &str) -> Result<Vec<Pin>> {
    let doc: toml::Table =
        toml::from_str(text).with_context(|| format!("{}: not valid TOML", file.display()))?;
    let mut strings: Vec<String> = Vec::new();
    let project = doc.get("project");
    let arrays = project
        .and_then(|p| p.get("dependencies"))
        .into_iter()
        .chain(
            project
                .and_then(|p| p.get("optional-dependencies"))
                .and_then(|o| o.as_table())
                .into_iter()
                .flat_map(|t| t.values()),
        )
        .chain(
            doc.get("dependency-groups")
                .and_then(|g| g.as_table())
                .into_iter()
                .flat_map(|t| t.values()),
        );
    let groups = doc.get("dependency-groups").and_then(|g| g.as_table());
    for a in arrays {
        let Some(items) = a.as_array() else {
            anyhow::bail!(
                "{}: a dependency list is {} `{}`, not an array of requirement strings (PEP 621, PEP 735): write it as [\"…\", …]",
                file.display(),
                a.type_str(),
                crate::kb::user_input::echo(&a.to_string())
            );
        };
        for v in items {
            if let Some(s) = v.as_str() {
                strings.push(s.to_string());
            } else if let Some(g) = v.get("include-group").and_then(|g| g.as_str()) {
                // PEP 735: the included group's requirements are read where it is defined.
                if !groups.is_some_and(|t| t.contains_key(g)) {
                    anyhow::bail!(
                        "{}: `{{include-group = \"{g}\"}}` names no group in [dependency-groups]; define it or fix the name",
                        file.display()
                    );
                }
            } else {
                anyhow::bail!(
                    "{}: `{}` in a dependency list is neither a requirement string nor {{include-group = \"…\"}}",
                    file.display(),
                    crate::kb::user_input::echo(&v.to_string())
                );
            }
        }
    }
    let mut pins = Vec::new();
    for s in strings {
        // The line it is written on, for the report.
        let line = text
            .lines()
            .position(|l| l.contains(&format!("\"{s}\"")) || l.contains(&format!("'{s}'")))
            .map_or(0, |i| i + 1);
        pins.push(parse_requirement(file, line, &s, None)?);
    }
    Ok(pins)
}

/// The versions a pin allows, local labels set aside (variants are checked on their own).
fn range(p: &Pin) -> Ranges<pep440_rs::Version> {
    let Some(specs) = &p.specifiers else {
        return Ranges::full();
    };
    let mut r = Ranges::full();
    for s in specs.iter() {
        let v = s.version().clone().without_local();
        let spec = VersionSpecifier::from_version(*s.operator(), v).unwrap_or_else(|_| s.clone());
        r = r.intersection(&Ranges::from(spec));
    }
    r
}

/// Runs every check over the pins under `req.path`.
pub fn check_pins(req: &PinsRequest) -> Result<PinsReport> {
    let files = find_files(&req.path)?;
    if files.is_empty() {
        anyhow::bail!(
            "{}: no requirements*.txt, constraints*.txt or pyproject.toml here; give a repository or a requirements file",
            req.path.display()
        );
    }
    let mut gpus = Vec::new();
    for g in &req.gpus {
        gpus.push(kb().resolve_gpu(g)?);
    }
    let read = read_pins(&files, &repository_of(&req.path))?;
    let pins = read.pins;
    let mut findings = contradictions(&pins);
    findings.extend(cuda_variants(&pins));
    // Pairs, Python, GPUs: for each exact torch pin.
    for t in pins.iter().filter(|p| p.name == "torch") {
        let Some(tv) = t.exact().as_ref().map(Version::from) else {
            continue;
        };
        if let Some(f) = unknown_release(t, &tv) {
            findings.push(f);
            continue;
        }
        let Some(row) = kb().torch_row(&tv) else {
            continue;
        };
        findings.extend(pairings(&pins, t, &tv, row));
        if let Some(py) = &req.python {
            // A pin whose marker rules that Python out is not installed there.
            if !marker_excludes_python(&t.marker, py) {
                findings.extend(python_wheel(t, &tv, row, py));
            }
        }
        for (name, cc) in &gpus {
            findings.extend(gpu_image(t, &tv, row, name, *cc));
        }
    }
    Ok(PinsReport {
        files: read.files,
        requirements: pins.len(),
        findings,
        not_read: read.not_read,
    })
}

/// Whether `marker` cannot hold under Python `py` (`python_version < "3.12"` for 3.12).
fn marker_excludes_python(marker: &MarkerTree, py: &Version) -> bool {
    let on = format!("python_version == '{}'", py.major_minor());
    MarkerTree::from_str(&on).is_ok_and(|py| marker.is_disjoint(&py))
}

/// An exact torch pin of a version no torch release has: past the newest the knowledge base
/// knows, or a patch its line never had. Versions older than the knowledge base are not judged.
fn unknown_release(t: &Pin, tv: &Version) -> Option<Finding> {
    // Nightlies and release candidates are real versions the knowledge base does not list.
    if t.exact().is_some_and(|v| v.any_prerelease() || v.is_post()) {
        return None;
    }
    let releases = &kb().torch;
    let oldest = releases.iter().map(|r| &r.version).min()?;
    let newest = releases.iter().map(|r| &r.version).max()?;
    let plain: Version = tv.to_string().split('+').next()?.parse().ok()?;
    if plain < *oldest || releases.iter().any(|r| r.version == plain) {
        return None;
    }
    let line: Vec<String> = releases
        .iter()
        .filter(|r| r.version.major_minor() == plain.major_minor())
        .map(|r| r.version.to_string())
        .collect();
    Some(Finding {
        kind: "release",
        places: vec![t.place()],
        message: if line.is_empty() {
            format!("torch {plain} is not a torch release (the newest this archsmith knows is {newest}): pip will find no such version")
        } else {
            format!("torch {plain} is not a torch release ({} has {})", plain.major_minor(), line.join(", "))
        },
        fix: format!(
            "pin a released version (torch=={}); if {plain} came out after this archsmith's knowledge base, update archsmith",
            line.last().map_or(newest.to_string(), Clone::clone)
        ),
    })
}

/// Pins of one distribution whose markers can both hold and whose version ranges do not meet:
/// one finding per distribution, naming every pin that meets another it cannot agree with.
/// Pins are grouped by name, and pins of one range and marker are judged once, so a file of
/// thousands of contradictory lines costs as many comparisons as it has distinct pins (each
/// stops at the first pin it contradicts), not one per pair, and one finding.
fn contradictions(pins: &[Pin]) -> Vec<Finding> {
    let mut by_name: std::collections::BTreeMap<&str, Vec<&Pin>> = Default::default();
    for p in pins {
        by_name.entry(p.name.as_str()).or_default().push(p);
    }
    by_name
        .into_values()
        .filter_map(|group| contradiction_in(&group))
        .collect()
}

/// The contradiction among the pins of one distribution, if any.
fn contradiction_in(group: &[&Pin]) -> Option<Finding> {
    // Distinct (range, marker) classes, each with its pins in file order.
    let mut classes: Vec<(Ranges<pep440_rs::Version>, &MarkerTree, Vec<&Pin>)> = Vec::new();
    let mut index: std::collections::HashMap<(String, MarkerTree), usize> = Default::default();
    for p in group {
        let r = range(p);
        let key = (format!("{r}"), p.marker.clone());
        match index.get(&key) {
            Some(&i) => classes[i].2.push(p),
            None => {
                index.insert(key, classes.len());
                classes.push((r, &p.marker, vec![p]));
            }
        }
    }
    if classes.len() < 2 {
        return None;
    }
    // Every class meets every other when all of them share a version: no pair to look for.
    let common = classes
        .iter()
        .fold(Ranges::full(), |acc, (r, _, _)| acc.intersection(r));
    if !common.is_empty() {
        return None;
    }
    let clash = |a: usize, b: usize| {
        let ((ra, ma, _), (rb, mb, _)) = (&classes[a], &classes[b]);
        !ma.is_disjoint(mb) && ra.intersection(rb).is_empty()
    };
    let involved: Vec<usize> = (0..classes.len())
        .filter(|&a| (0..classes.len()).any(|b| a != b && clash(a, b)))
        .collect();
    if involved.is_empty() {
        return None;
    }
    // In the order the files were read.
    let named: std::collections::HashSet<*const Pin> = involved
        .iter()
        .flat_map(|&i| classes[i].2.iter().map(|p| *p as *const Pin))
        .collect();
    let pins: Vec<&Pin> = group
        .iter()
        .copied()
        .filter(|p| named.contains(&(*p as *const Pin)))
        .collect();
    let places: Vec<String> = pins.iter().map(|p| p.place()).collect();
    let firsts: Vec<&Pin> = involved.iter().map(|&i| classes[i].2[0]).collect();
    let (message, fix) = contradiction_words(&firsts, &pins);
    Some(Finding {
        kind: "contradiction",
        places,
        message,
        fix,
    })
}

/// What a contradiction says: two pins named with the fix for each, or many summed up with the
/// first few of their distinct forms (`firsts`, one pin each).
fn contradiction_words(firsts: &[&Pin], pins: &[&Pin]) -> (String, String) {
    let name = &pins[0].name;
    if let ([_, _], [a, b]) = (firsts, pins) {
        let fix = match (a.exact(), b.exact()) {
            (Some(v), None) => format!(
                "widen {} to include {v}, or pin in {} a version `{}` allows",
                b.place(),
                a.place(),
                b.text
            ),
            (None, Some(v)) => format!(
                "widen {} to include {v}, or pin in {} a version `{}` allows",
                a.place(),
                b.place(),
                a.text
            ),
            _ => format!("make {} and {} agree", a.place(), b.place()),
        };
        let message = format!(
            "`{}` and `{}` allow no common version of {name}",
            a.text, b.text
        );
        return (message, fix);
    }
    let texts: Vec<String> = firsts
        .iter()
        .take(3)
        .map(|p| format!("`{}` ({})", p.text, p.place()))
        .collect();
    let more = match firsts.len().saturating_sub(3) {
        0 => String::new(),
        n => format!(" and {n} more"),
    };
    (
        format!(
            "{} requirements of {name} in {} different forms allow no common version: {}{more}",
            pins.len(),
            firsts.len(),
            texts.join(", ")
        ),
        format!("pin {name} to one version range that every file allows"),
    )
}

/// The torch packages naming different CUDA variants.
fn cuda_variants(pins: &[Pin]) -> Option<Finding> {
    let variants: Vec<(&Pin, String)> = pins
        .iter()
        .filter(|p| TORCH_FAMILY.contains(&p.name.as_str()))
        .filter_map(|p| p.variant().map(|v| (p, v)))
        .collect();
    let mut distinct: Vec<&String> = variants.iter().map(|(_, v)| v).collect();
    distinct.sort();
    distinct.dedup();
    (distinct.len() > 1).then(|| Finding {
            kind: "cuda variant",
            places: variants.iter().map(|(p, _)| p.place()).collect(),
            message: format!(
                "the torch packages name different CUDA variants: {}",
                variants.iter().map(|(p, v)| format!("{} → {v}", p.text)).collect::<Vec<_>>().join(", ")
            ),
            fix: "use one variant (one --index-url, one +cuXYZ label) for torch, torchvision and torchaudio".into(),
        })
}

/// torchvision/torchaudio pins the knowledge base does not pair with torch pin `t`.
fn pairings(pins: &[Pin], t: &Pin, tv: &Version, row: &crate::kb::TorchRow) -> Vec<Finding> {
    let mut findings = Vec::new();
    for (dist, paired) in [
        ("torchvision", &row.torchvision),
        ("torchaudio", &row.torchaudio),
    ] {
        for c in pins
            .iter()
            .filter(|p| p.name == dist && !p.marker.is_disjoint(&t.marker))
        {
            let Some(cv) = c.exact().as_ref().map(Version::from) else {
                continue;
            };
            if paired.is_empty() || paired.iter().any(|p| p.parts() == cv.parts()) {
                continue;
            }
            let want: Vec<String> = paired.iter().map(|p| p.to_string()).collect();
            findings.push(Finding {
                kind: "pairing",
                places: vec![t.place(), c.place()],
                message: format!(
                    "torch {tv} is released with {dist} {}, not {cv}",
                    want.join(" or ")
                ),
                fix: format!("{dist}=={}", want.last().cloned().unwrap_or_default()),
            });
        }
    }
    findings
}

/// No torch wheel of that release for the Python in question.
fn python_wheel(t: &Pin, tv: &Version, row: &crate::kb::TorchRow, py: &Version) -> Option<Finding> {
    let mm = py.major_minor();
    if mm >= row.python_min && mm <= row.python_max {
        return None;
    }
    Some(Finding {
        kind: "python",
        places: vec![t.place()],
        message: format!(
            "torch {tv} has no wheel for Python {mm} (it ships for {}–{})",
            row.python_min, row.python_max
        ),
        fix: format!(
            "a torch release with Python {mm} wheels, or Python {}–{}",
            row.python_min, row.python_max
        ),
    })
}

/// The torch pin's variant has no image for the GPU, and the release that would.
fn gpu_image(
    t: &Pin,
    tv: &Version,
    row: &crate::kb::TorchRow,
    name: &str,
    cc: crate::cuda_arch::Cc,
) -> Option<Finding> {
    let variant_cuda = t
        .variant()
        .and_then(|v| crate::kb::TorchVariantRow::cuda_of_tag(&v))
        .or_else(|| row.pypi_cuda.clone());
    let variant = kb()
        .torch_variants
        .iter()
        .find(|v| v.covers(tv) && Some(&v.cuda) == variant_cuda.as_ref())?;
    if variant_runs_on(variant, cc).runs {
        return None;
    }
    let would = kb()
        .torch_variants
        .iter()
        .filter(|v| variant_runs_on(v, cc).runs)
        .min_by(|a, b| a.from.cmp(&b.from).then(a.cuda.cmp(&b.cuda)));
    Some(Finding {
        kind: "gpu",
        places: vec![t.place()],
        message: format!(
            "torch {tv} ({}) has no image for {name} (CC {cc}): built for {}",
            variant.tag(),
            variant.sass.join(" ")
        ),
        fix: match would {
            Some(v) => format!(
                "torch ≥ {} with {} (index https://download.pytorch.org/whl/{})",
                v.from,
                v.tag(),
                v.tag()
            ),
            None => format!(
                "no official torch wheel runs there; build torch from source ({} build-torch)",
                crate::output::program()
            ),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requirement_lines_with_options_continuations_and_indexes() {
        let text = "# pins\n--index-url https://download.pytorch.org/whl/cu121\ntorch==2.3.1+cu121 \\\n    --hash=sha256:ab\nnumpy>=1.24 ; python_version >= \"3.9\"  # comment\n-r other.txt\n";
        let (pins, includes) = requirements_pins(Path::new("/r/requirements.txt"), text).unwrap();
        assert_eq!(pins.len(), 2);
        assert_eq!(pins[0].text, "torch==2.3.1+cu121");
        assert_eq!(pins[0].line, 3);
        assert_eq!(pins[0].variant().as_deref(), Some("cu121"));
        assert_eq!(pins[1].name, "numpy");
        assert_eq!(pins[1].index_variant.as_deref(), Some("cu121"));
        assert_eq!(
            includes,
            [Include {
                place: "/r/requirements.txt:6".into(),
                target: "other.txt".into()
            }]
        );
        let err = requirements_pins(Path::new("/r/req.txt"), "torch===\n").unwrap_err();
        assert!(format!("{err:#}").contains("/r/req.txt:1"), "{err:#}");
    }

    /// pip reads a last line that ends in `\\` as a requirement; so does verify pins.
    #[test]
    fn a_continuation_on_the_last_line_keeps_its_requirement() {
        let (pins, _) =
            requirements_pins(Path::new("/r/requirements.txt"), "numpy\ntorch==2.3.1 \\").unwrap();
        let names: Vec<(&str, usize)> = pins.iter().map(|p| (p.text.as_str(), p.line)).collect();
        assert_eq!(names, [("numpy", 1), ("torch==2.3.1", 2)]);
    }

    /// A torch wheel named by URL pins its version and variant, as pip installs it.
    #[test]
    fn a_wheel_url_pins_its_version_and_variant() {
        let p = parse_requirement(
            Path::new("x"),
            1,
            "torch @ https://download.pytorch.org/whl/cu118/torch-2.1.0%2Bcu118-cp310-cp310-linux_x86_64.whl",
            None,
        )
        .unwrap();
        assert_eq!(p.exact().unwrap().to_string(), "2.1.0+cu118");
        assert_eq!(p.variant().as_deref(), Some("cu118"));
    }

    fn pins_of(lines: &[(&str, usize, &str)]) -> Vec<Pin> {
        lines
            .iter()
            .map(|(f, l, t)| parse_requirement(Path::new(f), *l, t, None).unwrap())
            .collect()
    }

    /// Many contradictory lines of one package make one finding naming each of them; lines that
    /// agree with every other are not named; markers that cannot both hold never contradict.
    #[test]
    fn contradictions_are_grouped_per_package() {
        let lines: Vec<String> = (0..800)
            .map(|i| format!("torch==2.{}.{}", i / 10, i % 10))
            .collect();
        let pins: Vec<Pin> = lines
            .iter()
            .enumerate()
            .map(|(i, t)| parse_requirement(Path::new("r.txt"), i + 1, t, None).unwrap())
            .collect();
        let f = contradictions(&pins);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].places.len(), 800);
        assert!(
            f[0].message
                .starts_with("800 requirements of torch in 800 different forms"),
            "{}",
            f[0].message
        );
        let f = contradictions(&pins_of(&[
            ("a.txt", 1, "torch==2.3.1"),
            ("b.txt", 1, "torch==2.4.0"),
            ("c.txt", 1, "torch>=2.0"),
            ("d.txt", 1, "numpy==1.0"),
            ("e.txt", 1, "numpy==2.0 ; python_version < '3.9'"),
            ("f.txt", 1, "numpy==1.5 ; python_version >= '3.9'"),
        ]));
        let places: Vec<&Vec<String>> = f.iter().map(|f| &f.places).collect();
        // In the order read. numpy: d meets e and f, whose markers never both hold (so they do not contradict
        // each other); torch's `>=2.0` meets both of its exact pins.
        assert_eq!(
            places,
            [
                &vec!["d.txt:1".to_string(), "e.txt:1".into(), "f.txt:1".into()],
                &vec!["a.txt:1".to_string(), "b.txt:1".into()]
            ]
        );
        let f = contradictions(&pins_of(&[
            ("e.txt", 1, "numpy==2.0 ; python_version < '3.9'"),
            ("f.txt", 1, "numpy==1.5 ; python_version >= '3.9'"),
        ]));
        assert!(f.is_empty());
    }

    #[test]
    fn a_marker_that_rules_the_python_out_is_not_judged_for_it() {
        let p = pins_of(&[("r", 1, "torch==2.1.2; python_version < \"3.12\"")]);
        assert!(marker_excludes_python(
            &p[0].marker,
            &"3.12".parse().unwrap()
        ));
        assert!(!marker_excludes_python(
            &p[0].marker,
            &"3.11".parse().unwrap()
        ));
        let p = pins_of(&[("r", 1, "torch==2.1.2")]);
        assert!(!marker_excludes_python(
            &p[0].marker,
            &"3.12".parse().unwrap()
        ));
    }

    #[test]
    fn a_version_torch_never_released_is_a_finding() {
        let p = pins_of(&[
            ("r", 1, "torch==2.99.0"),
            ("r", 2, "torch==2.6.9"),
            ("r", 3, "torch==2.6.0+cu124"),
            ("r", 4, "torch==1.4.0"),
            ("r", 5, "torch==2.16.0rc1"),
        ]);
        let f: Vec<Option<&'static str>> = p
            .iter()
            .map(|p| unknown_release(p, &Version::from(&p.exact().unwrap())).map(|f| f.kind))
            .collect();
        assert_eq!(f, [Some("release"), Some("release"), None, None, None]);
    }

    /// `-r` inside the git work tree is followed (a monorepo's shared file), one that leaves it is
    /// refused before it is read (`-r /etc/passwd` printed that file's first line), a URL is listed
    /// as not read.
    #[test]
    fn includes_stay_in_the_repository_and_urls_are_not_read() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        std::fs::create_dir_all(repo.join(".git")).unwrap();
        std::fs::create_dir_all(repo.join("services/api")).unwrap();
        std::fs::write(repo.join("common.txt"), "numpy==1.26.4\n").unwrap();
        std::fs::write(tmp.path().join("outside.txt"), "secret line\n").unwrap();
        let req = repo.join("services/api/requirements.txt");
        std::fs::write(
            &req,
            "-r ../../common.txt\n-r https://example.org/req.txt\ntorch==2.6.0\n",
        )
        .unwrap();
        let read = read_pins(
            std::slice::from_ref(&req),
            &repository_of(&repo.join("services/api")),
        )
        .unwrap();
        let names: Vec<&str> = read.pins.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["torch", "numpy"]);
        assert!(
            read.not_read[0].contains("https://example.org/req.txt")
                && read.not_read[0].contains("is a URL")
        );
        std::fs::write(&req, "-r ../../../outside.txt\n").unwrap();
        let e = format!(
            "{:#}",
            read_pins(&[req], &repository_of(&repo.join("services/api"))).unwrap_err()
        );
        assert!(e.contains("includes a file outside the repository"), "{e}");
        assert!(!e.contains("secret line"), "{e}");
    }

    #[test]
    fn odd_local_labels_name_no_cuda() {
        let p = |t: &str| parse_requirement(Path::new("x"), 1, t, None).unwrap();
        for t in ["torch==2.6.0+cu", "torch==2.6.0+cuda", "torch==2.6.0+cu1"] {
            let v = p(t).variant();
            assert!(
                v.as_deref()
                    .and_then(crate::kb::TorchVariantRow::cuda_of_tag)
                    .is_none(),
                "{t}"
            );
        }
    }

    #[test]
    fn ranges_ignore_local_labels() {
        let p = |t: &str| parse_requirement(Path::new("x"), 1, t, None).unwrap();
        assert!(!range(&p("torch==2.3.1"))
            .intersection(&range(&p("torch==2.3.1+cu121")))
            .is_empty());
        assert!(range(&p("torch==2.3.1+cu121"))
            .intersection(&range(&p("torch>=2.0,<2.3")))
            .is_empty());
        assert!(!range(&p("torch>=2.0"))
            .intersection(&range(&p("torch<2.1")))
            .is_empty());
        assert_eq!(
            variant_of_index("https://download.pytorch.org/whl/cu128/"),
            Some("cu128".into())
        );
        assert_eq!(variant_of_index("https://pypi.org/simple"), None);
    }
}
