//! `cargo xtask kb check`: re-verify the knowledge base's nvcc facts against NVIDIA's real wheels.
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
//! Exit status: 0 all match, 1 a fact differs, 2 something could not be fetched or read.

use crate::arch::{Arch, Variant};
use crate::kb::{kb, KnowledgeBase};
use crate::output::{print_json, Table};
use crate::paths;
use crate::process::Cmd;
use crate::pyenv::host_python;
use crate::version::Version;
use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;
use std::collections::BTreeSet;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

const NVCC_PACKAGE: &str = "nvidia-cuda-nvcc";
const CRT_PACKAGE: &str = "nvidia-cuda-crt";
/// Where the 13.x wheels put the toolkit (`site-packages/nvidia/cu13`).
const WHEEL_PREFIX: &str = "nvidia/cu13";

#[derive(Debug, clap::Args)]
pub struct KbArgs {
    #[command(subcommand)]
    pub command: KbCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum KbCommand {
    /// Check the nvcc target and host-compiler rows against every nvidia-cuda-nvcc 13.x wheel on PyPI.
    Check(CheckArgs),
}

#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// Only check these releases: `13.2` checks every 13.2.x on PyPI, `13.2.78` just that one.
    #[arg(long = "cuda", value_name = "VER")]
    pub cuda: Vec<Version>,
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &KbArgs) -> Result<i32> {
    match &args.command {
        KbCommand::Check(a) => run_check(a),
    }
}

/// One fact as the real tool reports it and as the knowledge base has it.
#[derive(Debug, Serialize)]
pub struct Compared<T> {
    pub tool: T,
    pub kb: T,
    pub ok: bool,
}

impl<T: PartialEq> Compared<T> {
    fn new(tool: T, kb: T) -> Compared<T> {
        let ok = tool == kb;
        Compared { tool, kb, ok }
    }
}

/// What one nvcc release said, compared with the knowledge base.
#[derive(Debug, Serialize)]
pub struct VersionCheck {
    pub version: String,
    /// Plain `sm_XY` targets: `nvcc --list-gpu-code` against the plain `[[target]]` rows.
    pub plain_targets: Compared<Vec<String>>,
    /// `a`/`f` targets: nvcc `--help` (`--gpu-code` allowed values) against the `a`/`f` rows.
    pub variant_targets: Compared<Vec<String>>,
    /// Plain targets `--help` lists, which must equal `--list-gpu-code` (nvcc agreeing with itself).
    pub help_plain_matches_list: bool,
    pub max_gcc: Compared<Option<u32>>,
    pub max_clang: Compared<Option<u32>>,
    pub ok: bool,
}

/// A release that could not be checked, and why.
#[derive(Debug, Serialize)]
pub struct CheckFailure {
    pub version: String,
    pub error: String,
}

#[derive(Debug, Serialize)]
pub struct CheckReport {
    pub package: &'static str,
    pub checked: Vec<VersionCheck>,
    pub failures: Vec<CheckFailure>,
    /// True when every release was checked and every fact matched.
    pub ok: bool,
}

impl CheckReport {
    /// 0 all matched, 1 a mismatch, 2 a release could not be fetched or read.
    pub fn exit_code(&self) -> i32 {
        if !self.failures.is_empty() {
            2
        } else if self.checked.iter().any(|c| !c.ok) {
            1
        } else {
            0
        }
    }
}

fn run_check(args: &CheckArgs) -> Result<i32> {
    let kb = kb();
    let versions = select_versions(&list_pypi_versions(NVCC_PACKAGE)?, &args.cuda)?;
    let report = check_versions(kb, &versions, !args.json);
    if args.json {
        print_json(&report)?;
    } else {
        print!("{}", render(&report));
    }
    Ok(report.exit_code())
}

