//! The torch rows re-verified against the torch wheels on PyPI (`kb check --torch`).
//!
//! For every `[[torch]]` row, from PyPI's file list and one Linux x86_64 wheel of that release,
//! whose members are read by range ([`crate::pypi`]; about 1.5 MB of a 700 MB+ wheel):
//!
//! * Python range: the `cpXY` tags of the release's Linux x86_64 wheels (free-threaded `cpXYt`
//!   builds aside);
//! * default CUDA on PyPI: `torch/version.py`'s `cuda`;
//! * C++ standard: the `-std=c++NN` that `torch/utils/cpp_extension.py` passes;
//! * minimum CUDA for a source build: `public/cuda.cmake`'s "PyTorch requires CUDA X or above";
//! * both arch-list tables, compared with the `[[torch_arch_list]]` and `[[torch_cmake_arch_list]]`
//!   rows covering the release: `_get_cuda_arch_flags`' `named_arches`/`supported_arches` (and
//!   whether `native` is a keyword) from `cpp_extension.py`, and `select_compute_arch.cmake`'s three
//!   patterns and its named architectures;
//! * torchvision/torchaudio: each companion release's `Requires-Dist: torch==X` (its core metadata),
//!   or, where it pins no single release, the torch release it was uploaded alongside (the newest
//!   torch uploaded before it).
//!
//! * `[[torch_env_pin]]` evidence: whether `cpp_extension.py` imports `pkg_resources`, and (with
//!   `--libraries`, each line's newest release) whether `libtorch_python.so` was built against
//!   numpy 1.x's C API.
//!
//! Not checked here, and said so in the report: `cuda_variants` (the per-variant indexes live on
//! download.pytorch.org, not PyPI) and the archs inside `libtorch_cuda.so` (a 400 MB+ member per
//! release; `verify binary` on the wheel reads them).

use super::{CheckFailure, Compared};
use crate::kb::{KnowledgeBase, PartialSassRow, PinEvidence, TorchCmakeArchListRow, TorchRow};
use crate::output::Table;
use crate::pypi::{is_linux_x86_64, linux_wheel, python_range, IndexFile, Pypi};
use crate::version::Version;
use anyhow::{anyhow, bail, Context, Result};
use regex::Regex;
use serde::Serialize;
use std::collections::BTreeMap;

const VERSION_PY: &str = "torch/version.py";
const CPP_EXTENSION: &str = "torch/utils/cpp_extension.py";
const SELECT_COMPUTE_ARCH: &str =
    "torch/share/cmake/Caffe2/Modules_CUDA_fix/upstream/FindCUDA/select_compute_arch.cmake";
const CUDA_CMAKE: &str = "torch/share/cmake/Caffe2/public/cuda.cmake";
const COMPANIONS: [&str; 2] = ["torchvision", "torchaudio"];

/// The projects whose index pages the torch check reads (and `--record` keeps).
pub const PROJECTS: [&str; 3] = ["torch", "torchvision", "torchaudio"];

/// `_get_cuda_arch_flags`' tables, as read from `cpp_extension.py` or from a knowledge-base row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PythonTable {
    pub named: Vec<(String, String)>,
    pub supported: Vec<String>,
    pub native_keyword: bool,
}

/// `select_compute_arch.cmake`'s patterns and names, as read from the file or from a row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CmakeTable {
    pub number: String,
    pub bin_matchall: String,
    pub ptx_matchall: String,
    /// (name, SASS archs, PTX archs with `+PTX`), in the file's order.
    pub named: Vec<(String, Vec<String>, Vec<String>)>,
}

impl CmakeTable {
    fn of_row(row: &TorchCmakeArchListRow) -> CmakeTable {
        CmakeTable {
            number: row.number.pattern.clone(),
            bin_matchall: row.bin_matchall.pattern.clone(),
            ptx_matchall: row.ptx_matchall.pattern.clone(),
            named: row
                .named
                .iter()
                .map(|n| (n.name.clone(), n.bin.clone(), n.ptx.clone()))
                .collect(),
        }
    }

