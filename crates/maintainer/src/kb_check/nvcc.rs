//! The knowledge base's nvcc facts re-verified against NVIDIA's real wheels (`cargo xtask kb check`).
//!
//! For every `nvidia-cuda-nvcc` 13.x release on PyPI (or those named with `--cuda`) this downloads
//! the wheel into [`paths::downloads_dir`] (once; later runs reuse it), unpacks `bin/nvcc` and
//! `bin/nvcc.profile` into a temporary directory and asks nvcc itself:
//!
//! * `--list-gpu-code` gives the plain `sm_XY` targets;
//! * `--help`'s "Allowed values" for `--gpu-code` gives every `sm_*` target including `a`/`f`
//!   (`--list-gpu-code` prints only the plain ones);
//!
//! and reads `crt/host_config.h` from the matching `nvidia-cuda-crt` wheel for the newest GCC and
//! Clang majors nvcc accepts. Each answer is compared with `[[target]]` and `[[cuda]]` rows.
//!
//! `--cuda 12` / `--cuda 11.8` check CUDA 11.7–12.9 instead: their `nvidia-cuda-nvcc-cu12/-cu11`
//! wheels carry no nvcc, only `ptxas`. Which wheel holds which tool, under which prefix, is the
//! knowledge base's `[[cuda_major]]` packaging rows (whose `--help` lists the same `sm_*` targets under
//! `--gpu-name`) and `crt/host_config.h`.
//!
//! Exit status: 0 all match, 1 a fact differs, 2 something could not be fetched or read.

use super::{CheckFailure, Compared};
use crate::cuda_arch::{Arch, Variant};
use crate::kb::{kb, CompilerTool, CudaMajorRow, HostCompilerLimits, KnowledgeBase};
use crate::output::Table;
use crate::process::Cmd;
use crate::version::Version;
use anyhow::{anyhow, bail, Context, Result};
use fs_err as fs;
use serde::Serialize;
use std::collections::BTreeSet;
use std::path::Path;

/// A CUDA major's packaging row, or an error saying which majors PyPI has compilers for.
fn packaging(kb: &KnowledgeBase, major: u32) -> Result<&CudaMajorRow> {
    kb.cuda_major(major).with_context(|| {
        format!(
            "PyPI has compiler wheels only for {}, so CUDA {major} cannot be checked",
            majors_on_pypi(kb)
        )
    })
}

/// `CUDA 11.x (ptxas), 12.x (ptxas), 13.x (nvcc)`, from the knowledge base's packaging rows.
fn majors_on_pypi(kb: &KnowledgeBase) -> String {
    let majors: Vec<String> = kb
        .cuda_majors
        .iter()
        .map(|m| format!("{}.x ({})", m.major, m.compiler_tool.name()))
        .collect();
    format!("CUDA {}", majors.join(", "))
}

/// What one release's tools said, compared with the knowledge base.
#[derive(Debug, Serialize)]
pub struct VersionCheck {
    pub version: String,
    /// `nvcc` (CUDA 13) or `ptxas` (CUDA 11/12 wheels, which have no nvcc).
    pub asked: &'static str,
    /// Plain `sm_XY` targets (nvcc `--list-gpu-code`, or ptxas `--help`) against the plain rows.
    pub plain_targets: Compared<Vec<String>>,
    /// `a`/`f` targets (nvcc `--help` for `--gpu-code`, ptxas `--help` for `--gpu-name`) against
    /// the `a`/`f` rows.
    pub variant_targets: Compared<Vec<String>>,
    /// For nvcc: whether the plain targets in `--help` equal `--list-gpu-code` (nvcc agreeing with
    /// itself); absent for ptxas, which has only the one list.
    pub lists_agree: Option<bool>,
    pub max_gcc: Compared<Option<u32>>,
    pub max_clang: Compared<Option<u32>>,
    /// The PTX ISA its ptxas reads at most ("current version is '8.4'"), against `ptx_isa`.
    pub ptx_isa: Compared<Option<String>>,
    pub ok: bool,
}