/// Checks each release in turn; one that cannot be fetched or read becomes a failure, the rest go on.
pub fn check_versions(kb: &KnowledgeBase, versions: &[Version], progress: bool) -> CheckReport {
    let mut checked = Vec::new();
    let mut failures = Vec::new();
    for v in versions {
        if progress {
            eprintln!("archsmith: checking nvcc {v}");
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
        package: NVCC_PACKAGE,
        checked,
        failures,
        ok,
    }
}

/// The releases to check: every 13.x on PyPI, narrowed by `--cuda` prefixes, oldest first.
pub fn select_versions(available: &[Version], filters: &[Version]) -> Result<Vec<Version>> {
    if let Some(f) = filters.iter().find(|f| f.major() != 13) {
        bail!("--cuda {f}: only CUDA 13.x can be checked, because the CUDA 11/12 nvcc wheels on PyPI ship ptxas but no nvcc");
    }
    let mut out: Vec<Version> = available
        .iter()
        .filter(|v| v.major() == 13)
        .filter(|v| filters.is_empty() || filters.iter().any(|f| v.matches_prefix(f)))
        .cloned()
        .collect();
    out.sort();
    out.dedup();
    if out.is_empty() {
        let shown: Vec<String> = available.iter().map(|v| v.to_string()).collect();
        let wanted: Vec<String> = filters.iter().map(|v| v.to_string()).collect();
        bail!(
            "no {NVCC_PACKAGE} 13.x release on PyPI matches --cuda {}; PyPI has: {}",
            if wanted.is_empty() {
                "(none given)".to_string()
            } else {
                wanted.join(", ")
            },
            shown.join(", ")
        );
    }
    Ok(out)
}

/// `pip index versions PACKAGE`: every release PyPI has (pip's own index access, so proxies and
/// mirrors configured for pip apply).
pub fn list_pypi_versions(package: &str) -> Result<Vec<Version>> {
    let python = host_python()?;
    let text = Cmd::new(&python)
        .args(["-m", "pip", "index", "versions", package, "--disable-pip-version-check"])
        .read()
        .with_context(|| format!("could not list the releases of {package} on PyPI; check that PyPI is reachable (`pip index versions {package}`)"))?;
    parse_pip_index_versions(&text)
        .with_context(|| format!("reading `pip index versions {package}` output"))
}

/// Parses `Available versions: 13.5.37, 13.4.92, …` from `pip index versions`.
pub fn parse_pip_index_versions(text: &str) -> Result<Vec<Version>> {
    let line = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Available versions:"))
        .ok_or_else(|| anyhow!("no `Available versions:` line in:\n{text}"))?;
    line.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<Version>().map_err(Into::into))
        .collect()
}

fn check_one(kb: &KnowledgeBase, version: &Version) -> Result<VersionCheck> {
    let nvcc_wheel = ensure_wheel(NVCC_PACKAGE, version)?;
    let crt_wheel = ensure_wheel(CRT_PACKAGE, version)?;

    let tmp = tempfile::Builder::new()
        .prefix("archsmith-nvcc-")
        .tempdir()
        .context("creating a temporary directory")?;
    let bin = tmp.path().join("bin");
    fs::create_dir_all(&bin)?;
    for name in ["nvcc", "nvcc.profile"] {
        let member = format!("{WHEEL_PREFIX}/bin/{name}");
        let dest = bin.join(name);
        fs::write(&dest, read_member(&nvcc_wheel, &member)?)
            .with_context(|| format!("writing {}", dest.display()))?;
    }
    let nvcc = bin.join("nvcc");
    make_executable(&nvcc)?;

    let reported = Cmd::new(&nvcc).arg("--version").read()?;
    let want = format!("V{version}");
    if !reported.contains(&want) {
        bail!(
            "{} is not nvcc {version}: `nvcc --version` says\n{reported}",
            nvcc_wheel.display()
        );
    }
    let listed = parse_list_gpu_code(&Cmd::new(&nvcc).arg("--list-gpu-code").read()?)?;
    let help = Cmd::new(&nvcc).arg("--help").read()?;
    let allowed = parse_gpu_code_allowed(&help)?;

    let header = String::from_utf8(read_member(
        &crt_wheel,
        &format!("{WHEEL_PREFIX}/include/crt/host_config.h"),
    )?)
    .context("host_config.h is not UTF-8")?;
    let limits = parse_host_config(&header)
        .with_context(|| format!("reading crt/host_config.h from {}", crt_wheel.display()))?;

    let kb_targets = kb.cuda_targets(version);
    let names = |set: &BTreeSet<Arch>| set.iter().map(|a| a.sm()).collect::<Vec<_>>();
    let split = |set: &BTreeSet<Arch>| -> (BTreeSet<Arch>, BTreeSet<Arch>) {
        set.iter().partition(|a| a.variant == Variant::Plain)
    };
    let kb_set: BTreeSet<Arch> = kb_targets.into_iter().collect();
    let (kb_plain, kb_variants) = split(&kb_set);
    let (help_plain, help_variants) = split(&allowed);

    let row = kb.cuda_row(version);
    let plain_targets = Compared::new(names(&listed), names(&kb_plain));
    let variant_targets = Compared::new(names(&help_variants), names(&kb_variants));
    let help_plain_matches_list = help_plain == listed;
    let max_gcc = Compared::new(limits.max_gcc, row.and_then(|r| r.max_gcc));
    let max_clang = Compared::new(limits.max_clang, row.and_then(|r| r.max_clang));
    let ok = plain_targets.ok
        && variant_targets.ok
        && help_plain_matches_list
        && max_gcc.ok
        && max_clang.ok;
    Ok(VersionCheck {
        version: version.to_string(),
        plain_targets,
        variant_targets,
        help_plain_matches_list,
        max_gcc,
        max_clang,
        ok,
    })
}