    /// The table as a knowledge-base row, for the report of a release whose row is wrong or missing.
    pub fn to_toml(&self, from: &str, to: &str, wheel: &str) -> String {
        let list = |v: &[String]| {
            v.iter()
                .map(|s| format!("\"{s}\""))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut out = format!(
            "[[torch_cmake_arch_list]]\nfrom = \"{from}\"\nto = \"{to}\"\nnumber = '{}'\nbin_matchall = '{}'\nptx_matchall = '{}'\nnamed = [\n",
            self.number, self.bin_matchall, self.ptx_matchall
        );
        for (name, bin, ptx) in &self.named {
            out.push_str(&format!(
                "  {{ name = \"{name}\", bin = [{}], ptx = [{}] }},\n",
                list(bin),
                list(ptx)
            ));
        }
        out.push_str(&format!(
            "]\nsource = \"{wheel}, {SELECT_COMPUTE_ARCH} [V] (kb check --torch)\"\n"
        ));
        out
    }
}

/// What one torch release's wheel and index entries say, next to its row.
#[derive(Debug, Serialize)]
pub struct ReleaseCheck {
    pub version: String,
    /// The wheel whose members were read.
    pub wheel: String,
    pub python_min: Compared<String>,
    pub python_max: Compared<String>,
    pub pypi_cuda: Compared<Option<String>>,
    pub cxx_std: Compared<String>,
    /// Absent from a row means "not recorded"; a wheel that states it makes that a difference.
    pub min_cuda_source_build: Compared<Option<String>>,
    pub torchvision: Compared<Vec<String>>,
    pub torchaudio: Compared<Vec<String>>,
    /// The `[[torch_arch_list]]` row covering the release (`2.2–2.5`), if any.
    pub python_table_row: Option<String>,
    pub python_table: Compared<Option<PythonTable>>,
    pub cmake_table_row: Option<String>,
    pub cmake_table: Compared<Option<CmakeTable>>,
    /// With `--libraries`, for the newest release of each line: the arches of `wheel_sass` that
    /// the small device libraries carry in only some containers, against `partial_sass`.
    pub partial_sass: Option<Compared<Vec<PartialSassRow>>>,
    /// The `[[torch_env_pin]]` evidence found in the wheel, against the rows covering the release
    /// (numpy's only where `libtorch_python.so` was read).
    pub env_pins: Compared<Vec<PinEvidence>>,
    pub ok: bool,
}

impl ReleaseCheck {
    /// The names of the facts that differ.
    pub fn differences(&self) -> Vec<&'static str> {
        [
            ("python_min", self.python_min.ok),
            ("python_max", self.python_max.ok),
            ("pypi_cuda", self.pypi_cuda.ok),
            ("cxx_std", self.cxx_std.ok),
            ("min_cuda_source_build", self.min_cuda_source_build.ok),
            ("torchvision", self.torchvision.ok),
            ("torchaudio", self.torchaudio.ok),
            ("torch_arch_list", self.python_table.ok),
            ("torch_cmake_arch_list", self.cmake_table.ok),
            (
                "partial_sass",
                self.partial_sass.as_ref().is_none_or(|c| c.ok),
            ),
            ("torch_env_pin", self.env_pins.ok),
        ]
        .into_iter()
        .filter(|(_, ok)| !ok)
        .map(|(name, _)| name)
        .collect()
    }
}

#[derive(Debug, Serialize)]
pub struct TorchCheckReport {
    pub checked: Vec<ReleaseCheck>,
    pub failures: Vec<CheckFailure>,
    /// Facts this check does not read, and why.
    pub not_checked: Vec<String>,
    pub ok: bool,
}

impl TorchCheckReport {
    /// 0 all matched, 1 a fact differs, 2 a release could not be fetched or read.
    pub fn exit(&self) -> crate::output::Exit {
        super::exit(&self.failures, self.checked.iter().any(|c| !c.ok))
    }

    /// One row per release (each fact and whether it matches), then what differs per release in
    /// the knowledge base's own terms, then the releases that could not be checked.
    pub fn table(&self) -> String {
        let mut t = Table::new([
            "torch",
            "python",
            "CUDA",
            "c++",
            "min CUDA",
            "vision",
            "audio",
            "py table",
            "cmake table",
            "partial SASS",
            "pins",
            "result",
        ]);
        for c in &self.checked {
            t.row(summary_row(c));
        }
        let mut out = t.render();
        for c in self.checked.iter().filter(|c| !c.ok) {
            out.push_str(&format!("\ntorch {} (read from {}):\n", c.version, c.wheel));
            for name in c.differences() {
                out.push_str(&difference(c, name));
            }
        }
        for f in &self.failures {
            out.push_str(&format!(
                "\ntorch {}: could not be checked: {}\n",
                f.version, f.error
            ));
        }
        let differ = self.checked.iter().filter(|c| !c.ok).count();
        out.push_str(&format!(
            "\n{} of {} releases checked; {} match the knowledge base, {differ} differ, {} could not be checked\n",
            self.checked.len(),
            self.checked.len() + self.failures.len(),
            self.checked.len() - differ,
            self.failures.len()
        ));
        for n in &self.not_checked {
            out.push_str(&format!("not checked: {n}\n"));
        }
        out
    }
}

/// `ok` or `DIFFERS`.
fn mark(ok: bool) -> &'static str {
    if ok {
        "ok"
    } else {
        "DIFFERS"
    }
}

/// A release's row: each fact as read, and whether it matches the knowledge base.
fn summary_row(c: &ReleaseCheck) -> [String; 12] {
    let opt = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
    let list = |v: &[String]| {
        if v.is_empty() {
            "-".to_string()
        } else {
            v.join(",")
        }
    };
    let partial = match &c.partial_sass {
        None => "-".to_string(),
        Some(p) => {
            let found: Vec<String> = p
                .tool
                .iter()
                .map(|r| format!("{} {}/{}", r.arch, r.with_image, r.containers))
                .collect();
            let found = if found.is_empty() {
                "none".to_string()
            } else {
                found.join(",")
            };
            format!("{found} {}", mark(p.ok))
        }
    };
    [
        c.version.clone(),
        format!(
            "{}–{} {}",
            c.python_min.tool,
            c.python_max.tool,
            mark(c.python_min.ok && c.python_max.ok)
        ),
        format!("{} {}", opt(&c.pypi_cuda.tool), mark(c.pypi_cuda.ok)),
        format!("{} {}", c.cxx_std.tool, mark(c.cxx_std.ok)),
        format!(
            "{} {}",
            opt(&c.min_cuda_source_build.tool),
            mark(c.min_cuda_source_build.ok)
        ),
        format!("{} {}", list(&c.torchvision.tool), mark(c.torchvision.ok)),
        format!("{} {}", list(&c.torchaudio.tool), mark(c.torchaudio.ok)),
        format!(
            "{} {}",
            c.python_table_row.as_deref().unwrap_or("no row"),
            mark(c.python_table.ok)
        ),
        format!(
            "{} {}",
            c.cmake_table_row.as_deref().unwrap_or("no row"),
            mark(c.cmake_table.ok)
        ),
        partial,
        format!("{} {}", pin_names(&c.env_pins.tool), mark(c.env_pins.ok)),
        if c.ok { "match" } else { "DIFFERS" }.to_string(),
    ]
}