#[derive(Debug, Serialize)]
pub struct CheckReport {
    pub checked: Vec<VersionCheck>,
    pub failures: Vec<CheckFailure>,
    /// True when every release was checked and every fact matched.
    pub ok: bool,
}

impl CheckReport {
    /// 0 all matched, 1 a mismatch, 2 a release could not be fetched or read.
    pub fn exit(&self) -> crate::output::Exit {
        super::exit(&self.failures, self.checked.iter().any(|c| !c.ok))
    }
}

/// Lists the compiler wheels' index pages (`pypi`: recorded, or today's) for the CUDA majors
/// `filters` name (13 when none) and keeps the matching releases.
pub fn releases_to_check(filters: &[Version], pypi: &crate::pypi::Pypi) -> Result<Vec<Version>> {
    let kb = kb();
    for f in filters {
        packaging(kb, f.major()).with_context(|| format!("--cuda {f}"))?;
    }
    let mut majors: Vec<u32> = filters.iter().map(Version::major).collect();
    if majors.is_empty() {
        majors.push(13);
    }
    majors.sort_unstable();
    majors.dedup();
    let mut available = Vec::new();
    for row in majors.into_iter().filter_map(|m| kb.cuda_major(m)) {
        available.extend(released_versions(&pypi.files(&row.compiler_wheel)?));
    }
    select_versions(&available, filters)
}

/// The versions an index page has a wheel of, not yanked and not a pre-release (what `pip index
/// versions` lists).
fn released_versions(files: &[crate::pypi::IndexFile]) -> Vec<Version> {
    files
        .iter()
        .filter(|f| !f.is_yanked())
        .filter_map(|f| f.wheel_version())
        .filter(|v| v.bytes().all(|b| b.is_ascii_digit() || b == b'.'))
        .filter_map(|v| v.parse().ok())
        .collect()
}

/// Checks each release in turn; one that cannot be fetched or read becomes a failure, the rest go on.
pub fn check_versions(kb: &KnowledgeBase, versions: &[Version], progress: bool) -> CheckReport {
    let mut checked = Vec::new();
    let mut failures = Vec::new();
    for v in versions {
        if progress {
            crate::errln!("archsmith: checking CUDA {v}");
        }
        match check_one(kb, v) {
            Ok(c) => checked.push(c),
            Err(e) => failures.push(CheckFailure {
                version: v.to_string(),
                error: format!("{e:#}"),
            }),
        }
    }
    let ok = failures.is_empty() && checked.iter().all(|c| c.ok);
    CheckReport {
        checked,
        failures,
        ok,
    }
}

/// The releases to check, oldest first: those matching a `--cuda` prefix, or every 13.x if none.
pub fn select_versions(available: &[Version], filters: &[Version]) -> Result<Vec<Version>> {
    let mut out: Vec<Version> = available
        .iter()
        .filter(|v| kb().cuda_major(v.major()).is_some())
        .filter(|v| {
            if filters.is_empty() {
                v.major() == 13
            } else {
                filters.iter().any(|f| v.matches_prefix(f))
            }
        })
        .cloned()
        .collect();
    out.sort();
    out.dedup();
    if out.is_empty() {
        let shown: Vec<String> = available.iter().map(|v| v.to_string()).collect();
        let wanted: Vec<String> = filters.iter().map(|v| format!("--cuda {v}")).collect();
        bail!(
            "no CUDA compiler wheel on PyPI matches {}; PyPI has: {}",
            if wanted.is_empty() {
                "13.x".to_string()
            } else {
                wanted.join(", ")
            },
            shown.join(", ")
        );
    }
    Ok(out)
}

/// What one release's tools report.
struct ToolFacts {
    /// nvcc `--list-gpu-code` (CUDA 13 only).
    listed: Option<BTreeSet<Arch>>,
    /// Every `sm_*` in the tool's `--help` "Allowed values".
    allowed: BTreeSet<Arch>,
    limits: HostCompilerLimits,
    /// ptxas's "current version" of the PTX ISA.
    ptx_isa: Version,
}