/// The cached wheel of `package==version` for this machine, downloading it on first use.
fn ensure_wheel(package: &str, version: &Version) -> Result<PathBuf> {
    let dir = paths::downloads_dir();
    if let Some(found) = find_cached_wheel(&dir, package, version)? {
        return Ok(found);
    }
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    // Download into a private directory first so a half-written file never looks cached.
    let staging = tempfile::Builder::new()
        .prefix(".download-")
        .tempdir_in(&dir)
        .with_context(|| format!("creating a staging directory in {}", dir.display()))?;
    let python = host_python()?;
    Cmd::new(&python)
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--disable-pip-version-check",
            "--quiet",
            "-d",
        ])
        .arg(staging.path())
        .arg(format!("{package}=={version}"))
        .read()
        .with_context(|| format!("could not download {package}=={version} from PyPI"))?;
    let fetched = find_cached_wheel(staging.path(), package, version)?.ok_or_else(|| {
        anyhow!(
            "pip downloaded {package}=={version} but no wheel for {} is in {}",
            std::env::consts::ARCH,
            staging.path().display()
        )
    })?;
    let dest = dir.join(fetched.file_name().unwrap_or_default());
    fs::rename(&fetched, &dest)
        .with_context(|| format!("moving {} to {}", fetched.display(), dest.display()))?;
    Ok(dest)
}

/// A wheel of `package==version` for this CPU in `dir`, by the wheel file-name convention
/// (`nvidia_cuda_nvcc-13.0.48-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl`).
fn find_cached_wheel(dir: &Path, package: &str, version: &Version) -> Result<Option<PathBuf>> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
    };
    for entry in entries {
        let path = entry?.path();
        if let Some(name) = path.file_name().and_then(|n| n.to_str()) {
            if is_wheel_for(name, package, version, std::env::consts::ARCH) {
                return Ok(Some(path));
            }
        }
    }
    Ok(None)
}

/// Whether `file` is a wheel of `package==version` for CPU `arch` (`x86_64`, `aarch64`).
pub fn is_wheel_for(file: &str, package: &str, version: &Version, arch: &str) -> bool {
    let Some(stem) = file.strip_suffix(".whl") else {
        return false;
    };
    let mut parts = stem.split('-');
    let (Some(name), Some(ver)) = (parts.next(), parts.next()) else {
        return false;
    };
    let platform = stem.rsplit('-').next().unwrap_or("");
    name.eq_ignore_ascii_case(&package.replace('-', "_"))
        && ver
            .parse::<Version>()
            .is_ok_and(|v| v == *version && v.parts().len() == version.parts().len())
        && (platform == "any" || platform.split('.').any(|tag| tag.ends_with(arch)))
}