/// `pkg_resources,numpy1`, or `-`.
fn pin_names(evidence: &[PinEvidence]) -> String {
    let names: Vec<&str> = evidence
        .iter()
        .map(|e| match e {
            PinEvidence::CppExtensionImportsPkgResources => "pkg_resources",
            PinEvidence::NumpyOneCApi => "numpy1",
        })
        .collect();
    if names.is_empty() {
        "-".into()
    } else {
        names.join(",")
    }
}

/// The lines that say how fact `name` of a release differs: what PyPI has and what the
/// knowledge base has; for the CMake table, the wheel's table written as a row to paste.
fn difference(c: &ReleaseCheck, name: &str) -> String {
    let show = |v: &dyn std::fmt::Debug| format!("{v:?}");
    let (read, kb) = match name {
        "python_min" => (c.python_min.tool.clone(), c.python_min.kb.clone()),
        "python_max" => (c.python_max.tool.clone(), c.python_max.kb.clone()),
        "pypi_cuda" => (show(&c.pypi_cuda.tool), show(&c.pypi_cuda.kb)),
        "cxx_std" => (c.cxx_std.tool.clone(), c.cxx_std.kb.clone()),
        "min_cuda_source_build" => (
            show(&c.min_cuda_source_build.tool),
            show(&c.min_cuda_source_build.kb),
        ),
        "torchvision" => (show(&c.torchvision.tool), show(&c.torchvision.kb)),
        "torchaudio" => (show(&c.torchaudio.tool), show(&c.torchaudio.kb)),
        "partial_sass" => match &c.partial_sass {
            Some(p) => (show(&p.tool), show(&p.kb)),
            None => return String::new(),
        },
        "torch_arch_list" => (show(&c.python_table.tool), show(&c.python_table.kb)),
        "torch_env_pin" => (show(&c.env_pins.tool), show(&c.env_pins.kb)),
        _ => return cmake_difference(c),
    };
    format!("  {name}: PyPI has {read}; the knowledge base has {kb}\n")
}

fn cmake_difference(c: &ReleaseCheck) -> String {
    let mut out = format!(
        "  torch_cmake_arch_list: row {} differs from the wheel's; the wheel's as a row:\n",
        c.cmake_table_row.as_deref().unwrap_or("(none)")
    );
    if let Some(table) = &c.cmake_table.tool {
        let mm = c
            .version
            .rsplit_once('.')
            .map_or(c.version.as_str(), |(a, _)| a);
        for l in table.to_toml(mm, mm, &c.wheel).lines() {
            out.push_str(&format!("    {l}\n"));
        }
    }
    out
}

/// The `[[torch]]` rows to check: all, or those matching a `--torch` prefix.
pub fn rows_to_check<'a>(kb: &'a KnowledgeBase, filters: &[Version]) -> Result<Vec<&'a TorchRow>> {
    let rows: Vec<&TorchRow> = kb
        .torch
        .iter()
        .filter(|r| filters.is_empty() || filters.iter().any(|f| r.version.matches_prefix(f)))
        .collect();
    if rows.is_empty() {
        let known: Vec<String> = kb.torch.iter().map(|r| r.version.to_string()).collect();
        bail!(
            "no torch row of the knowledge base matches {}; it has: {}",
            filters
                .iter()
                .map(|f| format!("--torch {f}"))
                .collect::<Vec<_>>()
                .join(", "),
            known.join(", ")
        );
    }
    Ok(rows)
}