fn check_one(kb: &KnowledgeBase, version: &Version) -> Result<VersionCheck> {
    let row = packaging(kb, version.major())?;
    let tmp = tempfile::Builder::new()
        .prefix("archsmith-kb-check-")
        .tempdir()
        .context("creating a temporary directory")?;
    let facts = match row.compiler_tool {
        CompilerTool::Nvcc => ask_nvcc(row, version, tmp.path())?,
        CompilerTool::Ptxas => ask_ptxas(row, version, tmp.path())?,
    };

    let kb_set: BTreeSet<Arch> = kb.cuda_targets(version).into_iter().collect();
    let split = |set: &BTreeSet<Arch>| -> (BTreeSet<Arch>, BTreeSet<Arch>) {
        set.iter().partition(|a| a.variant == Variant::Plain)
    };
    let names = |set: &BTreeSet<Arch>| set.iter().map(|a| a.sm()).collect::<Vec<_>>();
    let (kb_plain, kb_variants) = split(&kb_set);
    let (help_plain, help_variants) = split(&facts.allowed);
    let tool_plain = facts.listed.as_ref().unwrap_or(&help_plain);

    let kb_limits = kb
        .cuda_row(version)
        .map(|r| r.host_compiler_limits(version))
        .unwrap_or(HostCompilerLimits {
            max_gcc: None,
            max_clang: None,
        });
    let plain_targets = Compared::new(names(tool_plain), names(&kb_plain));
    let variant_targets = Compared::new(names(&help_variants), names(&kb_variants));
    let lists_agree = facts.listed.as_ref().map(|l| *l == help_plain);
    let max_gcc = Compared::new(facts.limits.max_gcc, kb_limits.max_gcc);
    let max_clang = Compared::new(facts.limits.max_clang, kb_limits.max_clang);
    let ptx_isa = Compared::new(
        Some(facts.ptx_isa.to_string()),
        kb.cuda_row(version)
            .and_then(|r| r.ptx_isa.as_ref())
            .map(ToString::to_string),
    );
    let ok = plain_targets.ok
        && variant_targets.ok
        && lists_agree != Some(false)
        && max_gcc.ok
        && max_clang.ok
        && ptx_isa.ok;
    Ok(VersionCheck {
        version: version.to_string(),
        asked: row.compiler_tool.name(),
        plain_targets,
        variant_targets,
        lists_agree,
        max_gcc,
        max_clang,
        ptx_isa,
        ok,
    })
}

fn ask_nvcc(row: &CudaMajorRow, version: &Version, tmp: &Path) -> Result<ToolFacts> {
    let prefix = &row.wheel_prefix;
    let nvcc_wheel = crate::downloads::download_wheel(&row.compiler_wheel, version)?;
    let crt_wheel = crate::downloads::download_wheel(&row.crt_wheel, version)?;
    let bin = tmp.join("bin");
    fs::create_dir_all(&bin)?;
    // nvcc reads nvcc.profile next to itself.
    for name in ["nvcc", "nvcc.profile", "ptxas"] {
        extract(
            &nvcc_wheel,
            &format!("{prefix}/bin/{name}"),
            &bin.join(name),
        )?;
    }
    let nvcc = bin.join("nvcc");
    make_executable(&nvcc)?;
    make_executable(&bin.join("ptxas"))?;
    let ptx_isa = ask_ptx_isa(&bin.join("ptxas"), tmp)?;
    check_tool_version(&nvcc, version, &nvcc_wheel)?;
    let listed = parse_list_gpu_code(&Cmd::new(&nvcc).arg("--list-gpu-code").read()?)?;
    let allowed = parse_allowed_targets(&Cmd::new(&nvcc).arg("--help").read()?, "--gpu-code")?;
    let limits = read_host_config(&crt_wheel, &format!("{prefix}/include/crt/host_config.h"))?;
    Ok(ToolFacts {
        listed: Some(listed),
        allowed,
        limits,
        ptx_isa,
    })
}

