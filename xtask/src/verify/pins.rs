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
        let mut t = crate::output::Table::new(["KIND", "WHERE", "FINDING"]);
        for f in &self.findings {
            t.row([f.kind.to_string(), f.places.join(" + "), f.message.clone()]);
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
    if path.is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    if !path.is_dir() {
        anyhow::bail!(
            "{}: no such file or directory; give a repository or a requirements file",
            path.display()
        );
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

/// Reads every pin of `files` (following `-r`/`-c` includes once each).
pub fn read_pins(files: &[PathBuf]) -> Result<(Vec<PathBuf>, Vec<Pin>)> {
    let mut seen: Vec<PathBuf> = Vec::new();
    let mut pins = Vec::new();
    let mut queue: Vec<PathBuf> = files.to_vec();
    while let Some(f) = queue.pop() {
        let canon = std::fs::canonicalize(&f).unwrap_or_else(|_| f.clone());
        if seen
            .iter()
            .any(|s| std::fs::canonicalize(s).ok().as_ref() == Some(&canon))
        {
            continue;
        }
        seen.push(f.clone());
        let text =
            std::fs::read_to_string(&f).with_context(|| format!("reading {}", f.display()))?;
        if f.file_name().is_some_and(|n| n == "pyproject.toml") {
            pins.extend(pyproject_pins(&f, &text)?);
        } else {
            let (p, includes) = requirements_pins(&f, &text)?;
            pins.extend(p);
            queue.extend(includes);
        }
    }
    seen.sort();
    Ok((seen, pins))
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
    let specifiers = match &req.version_or_url {
        Some(VersionOrUrl::VersionSpecifier(s)) => Some(s.clone()),
        _ => None,
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

fn requirements_pins(file: &Path, text: &str) -> Result<(Vec<Pin>, Vec<PathBuf>)> {
    let dir = file.parent().unwrap_or(Path::new("."));
    let mut pins = Vec::new();
    let mut includes = Vec::new();
    let mut index = None;
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
        let l = std::mem::take(&mut logical);
        let l = l.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        let mut words = l.split_whitespace();
        let first = words.next().unwrap_or("");
        match first {
            "-r" | "--requirement" | "-c" | "--constraint" => {
                if let Some(f) = words.next() {
                    includes.push(dir.join(f));
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
    for a in arrays {
        for v in a.as_array().into_iter().flatten() {
            if let Some(s) = v.as_str() {
                strings.push(s.to_string());
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
    let (files, pins) = read_pins(&files)?;
    let mut findings = contradictions(&pins);
    findings.extend(cuda_variants(&pins));
    // Pairs, Python, GPUs: for each exact torch pin.
    for t in pins.iter().filter(|p| p.name == "torch") {
        let Some(tv) = t.exact().as_ref().map(Version::from) else {
            continue;
        };
        let Some(row) = kb().torch_row(&tv) else {
            continue;
        };
        findings.extend(pairings(&pins, t, &tv, row));
        if let Some(py) = &req.python {
            findings.extend(python_wheel(t, &tv, row, py));
        }
        for (name, cc) in &gpus {
            findings.extend(gpu_image(t, &tv, row, name, *cc));
        }
    }
    Ok(PinsReport {
        files,
        requirements: pins.len(),
        findings,
    })
}

/// Two pins of one distribution in different places whose markers can both hold and whose version
/// ranges do not meet.
fn contradictions(pins: &[Pin]) -> Vec<Finding> {
    let mut findings = Vec::new();
    for (i, a) in pins.iter().enumerate() {
        for b in &pins[i + 1..] {
            if a.name != b.name || a.marker.is_disjoint(&b.marker) {
                continue;
            }
            if range(a).intersection(&range(b)).is_empty() {
                findings.push(Finding {
                    kind: "contradiction",
                    places: vec![a.place(), b.place()],
                    message: format!(
                        "`{}` and `{}` allow no common version of {}",
                        a.text, b.text, a.name
                    ),
                    fix: match (a.exact(), b.exact()) {
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
                    },
                });
            }
        }
    }

    findings
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
        assert_eq!(includes, [PathBuf::from("/r/other.txt")]);
        let err = requirements_pins(Path::new("/r/req.txt"), "torch===\n").unwrap_err();
        assert!(format!("{err:#}").contains("/r/req.txt:1"), "{err:#}");
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