/// Checks `rows` against PyPI. A release that cannot be read becomes a failure; the rest go on.
/// With `libraries`, also reads each line's newest release's small device libraries
/// ([`PARTIAL_LIBRARIES`], 3–80 MB each) for `partial_sass`.
pub fn check_torch(
    kb: &KnowledgeBase,
    pypi: &Pypi,
    rows: &[&TorchRow],
    libraries: bool,
    progress: bool,
) -> Result<TorchCheckReport> {
    let say = |m: String| {
        if progress {
            crate::errln!("archsmith: {m}");
        }
    };
    say("listing torch, torchvision and torchaudio on PyPI".into());
    let torch_files = pypi.files("torch")?;
    let releases = Releases::of(&torch_files);
    let oldest = rows.iter().map(|r| &r.version).min().cloned();
    let mut pairs: BTreeMap<&str, BTreeMap<Version, Vec<Version>>> = BTreeMap::new();
    for companion in COMPANIONS {
        say(format!("reading {companion}'s metadata (pins on torch)"));
        let files = pypi.files(companion)?;
        let since = oldest
            .as_ref()
            .and_then(|v| releases.first_upload(v))
            .unwrap_or_default();
        pairs.insert(companion, companion_pairs(pypi, &files, &releases, &since)?);
    }
    let mut checked = Vec::new();
    let mut failures = Vec::new();
    for row in rows {
        say(format!("checking torch {}", row.version));
        let newest_of_line = kb
            .torch
            .iter()
            .filter(|t| t.version.major_minor() == row.version.major_minor())
            .all(|t| t.version <= row.version);
        match check_release(
            kb,
            pypi,
            &torch_files,
            row,
            &pairs,
            libraries && newest_of_line,
        ) {
            Ok(c) => checked.push(c),
            Err(e) => failures.push(CheckFailure {
                version: row.version.to_string(),
                error: format!("{e:#}"),
            }),
        }
    }
    let ok = failures.is_empty() && checked.iter().all(|c| c.ok);
    Ok(TorchCheckReport {
        checked,
        failures,
        not_checked: {
            let mut n = vec![
                "cuda_variants: the per-variant indexes (cuXYZ) are on download.pytorch.org, not PyPI".to_string(),
                "wheel_sass/wheel_ptx: the archs inside libtorch_cuda.so (300 MB+ per release); `archsmith verify binary` on a downloaded wheel reads them".to_string(),
            ];
            if !libraries {
                n.push("partial_sass: the small device libraries are read with --libraries (3–80 MB per release line)".into());
                n.push("torch_env_pin numpy<2: libtorch_python.so's numpy C API is read with --libraries (20–35 MB per release line)".into());
            }
            n
        },
        ok,
    })
}

/// What one torch wheel says about itself, from four of its files read by range.
struct WheelFacts {
    /// `torch/version.py`'s `cuda`.
    pypi_cuda: Option<String>,
    /// The `-std=` cpp_extension passes.
    cxx_std: String,
    /// cpp_extension's arch-list parser table.
    python_table: PythonTable,
    /// `select_compute_arch.cmake`'s, where the wheel ships it.
    cmake_table: Option<CmakeTable>,
    /// `public/cuda.cmake`'s minimum CUDA for a source build.
    min_cuda: Option<String>,
    /// Whether `cpp_extension.py` imports `pkg_resources`.
    pkg_resources: bool,
}

impl WheelFacts {
    fn read(pypi: &Pypi, wheel: &IndexFile) -> Result<WheelFacts> {
        let members = pypi.members(
            wheel,
            &[VERSION_PY, CPP_EXTENSION, SELECT_COMPUTE_ARCH, CUDA_CMAKE],
        )?;
        let text = |i: usize, name: &str| -> Result<Option<String>> {
            members[i]
                .as_ref()
                .map(|b| {
                    String::from_utf8(b.clone())
                        .with_context(|| format!("{name} in {} is not UTF-8", wheel.filename))
                })
                .transpose()
        };
        let in_wheel = |name: &str| format!("reading {name} from {}", wheel.filename);
        let version_py = text(0, VERSION_PY)?
            .ok_or_else(|| anyhow!("{} has no {VERSION_PY}", wheel.filename))?;
        let cpp_extension = text(1, CPP_EXTENSION)?
            .ok_or_else(|| anyhow!("{} has no {CPP_EXTENSION}", wheel.filename))?;
        Ok(WheelFacts {
            pypi_cuda: parse_version_py_cuda(&version_py).with_context(|| in_wheel(VERSION_PY))?,
            cxx_std: parse_cxx_std(&cpp_extension).with_context(|| in_wheel(CPP_EXTENSION))?,
            python_table: parse_python_table(&cpp_extension)
                .with_context(|| in_wheel(CPP_EXTENSION))?,
            cmake_table: text(2, SELECT_COMPUTE_ARCH)?
                .as_deref()
                .map(|s| parse_cmake_table(s).with_context(|| in_wheel(SELECT_COMPUTE_ARCH)))
                .transpose()?,
            min_cuda: text(3, CUDA_CMAKE)?.as_deref().and_then(parse_min_cuda),
            pkg_resources: imports_pkg_resources(&cpp_extension),
        })
    }
}