fn ask_ptxas(row: &CudaMajorRow, version: &Version, tmp: &Path) -> Result<ToolFacts> {
    let prefix = &row.wheel_prefix;
    let wheel = crate::downloads::download_wheel(&row.compiler_wheel, version)?;
    let crt_wheel = crate::downloads::download_wheel(&row.crt_wheel, version)?;
    let ptxas = tmp.join("ptxas");
    extract(&wheel, &format!("{prefix}/bin/ptxas"), &ptxas)?;
    make_executable(&ptxas)?;
    check_tool_version(&ptxas, version, &wheel)?;
    let allowed = parse_allowed_targets(&Cmd::new(&ptxas).arg("--help").read()?, "--gpu-name")?;
    let limits = read_host_config(&crt_wheel, &format!("{prefix}/include/crt/host_config.h"))?;
    Ok(ToolFacts {
        listed: None,
        allowed,
        limits,
        ptx_isa: ask_ptx_isa(&ptxas, tmp)?,
    })
}

/// The newest PTX ISA `ptxas` reads: given PTX of ISA 99.9, it refuses it naming its own
/// ("Unsupported .version 99.9; current version is '8.4'").
fn ask_ptx_isa(ptxas: &Path, tmp: &Path) -> Result<Version> {
    let ptx = tmp.join("isa-probe.ptx");
    fs::write(&ptx, ".version 99.9\n.target sm_75\n.address_size 64\n")?;
    let out = Cmd::new(ptxas)
        .arg("-arch=sm_75")
        .arg(&ptx)
        .arg("-o")
        .arg(tmp.join("isa-probe.cubin"))
        .output()?;
    parse_current_ptx_isa(&out.stderr).with_context(|| {
        format!(
            "`{} isa-probe.ptx` did not name its PTX ISA: {}",
            ptxas.display(),
            out.stderr
        )
    })
}

/// `X.Y` of ptxas's "current version is 'X.Y'".
pub fn parse_current_ptx_isa(stderr: &str) -> Result<Version> {
    let (_, rest) = stderr
        .split_once("current version is '")
        .context("no \"current version is\"")?;
    let (isa, _) = rest.split_once('\'').context("an unterminated version")?;
    Ok(isa.parse()?)
}