fn read_member(wheel: &Path, member: &str) -> Result<Vec<u8>> {
    let file = fs::File::open(wheel).with_context(|| format!("opening {}", wheel.display()))?;
    let mut zip = zip::ZipArchive::new(file).with_context(|| {
        format!(
            "{} is not a readable wheel (zip); delete it so it is downloaded again",
            wheel.display()
        )
    })?;
    let mut entry = zip
        .by_name(member)
        .with_context(|| format!("{} has no {member}", wheel.display()))?;
    let mut buf = Vec::with_capacity(usize::try_from(entry.size()).unwrap_or(0));
    entry
        .read_to_end(&mut buf)
        .with_context(|| format!("unpacking {member} from {}", wheel.display()))?;
    Ok(buf)
}

fn make_executable(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(0o755))
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

/// The `sm_*` names in the "Allowed values for this option:" list of nvcc `--help`'s `--gpu-code`
/// entry (the only place nvcc lists `a`/`f` targets).
pub fn parse_gpu_code_allowed(help: &str) -> Result<BTreeSet<Arch>> {
    let mut lines = help.lines().skip_while(|l| !l.starts_with("--gpu-code"));
    if lines.next().is_none() {
        bail!("nvcc --help has no `--gpu-code` entry");
    }
    // The entry runs until the next option header, which starts in column 0.
    let body: Vec<&str> = lines.take_while(|l| !l.starts_with('-')).collect();
    let start = body
        .iter()
        .position(|l| l.contains("Allowed values for this option:"))
        .ok_or_else(|| anyhow!("nvcc --help's `--gpu-code` entry has no `Allowed values` list"))?;
    let values = body[start..].join(" ");
    let values = values.split_once(':').map_or("", |(_, rest)| rest);
    let mut set = BTreeSet::new();
    for quoted in values.split(',') {
        let name = quoted.trim().trim_end_matches('.').trim_matches('\'');
        if name.starts_with("sm_") {
            set.insert(Arch::from_target_name(name)?);
        }
    }
    if set.is_empty() {
        bail!("nvcc --help's `--gpu-code` allowed values name no sm_ target");
    }
    Ok(set)
}

#[derive(Debug, PartialEq, Eq)]
pub struct HostCompilerLimits {
    pub max_gcc: Option<u32>,
    pub max_clang: Option<u32>,
}

/// The newest GCC and Clang majors `crt/host_config.h` accepts, from its `#error` checks:
/// "gcc versions later than N are not supported" → N; "clang version must be less than N" → N-1.
/// Other compilers' checks (the `HOS clang` one) are ignored.
pub fn parse_host_config(header: &str) -> Result<HostCompilerLimits> {
    let number_after = |marker: &str| -> Result<Option<u32>> {
        let mut found = None;
        for line in header
            .lines()
            .filter(|l| l.trim_start().starts_with("#error"))
        {
            if let Some(rest) = line.split_once(marker).map(|(_, r)| r) {
                let digits: String = rest
                    .trim_start()
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect();
                let n: u32 = digits
                    .parse()
                    .map_err(|_| anyhow!("no number after `{marker}` in: {line}"))?;
                if found.is_some_and(|f| f != n) {
                    bail!("host_config.h has two different `{marker}` limits");
                }
                found = Some(n);
            }
        }
        Ok(found)
    };
    let gcc = number_after("unsupported GNU version! gcc versions later than")?;
    let clang_below = number_after("unsupported clang version! clang version must be less than")?;
    if gcc.is_none() && clang_below.is_none() {
        bail!("found neither the GNU nor the clang version check; the header's wording changed, so update parse_host_config");
    }
    Ok(HostCompilerLimits {
        max_gcc: gcc,
        max_clang: clang_below.map(|n| n.saturating_sub(1)),
    })
}