fn check_release(
    kb: &KnowledgeBase,
    pypi: &Pypi,
    files: &[IndexFile],
    row: &TorchRow,
    pairs: &BTreeMap<&str, BTreeMap<Version, Vec<Version>>>,
    libraries: bool,
) -> Result<ReleaseCheck> {
    let version = row.version.to_string();
    let linux: Vec<&IndexFile> = files
        .iter()
        .filter(|f| f.wheel_version() == Some(version.as_str()) && is_linux_x86_64(f))
        .collect();
    let (py_min, py_max) = python_range(&linux)
        .ok_or_else(|| anyhow!("PyPI lists no Linux x86_64 CPython wheel of torch {version}"))?;
    let wheel = linux_wheel(files, &row.version)
        .ok_or_else(|| anyhow!("no Linux x86_64 CPython wheel of torch {version}"))?;
    let facts = WheelFacts::read(pypi, wheel)?;
    let companions = |name: &str, kb_list: &[Version]| {
        let found: Vec<String> = pairs
            .get(name)
            .and_then(|m| m.get(&row.version))
            .map(|v| v.iter().map(ToString::to_string).collect())
            .unwrap_or_default();
        Compared::new(found, kb_list.iter().map(ToString::to_string).collect())
    };
    let py_row = kb.torch_arch_list(&row.version);
    let cm_row = kb.torch_cmake_arch_list(&row.version);
    let range = |from: &Version, to: &Version| {
        if from == to {
            from.to_string()
        } else {
            format!("{from}–{to}")
        }
    };
    let check = ReleaseCheck {
        version: version.clone(),
        wheel: wheel.filename.clone(),
        python_min: Compared::new(py_min.to_string(), row.python_min.to_string()),
        python_max: Compared::new(py_max.to_string(), row.python_max.to_string()),
        pypi_cuda: Compared::new(
            facts.pypi_cuda,
            row.pypi_cuda.as_ref().map(ToString::to_string),
        ),
        cxx_std: Compared::new(facts.cxx_std, row.cxx_std.clone()),
        min_cuda_source_build: Compared::new(
            facts.min_cuda,
            row.min_cuda_source_build.as_ref().map(ToString::to_string),
        ),
        torchvision: companions("torchvision", &row.torchvision),
        torchaudio: companions("torchaudio", &row.torchaudio),
        python_table_row: py_row.map(|r| range(&r.from, &r.to)),
        python_table: Compared::new(
            Some(facts.python_table),
            py_row.map(|r| PythonTable {
                named: r.named.clone(),
                supported: r.supported.clone(),
                native_keyword: r.native_keyword,
            }),
        ),
        cmake_table_row: cm_row.map(|r| range(&r.from, &r.to)),
        cmake_table: Compared::new(facts.cmake_table, cm_row.map(CmakeTable::of_row)),
        env_pins: env_pin_evidence(kb, pypi, wheel, row, facts.pkg_resources, libraries)?,
        partial_sass: if libraries {
            Some(Compared::new(
                read_partial_sass(kb, pypi, wheel, row)?,
                row.partial_sass.clone(),
            ))
        } else {
            None
        },
        ok: false,
    };
    let ok = check.differences().is_empty();
    Ok(ReleaseCheck { ok, ..check })
}

/// The pin evidence of one wheel against the knowledge base's rows for its release; numpy's
/// C API is read (a 20–35 MB member) only with `libraries`.
fn env_pin_evidence(
    kb: &KnowledgeBase,
    pypi: &Pypi,
    wheel: &IndexFile,
    row: &TorchRow,
    pkg_resources: bool,
    libraries: bool,
) -> Result<Compared<Vec<PinEvidence>>> {
    let mut found = Vec::new();
    if pkg_resources {
        found.push(PinEvidence::CppExtensionImportsPkgResources);
    }
    if libraries {
        let bytes = pypi
            .member_uncached(wheel, LIBTORCH_PYTHON)?
            .ok_or_else(|| anyhow!("{} has no {LIBTORCH_PYTHON}", wheel.filename))?;
        if numpy_c_api(&bytes) == Some(1) {
            found.push(PinEvidence::NumpyOneCApi);
        }
    }
    let expected = kb
        .torch_env_pins(&row.version)
        .into_iter()
        .map(|p| p.evidence)
        .filter(|e| libraries || *e != PinEvidence::NumpyOneCApi)
        .collect();
    Ok(Compared::new(found, expected))
}

const LIBTORCH_PYTHON: &str = "torch/lib/libtorch_python.so";

/// Whether a `cpp_extension.py` imports `pkg_resources` (in code, not a comment).
pub fn imports_pkg_resources(text: &str) -> bool {
    static RE: std::sync::LazyLock<Regex> = std::sync::LazyLock::new(|| {
        Regex::new(r"(?m)^[ \t]*(?:from[ \t]+pkg_resources[ \t.]|import[ \t]+pkg_resources\b)")
            .expect("pkg_resources pattern")
    });
    RE.is_match(text)
}

/// The numpy C API major `libtorch_python.so` was compiled against: numpy 2's headers import
/// `numpy._core._multiarray_umath` (falling back to `numpy.core`), numpy 1.x's only `numpy.core`.
pub fn numpy_c_api(library: &[u8]) -> Option<u32> {
    let has = |needle: &[u8]| library.windows(needle.len()).any(|w| w == needle);
    if has(b"numpy._core._multiarray_umath") {
        Some(2)
    } else if has(b"numpy.core._multiarray_umath") {
        Some(1)
    } else {
        None
    }
}

/// The small device libraries whose partial coverage `--libraries` reads (libtorch_cuda.so, the
/// big one, is not among them).
pub const PARTIAL_LIBRARIES: [&str; 2] = ["libtorch_cuda_linalg.so", "libtorch_nvshmem.so"];