/// The tool must be the release its wheel claims (`… release 13.0, V13.0.48`).
///
/// This is the first run of a just-written executable. If another thread forks while our write
/// handle is open, the child holds it until it execs and the kernel refuses to run the file
/// ("Text file busy"); that window is short, so wait it out.
fn check_tool_version(tool: &Path, version: &Version, wheel: &Path) -> Result<()> {
    const ETXTBSY: i32 = 26;
    let mut tries = 0;
    let reported = loop {
        match Cmd::new(tool).arg("--version").read() {
            Err(e)
                if tries < 50
                    && e.chain().any(|c| {
                        c.downcast_ref::<std::io::Error>()
                            .and_then(std::io::Error::raw_os_error)
                            == Some(ETXTBSY)
                    }) =>
            {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            other => break other?,
        }
    };
    if !reported
        .split_whitespace()
        .any(|w| w == format!("V{version}"))
    {
        bail!(
            "{} does not hold release {version}: `{} --version` says\n{reported}",
            wheel.display(),
            tool.display()
        );
    }
    Ok(())
}

fn read_host_config(wheel: &Path, member: &str) -> Result<HostCompilerLimits> {
    let header = String::from_utf8(crate::wheel::read_member(wheel, member)?)
        .with_context(|| format!("{member} in {} is not UTF-8", wheel.display()))?;
    crate::kb::parse_host_config(&header)
        .with_context(|| format!("reading {member} from {}", wheel.display()))
}

fn extract(wheel: &Path, member: &str, dest: &Path) -> Result<()> {
    fs::write(dest, crate::wheel::read_member(wheel, member)?)
        .with_context(|| format!("writing {}", dest.display()))
}

fn make_executable(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .with_context(|| format!("making {} executable", path.display()))
}

/// `nvcc --list-gpu-code`: one `sm_XY` per line.
pub fn parse_list_gpu_code(text: &str) -> Result<BTreeSet<Arch>> {
    let set = text
        .split_whitespace()
        .map(|w| Arch::from_target_name(w).map_err(anyhow::Error::from))
        .collect::<Result<BTreeSet<_>>>()?;
    if set.is_empty() {
        bail!("`nvcc --list-gpu-code` printed no targets");
    }
    Ok(set)
}

/// The `sm_*` names in the "Allowed values for this option:" list of `option`'s entry in a
/// `--help` text (nvcc's `--gpu-code`, ptxas's `--gpu-name`): the only place the tools list
/// `a`/`f` targets. Entries start with the option in column 0; the list ends at the line ending
/// in `'.` (a `Default value:` line may follow).
pub fn parse_allowed_targets(help: &str, option: &str) -> Result<BTreeSet<Arch>> {
    let mut lines = help
        .lines()
        .skip_while(|l| !(l.starts_with(option) && l[option.len()..].starts_with([' ', '\t'])));
    if lines.next().is_none() {
        bail!("--help has no `{option}` entry");
    }
    let body: Vec<&str> = lines.take_while(|l| !l.starts_with('-')).collect();
    let start = body
        .iter()
        .position(|l| l.contains("Allowed values for this option:"))
        .ok_or_else(|| anyhow!("--help's `{option}` entry has no `Allowed values` list"))?;
    let len = body[start..]
        .iter()
        .position(|l| l.trim_end().ends_with("'."))
        .ok_or_else(|| anyhow!("--help's `{option}` allowed values do not end"))?;
    let values = body[start..=start + len].join(" ");
    let values = values.split_once(':').map_or("", |(_, rest)| rest);
    let mut set = BTreeSet::new();
    for quoted in values.split(',') {
        let name = quoted.trim().trim_end_matches('.').trim_matches('\'');
        if name.starts_with("sm_") {
            set.insert(Arch::from_target_name(name)?);
        }
    }
    if set.is_empty() {
        bail!("--help's `{option}` allowed values name no sm_ target");
    }
    Ok(set)
}

/// The aligned table `kb check` prints, then one line per difference or failure.
impl CheckReport {
    /// The report for people: one row per release, then what differs.
    pub fn table(&self) -> String {
        let report = self;
        let mut t = Table::new([
            "CUDA",
            "asked",
            "sm targets",
            "a/f targets",
            "max gcc",
            "max clang",
            "PTX ISA",
            "result",
        ]);
        for c in &report.checked {
            let mut plain = shown_count(&c.plain_targets);
            if c.lists_agree == Some(false) {
                plain.push_str(" (--help disagrees)");
            }
            let result = if c.ok { "match" } else { "MISMATCH" };
            t.row([
                c.version.clone(),
                c.asked.to_string(),
                plain,
                shown_count(&c.variant_targets),
                shown_limit(&c.max_gcc),
                shown_limit(&c.max_clang),
                shown_isa(&c.ptx_isa),
                result.to_string(),
            ]);
        }
        for f in &report.failures {
            t.row([
                f.version.clone(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "FAILED".into(),
            ]);
        }
        let mut out = t.render();
        for c in &report.checked {
            out.push_str(&target_differences(c));
        }
        for f in &report.failures {
            out.push_str(&format!("{}: could not check: {}\n", f.version, f.error));
        }
        let mismatches = report.checked.iter().filter(|c| !c.ok).count();
        out.push_str(&format!(
        "{} of {} releases checked; {} match the knowledge base, {mismatches} differ, {} could not be checked\n",
        report.checked.len(),
        report.checked.len() + report.failures.len(),
        report.checked.len() - mismatches,
        report.failures.len()
    ));
        if mismatches > 0 {
            out.push_str(&format!(
                "Fix the rows in {} (or, if the tool changed, re-read it and record the source).\n",
                crate::kb::KB_PATH
            ));
        }
        out
    }
}

/// A target list's cell: `ok (N)` or `DIFFERS`.
fn shown_count(c: &Compared<Vec<String>>) -> String {
    match c.ok {
        true => format!("ok ({})", c.tool.len()),
        false => "DIFFERS".to_string(),
    }
}

/// A host compiler limit's cell: `15 ok` or `15 (kb 14)`.
fn shown_limit(c: &Compared<Option<u32>>) -> String {
    let show = |n: Option<u32>| n.map_or("-".to_string(), |n| n.to_string());
    match c.ok {
        true => format!("{} ok", show(c.tool)),
        false => format!("{} (kb {})", show(c.tool), show(c.kb)),
    }
}

/// The PTX ISA's cell: `8.4 ok` or `8.4 (kb -)`.
fn shown_isa(c: &Compared<Option<String>>) -> String {
    let tool = c.tool.as_deref().unwrap_or("-");
    match c.ok {
        true => format!("{tool} ok"),
        false => format!("{tool} (kb {})", c.kb.as_deref().unwrap_or("-")),
    }
}

/// Per target list that differs: what nvcc lists and the knowledge base lacks, and the reverse.
fn target_differences(c: &VersionCheck) -> String {
    let mut out = String::new();
    for (what, cmp) in [
        ("sm targets", &c.plain_targets),
        ("a/f targets", &c.variant_targets),
    ] {
        if !cmp.ok {
            let missing: Vec<&String> = cmp.tool.iter().filter(|x| !cmp.kb.contains(x)).collect();
            let extra: Vec<&String> = cmp.kb.iter().filter(|x| !cmp.tool.contains(x)).collect();
            out.push_str(&format!(
                "{}: {what}: {} has but kb lacks {missing:?}; kb has but {} lacks {extra:?}\n",
                c.version, c.asked, c.asked
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        s.parse().unwrap()
    }

    fn shown(set: &BTreeSet<Arch>) -> Vec<String> {
        set.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn pip_index_output() {
        let text = "WARNING: pip index is currently an experimental command.\nnvidia-cuda-nvcc (13.5.37)\nAvailable versions: 13.5.37, 13.4.92, 13.0.48\n";
        assert_eq!(
            crate::downloads::parse_pip_index_versions(text).unwrap(),
            [v("13.5.37"), v("13.4.92"), v("13.0.48")]
        );
        assert!(crate::downloads::parse_pip_index_versions(
            "ERROR: No matching distribution found"
        )
        .is_err());
        assert!(crate::downloads::parse_pip_index_versions("Available versions: 13.x").is_err());
    }

    #[test]
    fn version_selection() {
        let avail = [
            v("12.9.86"),
            v("13.2.78"),
            v("13.0.48"),
            v("13.2.51"),
            v("13.10.1"),
            v("12.8.93"),
        ];
        // No filter: every 13.x, oldest first.
        assert_eq!(
            select_versions(&avail, &[]).unwrap(),
            [v("13.0.48"), v("13.2.51"), v("13.2.78"), v("13.10.1")]
        );
        assert_eq!(
            select_versions(&avail, &[v("13.2")]).unwrap(),
            [v("13.2.51"), v("13.2.78")]
        );
        assert_eq!(
            select_versions(&avail, &[v("13.2.78")]).unwrap(),
            [v("13.2.78")]
        );
        assert_eq!(
            select_versions(&avail, &[v("12")]).unwrap(),
            [v("12.8.93"), v("12.9.86")]
        );
        // 13.1 must not match 13.10.x, and a filter matching nothing is an error naming what exists.
        let err = select_versions(&avail, &[v("13.1")])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("13.2.78") && err.contains("--cuda 13.1"),
            "{err}"
        );
        assert!(select_versions(&[v("10.2.89")], &[v("10.2")]).is_err());
        let package = |major| kb().cuda_major(major).map(|r| r.compiler_wheel.as_str());
        assert!(packaging(kb(), 10).is_err());
        assert_eq!(package(12), Some("nvidia-cuda-nvcc-cu12"));
        assert_eq!(package(11), Some("nvidia-cuda-nvcc-cu11"));
        assert_eq!(kb().first_pypi_nvcc_major(), Some(13));
    }

    #[test]
    fn wheel_file_names() {
        let f = "nvidia_cuda_nvcc-13.0.48-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl";
        assert!(crate::downloads::is_wheel_for(
            f,
            "nvidia-cuda-nvcc",
            &v("13.0.48"),
            "x86_64"
        ));
        assert!(!crate::downloads::is_wheel_for(
            f,
            "nvidia-cuda-nvcc",
            &v("13.0.48"),
            "aarch64"
        ));
        assert!(!crate::downloads::is_wheel_for(
            f,
            "nvidia-cuda-nvcc",
            &v("13.0.4"),
            "x86_64"
        ));
        assert!(!crate::downloads::is_wheel_for(
            f,
            "nvidia-cuda-nvcc",
            &v("13.0"),
            "x86_64"
        ));
        assert!(!crate::downloads::is_wheel_for(
            f,
            "nvidia-cuda-crt",
            &v("13.0.48"),
            "x86_64"
        ));
        assert!(!crate::downloads::is_wheel_for(
            f,
            "nvidia-cuda-nvcc-cu12",
            &v("13.0.48"),
            "x86_64"
        ));
        assert!(!crate::downloads::is_wheel_for(
            "nvidia_cuda_nvcc-13.0.48.tar.gz",
            "nvidia-cuda-nvcc",
            &v("13.0.48"),
            "x86_64"
        ));
        assert!(crate::downloads::is_wheel_for(
            "nvidia_cuda_crt-13.2.51-py3-none-manylinux_2_27_aarch64.whl",
            "nvidia-cuda-crt",
            &v("13.2.51"),
            "aarch64"
        ));
        assert!(crate::downloads::is_wheel_for(
            "nvidia_cuda_nvcc_cu12-12.0.140-py3-none-manylinux1_x86_64.whl",
            "nvidia-cuda-nvcc-cu12",
            &v("12.0.140"),
            "x86_64"
        ));
    }

    #[test]
    fn list_gpu_code_output() {
        let set = parse_list_gpu_code("sm_75\nsm_80\nsm_110\nsm_103\n").unwrap();
        assert_eq!(shown(&set), ["7.5", "8.0", "10.3", "11.0"]);
        assert!(parse_list_gpu_code("").is_err());
        assert!(parse_list_gpu_code("nvcc fatal : oops").is_err());
    }

    /// Shaped like nvcc's help: option headers in column 0, indented text, a wrapped quoted list.
    const NVCC_HELP: &str = "\
--gpu-architecture <arch>                                      (-arch)
        Allowed values for this option:  'all','compute_90','sm_50'.

--gpu-code <code>,...                                          (-code)
        Specify the name of the NVIDIA GPU to assemble and optimize PTX for.
        Allowed values for this option:  'compute_100','compute_100f','lto_90a',
        'sm_100','sm_100a','sm_100f','sm_110f','sm_75',
        'sm_90','sm_90a'.

--generate-code <specification>,...                            (-gencode)
        Allowed values for this option:  'sm_999'.
";

    /// Shaped like ptxas's help: the list is followed by a default.
    const PTXAS_HELP: &str = "\
--gpu-name <gpu name>                               (-arch)
        Specify name of NVIDIA GPU to generate code for.
        Allowed values for this option:  'compute_50','lto_50','sm_50',
        'sm_90','sm_90a'.
        Default value:  'sm_52'.

--help                                              (-h)
";

    #[test]
    fn allowed_targets_in_help() {
        assert_eq!(
            shown(&parse_allowed_targets(NVCC_HELP, "--gpu-code").unwrap()),
            ["7.5", "9.0", "9.0a", "10.0", "10.0a", "10.0f", "11.0f"]
        );
        // The default after the list is not a target of its own (sm_52 is not in the list).
        assert_eq!(
            shown(&parse_allowed_targets(PTXAS_HELP, "--gpu-name").unwrap()),
            ["5.0", "9.0", "9.0a"]
        );
        // `--gpu-code` must not match `--gpu-codes` or take another option's list.
        assert!(parse_allowed_targets(
            "--gpu-codes <x>\n  Allowed values for this option: 'sm_90'.\n",
            "--gpu-code"
        )
        .is_err());
        assert!(parse_allowed_targets(
            "--gpu-architecture <arch>\n  Allowed values for this option: 'sm_90'.\n",
            "--gpu-code"
        )
        .is_err());
        assert!(
            parse_allowed_targets("--gpu-code <code>\n        no list here\n", "--gpu-code")
                .is_err()
        );
        assert!(parse_allowed_targets(
            "--gpu-code <code>\n  Allowed values for this option: 'compute_90'.\n",
            "--gpu-code"
        )
        .is_err());
    }

    fn check(version: &str, gcc: (u32, u32), ok: bool) -> VersionCheck {
        VersionCheck {
            version: version.into(),
            asked: "nvcc",
            plain_targets: Compared::new(
                vec!["sm_75".into(), "sm_107".into()],
                if ok {
                    vec!["sm_75".into(), "sm_107".into()]
                } else {
                    vec!["sm_75".into()]
                },
            ),
            variant_targets: Compared::new(vec!["sm_90a".into()], vec!["sm_90a".into()]),
            lists_agree: Some(true),
            max_gcc: Compared::new(Some(gcc.0), Some(gcc.1)),
            max_clang: Compared::new(Some(22), Some(22)),
            ptx_isa: Compared::new(Some("9.0".into()), Some("9.0".into())),
            ok,
        }
    }

    /// What ptxas says of PTX newer than it reads (CUDA 12.4.131's and 13.2.86's, verbatim).
    #[test]
    fn the_ptx_isa_is_read_from_ptxas_refusal() {
        let said = "ptxas isa-probe.ptx, line 1; fatal   : Unsupported .version 99.9; current version is '8.4'\nptxas fatal   : Ptx assembly aborted due to errors\n";
        assert_eq!(parse_current_ptx_isa(said).unwrap(), v("8.4"));
        let said = "ptxas isa-probe.ptx, line 1; fatal   : Unsupported .version 99.9; current version is '9.2'\n";
        assert_eq!(parse_current_ptx_isa(said).unwrap(), v("9.2"));
        for bad in ["", "current version is '", "current version is 'x.y'"] {
            assert!(parse_current_ptx_isa(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn exit_codes_and_rendering() {
        let mut report = CheckReport {
            checked: vec![check("13.0.48", (15, 15), true)],
            failures: vec![],
            ok: true,
        };
        assert_eq!(report.exit(), crate::output::Exit::Success);
        let text = report.table();
        assert!(
            text.contains("13.0.48  nvcc   ok (2)") && text.contains("1 match"),
            "{text}"
        );
        report.checked.push(check("13.4.59", (16, 15), false));
        assert_eq!(report.exit(), crate::output::Exit::Failed);
        let text = report.table();
        assert!(
            text.contains("16 (kb 15)")
                && text.contains("nvcc has but kb lacks [\"sm_107\"]")
                && text.contains("MISMATCH"),
            "{text}"
        );
        report.failures.push(CheckFailure {
            version: "13.5.37".into(),
            error: "no network".into(),
        });
        assert_eq!(report.exit(), crate::output::Exit::Refused);
        assert!(report
            .table()
            .contains("13.5.37: could not check: no network"));
    }
}