/// The aligned table `kb check` prints, then one line per difference or failure.
pub fn render(report: &CheckReport) -> String {
    let mut t = Table::new([
        "nvcc",
        "sm targets",
        "a/f targets",
        "max gcc",
        "max clang",
        "result",
    ]);
    let count = |c: &Compared<Vec<String>>| {
        if c.ok {
            format!("ok ({})", c.tool.len())
        } else {
            "DIFFERS".to_string()
        }
    };
    let limit = |c: &Compared<Option<u32>>| {
        let tool = c.tool.map_or("-".to_string(), |n| n.to_string());
        if c.ok {
            format!("{tool} ok")
        } else {
            format!(
                "{tool} (kb {})",
                c.kb.map_or("-".to_string(), |n| n.to_string())
            )
        }
    };
    for c in &report.checked {
        let plain = if c.help_plain_matches_list {
            count(&c.plain_targets)
        } else {
            format!("{} (help disagrees)", count(&c.plain_targets))
        };
        t.row([
            c.version.clone(),
            plain,
            count(&c.variant_targets),
            limit(&c.max_gcc),
            limit(&c.max_clang),
            (if c.ok { "match" } else { "MISMATCH" }).to_string(),
        ]);
    }
    for f in &report.failures {
        t.row([
            f.version.clone(),
            "-".into(),
            "-".into(),
            "-".into(),
            "-".into(),
            "FAILED".into(),
        ]);
    }
    let mut out = t.render();
    for c in &report.checked {
        for (what, cmp) in [
            ("sm targets", &c.plain_targets),
            ("a/f targets", &c.variant_targets),
        ] {
            if !cmp.ok {
                let missing: Vec<&String> =
                    cmp.tool.iter().filter(|x| !cmp.kb.contains(x)).collect();
                let extra: Vec<&String> = cmp.kb.iter().filter(|x| !cmp.tool.contains(x)).collect();
                out.push_str(&format!("{}: {what}: nvcc has but kb lacks {missing:?}; kb has but nvcc lacks {extra:?}\n", c.version));
            }
        }
    }
    for f in &report.failures {
        out.push_str(&format!("{}: could not check: {}\n", f.version, f.error));
    }
    let mismatches = report.checked.iter().filter(|c| !c.ok).count();
    out.push_str(&format!(
        "{} of {} {NVCC_PACKAGE} releases checked; {} match the knowledge base, {mismatches} differ, {} could not be checked\n",
        report.checked.len(),
        report.checked.len() + report.failures.len(),
        report.checked.len() - mismatches,
        report.failures.len()
    ));
    if mismatches > 0 {
        out.push_str(&format!(
            "Fix the rows in {} (or the tool changed: re-read it and record the source).\n",
            crate::kb::KB_PATH
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        s.parse().unwrap()
    }

    #[test]
    fn pip_index_output() {
        let text = "WARNING: pip index is currently an experimental command.\nnvidia-cuda-nvcc (13.5.37)\nAvailable versions: 13.5.37, 13.4.92, 13.0.48\n";
        assert_eq!(
            parse_pip_index_versions(text).unwrap(),
            [v("13.5.37"), v("13.4.92"), v("13.0.48")]
        );
        assert!(parse_pip_index_versions("ERROR: No matching distribution found").is_err());
        assert!(parse_pip_index_versions("Available versions: 13.x").is_err());
    }

    #[test]
    fn version_selection() {
        let avail = [
            v("12.9.86"),
            v("13.2.78"),
            v("13.0.48"),
            v("13.2.51"),
            v("13.10.1"),
        ];
        let all = select_versions(&avail, &[]).unwrap();
        assert_eq!(
            all,
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
        // 13.1 must not match 13.10.x, and a filter matching nothing is an error naming what exists.
        let err = select_versions(&avail, &[v("13.1")])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("13.2.78") && err.contains("--cuda 13.1"),
            "{err}"
        );
    }

    #[test]
    fn wheel_file_names() {
        let f = "nvidia_cuda_nvcc-13.0.48-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl";
        assert!(is_wheel_for(f, "nvidia-cuda-nvcc", &v("13.0.48"), "x86_64"));
        assert!(!is_wheel_for(
            f,
            "nvidia-cuda-nvcc",
            &v("13.0.48"),
            "aarch64"
        ));
        assert!(!is_wheel_for(f, "nvidia-cuda-nvcc", &v("13.0.4"), "x86_64"));
        assert!(!is_wheel_for(f, "nvidia-cuda-nvcc", &v("13.0"), "x86_64"));
        assert!(!is_wheel_for(f, "nvidia-cuda-crt", &v("13.0.48"), "x86_64"));
        assert!(!is_wheel_for(
            "nvidia_cuda_nvcc-13.0.48.tar.gz",
            "nvidia-cuda-nvcc",
            &v("13.0.48"),
            "x86_64"
        ));
        assert!(is_wheel_for(
            "nvidia_cuda_crt-13.2.51-py3-none-manylinux_2_27_aarch64.whl",
            "nvidia-cuda-crt",
            &v("13.2.51"),
            "aarch64"
        ));
    }

    #[test]
    fn list_gpu_code_output() {
        let set = parse_list_gpu_code("sm_75\nsm_80\nsm_110\nsm_103\n").unwrap();
        let shown: Vec<String> = set.iter().map(|a| a.to_string()).collect();
        assert_eq!(shown, ["7.5", "8.0", "10.3", "11.0"]);
        assert!(parse_list_gpu_code("").is_err());
        assert!(parse_list_gpu_code("nvcc fatal : oops").is_err());
    }

    /// Shaped like nvcc's help: option headers in column 0, indented text, a wrapped quoted list.
    const HELP: &str = "\
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

    #[test]
    fn gpu_code_allowed_values() {
        let set = parse_gpu_code_allowed(HELP).unwrap();
        let shown: Vec<String> = set.iter().map(|a| a.to_string()).collect();
        assert_eq!(
            shown,
            ["7.5", "9.0", "9.0a", "10.0", "10.0a", "10.0f", "11.0f"]
        );
        assert!(parse_gpu_code_allowed(
            "--gpu-architecture <arch>\n  Allowed values for this option: 'sm_90'.\n"
        )
        .is_err());
        assert!(parse_gpu_code_allowed("--gpu-code <code>\n        no list here\n").is_err());
    }

    #[test]
    fn host_config_limits() {
        let header = "\
#if __GNUC__ > 16
#error -- unsupported GNU version! gcc versions later than 16 are not supported! The nvcc flag ...
#endif
#if defined(__HORIZON__)
#error -- unsupported HOS clang version! The version must be must be less than 22 and greater than 3.2 .
#endif
#if (__clang_major__ >= 23) || (__clang_major__ < 3)
#error -- unsupported clang version! clang version must be less than 23 and greater than 3.2 . The nvcc flag ...
#endif
";
        assert_eq!(
            parse_host_config(header).unwrap(),
            HostCompilerLimits {
                max_gcc: Some(16),
                max_clang: Some(22)
            }
        );
        assert!(parse_host_config("#define NOTHING 1\n").is_err());
        let two = format!("{header}#error -- unsupported GNU version! gcc versions later than 15 are not supported!\n");
        assert!(parse_host_config(&two).is_err());
    }

    #[test]
    fn exit_codes_and_rendering() {
        let good = VersionCheck {
            version: "13.0.48".into(),
            plain_targets: Compared::new(vec!["sm_75".into()], vec!["sm_75".into()]),
            variant_targets: Compared::new(vec!["sm_90a".into()], vec!["sm_90a".into()]),
            help_plain_matches_list: true,
            max_gcc: Compared::new(Some(15), Some(15)),
            max_clang: Compared::new(Some(20), Some(20)),
            ok: true,
        };
        let mut report = CheckReport {
            package: NVCC_PACKAGE,
            checked: vec![good],
            failures: vec![],
            ok: true,
        };
        assert_eq!(report.exit_code(), 0);
        assert!(
            render(&report).contains("13.0.48  ok (1)"),
            "{}",
            render(&report)
        );
        report.checked.push(VersionCheck {
            version: "13.4.59".into(),
            plain_targets: Compared::new(vec!["sm_107".into()], vec![]),
            variant_targets: Compared::new(vec![], vec![]),
            help_plain_matches_list: true,
            max_gcc: Compared::new(Some(16), Some(15)),
            max_clang: Compared::new(Some(22), Some(22)),
            ok: false,
        });
        assert_eq!(report.exit_code(), 1);
        let text = render(&report);
        assert!(
            text.contains("16 (kb 15)") && text.contains("nvcc has but kb lacks [\"sm_107\"]"),
            "{text}"
        );
        report.failures.push(CheckFailure {
            version: "13.5.37".into(),
            error: "no network".into(),
        });
        assert_eq!(report.exit_code(), 2);
        assert!(render(&report).contains("13.5.37: could not check: no network"));
    }
}