/// For each arch of the row's `wheel_sass`, the small device libraries that carry it in some but
/// not all of their containers, with the origin of the others' kernels.
fn read_partial_sass(
    kb: &KnowledgeBase,
    pypi: &Pypi,
    wheel: &IndexFile,
    row: &TorchRow,
) -> Result<Vec<PartialSassRow>> {
    use crate::binary::{audit_elf, kernel_names::container_kernels, Kind};
    let mut out = Vec::new();
    for library in PARTIAL_LIBRARIES {
        let member = format!("torch/lib/{library}");
        let Some(bytes) = pypi.member_uncached(wheel, &member)? else {
            continue;
        };
        let audit = audit_elf(&bytes)
            .with_context(|| format!("reading {member} from {}", wheel.filename))?;
        let Some(section) = audit.counted() else {
            continue;
        };
        let all: std::collections::BTreeSet<usize> =
            section.container_images().into_keys().collect();
        for arch in &row.wheel_sass {
            let with: std::collections::BTreeSet<usize> = section
                .images
                .iter()
                .filter(|i| {
                    i.kind == Kind::Elf && i.arch.arch().is_some_and(|a| a.to_string() == *arch)
                })
                .map(|i| i.container)
                .collect();
            if with.is_empty() || with.len() == all.len() {
                continue;
            }
            let others: std::collections::BTreeSet<usize> =
                all.difference(&with).copied().collect();
            let kernels = container_kernels(&bytes, &others)
                .with_context(|| format!("reading the kernels of {member}"))?;
            let origin = kb
                .kernel_origin(kernels.values().flatten().map(String::as_str))
                .map(|o| o.name.clone());
            out.push(PartialSassRow {
                library: library.to_string(),
                arch: arch.clone(),
                containers: all.len(),
                with_image: with.len(),
                origin,
            });
        }
    }
    Ok(out)
}

/// Each torch release and the time its first file was uploaded (RFC 3339, sorts as text).
struct Releases(BTreeMap<Version, String>);

impl Releases {
    fn of(files: &[IndexFile]) -> Releases {
        let mut first: BTreeMap<Version, String> = BTreeMap::new();
        for f in files {
            let (Some(v), Some(t)) = (f.wheel_version(), f.upload_time.as_ref()) else {
                continue;
            };
            let Ok(v) = v.parse::<Version>() else {
                continue;
            };
            if v.is_prerelease() {
                continue;
            }
            let slot = first.entry(v).or_insert_with(|| t.clone());
            if t < slot {
                *slot = t.clone();
            }
        }
        Releases(first)
    }

    fn first_upload(&self, v: &Version) -> Option<String> {
        self.0.get(v).cloned()
    }

    /// The newest release uploaded at or before `time`.
    fn alongside(&self, time: &str) -> Option<&Version> {
        self.0
            .iter()
            .filter(|(_, t)| t.as_str() <= time)
            .max_by(|a, b| a.1.cmp(b.1))
            .map(|(v, _)| v)
    }

    /// The torch releases a companion uploaded at `time` is built for: its `==X` pin; the
    /// releases its range admits that existed when it was uploaded (0.29.2's `torch>=2.14.0`,
    /// uploaded with 2.15.0: 2.14.0, 2.14.1, 2.15.0 — not a later torch it could not have been
    /// tested with); with no requirement on torch, the release uploaded alongside it.
    fn paired_with(
        &self,
        specifiers: Option<&pep440_rs::VersionSpecifiers>,
        time: &str,
    ) -> Vec<&Version> {
        let Some(specs) = specifiers else {
            return self.alongside(time).into_iter().collect();
        };
        self.0
            .iter()
            .filter(|(_, t)| t.as_str() <= time)
            .map(|(v, _)| v)
            .filter(|v| {
                v.to_string()
                    .parse::<pep440_rs::Version>()
                    .is_ok_and(|p| specs.contains(&p))
            })
            .collect()
    }
}

/// torch release → the companion releases built for it: those pinning `torch==X`, and those
/// pinning nothing exact paired with the torch release uploaded alongside them. Companion
/// releases uploaded before `since` are not read.
fn companion_pairs(
    pypi: &Pypi,
    files: &[IndexFile],
    torch: &Releases,
    since: &str,
) -> Result<BTreeMap<Version, Vec<Version>>> {
    let mut by_version: BTreeMap<Version, Vec<&IndexFile>> = BTreeMap::new();
    for f in files {
        if let Some(v) = f.wheel_version().and_then(|v| v.parse::<Version>().ok()) {
            if !v.is_prerelease() && !f.is_yanked() {
                by_version.entry(v).or_default().push(f);
            }
        }
    }
    let mut out: BTreeMap<Version, Vec<Version>> = BTreeMap::new();
    for (v, fs) in by_version {
        let uploaded = fs
            .iter()
            .filter_map(|f| f.upload_time.clone())
            .min()
            .unwrap_or_default();
        if uploaded.as_str() < since {
            continue;
        }
        // A Linux x86_64 wheel, else a pure-Python one: its pin is the one a Linux user gets.
        let Some(file) = fs
            .iter()
            .find(|f| is_linux_x86_64(f))
            .or_else(|| fs.iter().find(|f| f.filename.ends_with("-none-any.whl")))
        else {
            continue;
        };
        let metadata = pypi.metadata(file)?;
        let requires = crate::python::requirements::requires_dist(&file.filename, &metadata)?;
        let specifiers = requires
            .iter()
            .filter(|r| r.name.as_ref() == "torch")
            .find_map(|r| match &r.version_or_url {
                Some(pep508_rs::VersionOrUrl::VersionSpecifier(s)) if !s.is_empty() => Some(s),
                _ => None,
            });
        for t in torch.paired_with(specifiers, &uploaded) {
            out.entry(t.clone()).or_default().push(v.clone());
        }
    }
    Ok(out)
}

/// `cuda = '12.4'` / `cuda: Optional[str] = '12.4'` / `cuda = None` of `torch/version.py`.
pub fn parse_version_py_cuda(text: &str) -> Result<Option<String>> {
    let re = Regex::new(r#"(?m)^cuda\s*(?::[^=]*)?=\s*(?:'([^']*)'|"([^"]*)"|(None))\s*$"#)
        .expect("valid regex");
    let caps = re
        .captures(text)
        .ok_or_else(|| anyhow!("no `cuda = …` assignment"))?;
    Ok(caps
        .get(1)
        .or_else(|| caps.get(2))
        .map(|m| m.as_str().to_string()))
}

/// `c++17` from the quoted `'-std=c++17'` flags `cpp_extension.py` passes; they must agree.
/// Documentation is not a flag: ``-std=c++17`` in prose and doctest lines (`>>>`, `...`; 2.7's
/// SyclExtension example passes `-std=c++20`) are not counted.
pub fn parse_cxx_std(text: &str) -> Result<String> {
    let re = Regex::new(r#"['"]-std=(c\+\+\d+)['"]"#).expect("valid regex");
    let mut found: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim_start().starts_with(">>>") && !l.trim_start().starts_with("..."))
        .flat_map(|l| {
            re.captures_iter(l)
                .filter_map(|c| c.get(1).map(|m| m.as_str()))
        })
        .collect();
    found.sort_unstable();
    found.dedup();
    match found.as_slice() {
        [one] => Ok(one.to_string()),
        [] => bail!("no '-std=c++NN' flag"),
        many => bail!("more than one '-std=' flag: {}", many.join(", ")),
    }
}

/// `named_arches` and `supported_arches` of `_get_cuda_arch_flags`, and whether `native` is a keyword.
pub fn parse_python_table(text: &str) -> Result<PythonTable> {
    let body = |start: &str, end: &str| -> Result<&str> {
        let at = text.find(start).ok_or_else(|| anyhow!("no `{start}`"))? + start.len();
        let len = text[at..]
            .find(end)
            .ok_or_else(|| anyhow!("`{start}` does not end with `{end}`"))?;
        Ok(&text[at..at + len])
    };
    let pair = Regex::new(r#"\(\s*'([^']*)'\s*,\s*'([^']*)'\s*\)"#).expect("valid regex");
    let named: Vec<(String, String)> = pair
        .captures_iter(body("named_arches = collections.OrderedDict([", "])")?)
        .map(|c| (c[1].to_string(), c[2].to_string()))
        .collect();
    let item = Regex::new(r"'([^']*)'").expect("valid regex");
    let supported: Vec<String> = item
        .captures_iter(body("supported_arches = [", "]")?)
        .map(|c| c[1].to_string())
        .collect();
    if named.is_empty() || supported.is_empty() {
        bail!("named_arches or supported_arches is empty");
    }
    let native = Regex::new(r#"_arch_list\s*==\s*['"]native['"]"#).expect("valid regex");
    Ok(PythonTable {
        named,
        supported,
        native_keyword: native.is_match(text),
    })
}

/// CMake's string escapes undone (`\\.` in the file is the regex `\.`).
fn cmake_unescape(s: &str) -> String {
    s.replace("\\\\", "\u{0}")
        .replace("\\\"", "\"")
        .replace('\u{0}', "\\")
}

/// The three patterns and the named architectures of `select_compute_arch.cmake`.
pub fn parse_cmake_table(text: &str) -> Result<CmakeTable> {
    let number = Regex::new(r#"if\(arch_name MATCHES "(\^[^"]*)"\)"#).expect("valid regex");
    let matchall = |var: &str| {
        Regex::new(&format!(r#"string\(REGEX MATCHALL "([^"]*)"\s+{var}\s"#)).expect("valid regex")
    };
    let get = |re: &Regex, what: &str| -> Result<String> {
        re.captures(text)
            .map(|c| cmake_unescape(&c[1]))
            .ok_or_else(|| anyhow!("no {what}"))
    };
    let branch =
        Regex::new(r#"(?:else)?if\(\$\{arch_name\} STREQUAL "([^"]+)"\)"#).expect("valid regex");
    let set = |var: &str| {
        Regex::new(&format!(r"set\({var}((?:\s+[0-9][^\s)]*)*)\s*\)")).expect("valid regex")
    };
    let (set_bin, set_ptx) = (set("arch_bin"), set("arch_ptx"));
    let heads: Vec<(usize, usize, String)> = branch
        .captures_iter(text)
        .filter_map(|c| {
            let m = c.get(0)?;
            Some((m.start(), m.end(), c[1].to_string()))
        })
        .collect();
    let mut named = Vec::new();
    for (i, (_, end, name)) in heads.iter().enumerate() {
        // The branch's body ends at the next branch, or at the `else()` after the last one.
        let stop = heads.get(i + 1).map_or_else(
            || text[*end..].find("else()").map_or(text.len(), |n| end + n),
            |next| next.0,
        );
        let body = &text[*end..stop];
        let values = |re: &Regex| -> Vec<String> {
            let mut v: Vec<String> = Vec::new();
            for c in re.captures_iter(body) {
                for x in c[1].split_whitespace() {
                    if !v.iter().any(|y| y == x) {
                        v.push(x.to_string());
                    }
                }
            }
            v
        };
        named.push((name.clone(), values(&set_bin), values(&set_ptx)));
    }
    if named.is_empty() {
        bail!("no named architectures (`if(${{arch_name}} STREQUAL \"…\")`)");
    }
    Ok(CmakeTable {
        number: get(&number, "`if(arch_name MATCHES \"^…\")`")?,
        bin_matchall: get(&matchall("cuda_arch_bin"), "MATCHALL for cuda_arch_bin")?,
        ptx_matchall: get(&matchall("cuda_arch_ptx"), "MATCHALL for cuda_arch_ptx")?,
        named,
    })
}

/// `11.0` of `message(FATAL_ERROR "PyTorch requires CUDA 11.0 or above.")`.
pub fn parse_min_cuda(text: &str) -> Option<String> {
    let re = Regex::new(r"PyTorch requires CUDA (\d+(?:\.\d+)*) or above").expect("valid regex");
    re.captures(text).map(|c| c[1].to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_py_forms() {
        assert_eq!(
            parse_version_py_cuda("__version__ = '1.12.1+cu102'\ncuda = '10.2'\n")
                .unwrap()
                .as_deref(),
            Some("10.2")
        );
        assert_eq!(
            parse_version_py_cuda("cuda: Optional[str] = '12.4'\n")
                .unwrap()
                .as_deref(),
            Some("12.4")
        );
        assert_eq!(
            parse_version_py_cuda("cuda: Optional[str] = None\n").unwrap(),
            None
        );
        assert!(parse_version_py_cuda("hip = None\n").is_err());
    }

    #[test]
    fn cxx_std_counts_flags_not_documentation() {
        let t = "minimum flags (e.g. ``-std=c++14``)\ncflags = ['-fPIC', '-std=c++17']\ncuda.append('-std=c++17')\n        ...   extra_compile_args={'cxx': ['-g', '-std=c++20']})\n";
        assert_eq!(parse_cxx_std(t).unwrap(), "c++17");
        assert!(parse_cxx_std("x = ['-std=c++17', '-std=c++20']").is_err());
    }

    #[test]
    fn cmake_table_with_its_patterns_and_bodies() {
        let t = r#"
    if(arch_name MATCHES "(.*)\\+PTX$")
    if(arch_name MATCHES "^([0-9]\\.[0-9](\\([0-9]\\.[0-9]\\))?)$")
      if(${arch_name} STREQUAL "Kepler+Tesla")
        set(arch_bin 3.7)
      elseif(${arch_name} STREQUAL "Volta")
        set(arch_bin 7.0 7.0)
        set(arch_ptx 7.0)
      else()
        message(SEND_ERROR "Unknown")
  string(REGEX MATCHALL "[0-9()]+" cuda_arch_bin "${cuda_arch_bin}")
  string(REGEX MATCHALL "[0-9]+"   cuda_arch_ptx "${cuda_arch_ptx}")
"#;
        let table = parse_cmake_table(t).unwrap();
        assert_eq!(table.number, r"^([0-9]\.[0-9](\([0-9]\.[0-9]\))?)$");
        assert_eq!(table.bin_matchall, "[0-9()]+");
        assert_eq!(table.ptx_matchall, "[0-9]+");
        assert_eq!(
            table.named,
            [
                ("Kepler+Tesla".to_string(), vec!["3.7".to_string()], vec![]),
                (
                    "Volta".to_string(),
                    vec!["7.0".to_string()],
                    vec!["7.0".to_string()]
                ),
            ]
        );
        // The pattern as read is one the knowledge base can load.
        let row = table.to_toml("1.12", "1.12", "w.whl");
        assert!(
            row.contains(r"number = '^([0-9]\.[0-9](\([0-9]\.[0-9]\))?)$'"),
            "{row}"
        );
    }

    #[test]
    fn python_table_and_native() {
        let t = "    named_arches = collections.OrderedDict([\n        ('Kepler+Tesla', '3.7'),\n        ('Ampere', '8.0;8.6+PTX'),\n    ])\n\n    supported_arches = ['3.5', '8.0',\n   '8.6']\n    if not _arch_list or _arch_list == \"native\":\n";
        let table = parse_python_table(t).unwrap();
        assert_eq!(table.named.len(), 2);
        assert_eq!(table.supported, ["3.5", "8.0", "8.6"]);
        assert!(table.native_keyword);
    }

    #[test]
    fn pkg_resources_in_code_not_in_comments() {
        assert!(imports_pkg_resources(
            "import os\nfrom pkg_resources import packaging  # type: ignore\n"
        ));
        assert!(imports_pkg_resources("    import pkg_resources\n"));
        assert!(!imports_pkg_resources(
            "# from pkg_resources import packaging\nfrom packaging import version\n"
        ));
        assert!(!imports_pkg_resources("import pkg_resources_extra\n"));
    }

    #[test]
    fn numpy_c_api_from_the_module_names() {
        assert_eq!(
            numpy_c_api(b"\0numpy._core._multiarray_umath\0numpy.core._multiarray_umath\0"),
            Some(2)
        );
        assert_eq!(numpy_c_api(b"\0numpy.core._multiarray_umath\0"), Some(1));
        assert_eq!(numpy_c_api(b"no numpy here"), None);
    }
}
