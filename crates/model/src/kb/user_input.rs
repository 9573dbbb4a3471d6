//! What a user types, checked against the knowledge base before anything is planned: CUDA
//! releases, torch releases with their `+cuXYZ` variant, NVIDIA driver versions. Each parser is a
//! clap `value_parser`, so an unknown value is a usage error (exit 2) that names the nearest real
//! ones, the same for every command that takes the flag.

use super::{kb, KnowledgeBase, TorchVariantRow};
use crate::version::Version;

/// Longest piece of a user's input an error message repeats.
const ECHO_MAX: usize = 60;

/// `text` as an error message quotes it: whole when short, else its start and how much was cut.
pub fn echo(text: &str) -> String {
    let n = text.chars().count();
    if n <= ECHO_MAX {
        text.to_string()
    } else {
        let head: String = text.chars().take(ECHO_MAX).collect();
        format!("{head}… ({n} characters)")
    }
}

fn parse(text: &str, what: &str, example: &str) -> Result<Version, String> {
    text.trim().parse::<Version>().map_err(|_| {
        format!(
            "`{}` is not a {what} version: write one such as {example}",
            echo(text)
        )
    })
}

/// `--cuda`: a CUDA release the knowledge base knows, written `major.minor` (a patch level such
/// as `12.4.1` is taken as its release).
pub fn cuda_release(text: &str) -> Result<Version, String> {
    cuda_release_in(kb(), text)
}

pub fn cuda_release_in(kb: &KnowledgeBase, text: &str) -> Result<Version, String> {
    let v = parse(text, "CUDA", "12.8 or 13.2")?;
    if v.local().is_some() || v.is_prerelease() {
        return Err(format!(
            "`{}`: a CUDA release is major.minor, e.g. 12.8 or 13.2",
            echo(text)
        ));
    }
    if v.parts().len() < 2 {
        return Err(format!(
            "`{}` names no CUDA release: write major.minor ({})",
            echo(text),
            cuda_releases_of(kb, v.major())
        ));
    }
    match kb.cuda_row(&v) {
        Some(_) => Ok(v),
        None => Err(format!(
            "CUDA {} does not exist ({})",
            echo(text),
            cuda_releases_of(kb, v.major())
        )),
    }
}

/// `toolchain install/env --cuda`: as [`cuda_release`], except that a release of a major whose
/// nvcc NVIDIA ships on PyPI (13.x) is PyPI's to confirm: the install resolves it there and, where
/// it does not exist, lists the releases PyPI has (a release newer than the knowledge base still
/// installs).
pub fn toolchain_cuda_release(text: &str) -> Result<Version, String> {
    let kb = kb();
    let v = parse(text, "CUDA", "13.2")?;
    let on_pypi = kb.first_pypi_nvcc_major().is_some_and(|m| v.major() >= m)
        && kb.cuda_major(v.major()).is_some();
    if on_pypi && v.parts().len() >= 2 && v.local().is_none() && !v.is_prerelease() {
        return Ok(v);
    }
    cuda_release_in(kb, text)
}

/// The CUDA releases of `major` the knowledge base knows, or all of them.
fn cuda_releases_of(kb: &KnowledgeBase, major: u32) -> String {
    let same: Vec<String> = kb
        .cuda
        .iter()
        .filter(|c| c.version.major() == major)
        .map(|c| c.version.to_string())
        .collect();
    if same.is_empty() {
        let all: Vec<&Version> = kb.cuda.iter().map(|c| &c.version).collect();
        format!(
            "archsmith knows CUDA {} to {}",
            all.iter().min().map_or(String::new(), |v| v.to_string()),
            all.iter().max().map_or(String::new(), |v| v.to_string())
        )
    } else {
        format!("CUDA {major} releases: {}", same.join(", "))
    }
}

/// `--torch`: a torch release the knowledge base knows (`2.6.0`), a release line (`2.6`), or a
/// pre-release of a known line (`2.8.0.dev20250601`), with an optional variant label (`+cu118`,
/// `+cpu`) that must be one of that release's builds.
pub fn torch_release(text: &str) -> Result<Version, String> {
    torch_release_in(kb(), text)
}

pub fn torch_release_in(kb: &KnowledgeBase, text: &str) -> Result<Version, String> {
    let v = parse(text, "torch", "2.6.0 or 2.6.0+cu124")?;
    let line = v.major_minor();
    let releases: Vec<&Version> = kb
        .torch
        .iter()
        .map(|t| &t.version)
        .filter(|r| r.major_minor() == line)
        .collect();
    let exact = releases.iter().any(|r| r.parts() == v.parts());
    let is_line = v.parts().len() == 2 && !releases.is_empty();
    if !(exact || is_line || (v.is_prerelease() && !releases.is_empty())) {
        let known = if releases.is_empty() {
            let all: Vec<&Version> = kb.torch.iter().map(|t| &t.version).collect();
            format!(
                "archsmith knows torch {} to {}",
                all.iter().min().map_or(String::new(), |v| v.to_string()),
                all.iter().max().map_or(String::new(), |v| v.to_string())
            )
        } else {
            let names: Vec<String> = releases.iter().map(|r| r.to_string()).collect();
            format!("torch {line} releases: {}", names.join(", "))
        };
        return Err(format!("torch {} does not exist ({known})", echo(text)));
    }
    if let Some(label) = v.local() {
        check_variant(kb, &v, label)?;
    }
    Ok(v)
}

/// `audit upgrade --from/--to`: a release older than the knowledge base's oldest torch row is
/// taken as written (the API-change table reaches back to torch 0.4, whose releases the rows do
/// not list); from that row on, as [`torch_release`].
pub fn audited_torch_release(text: &str) -> Result<Version, String> {
    let kb = kb();
    let v = parse(text, "torch", "2.3.1 or 1.0")?;
    let oldest = kb.torch.iter().map(|t| &t.version).min();
    if oldest.is_some_and(|o| v.major_minor() < o.major_minor()) && v.local().is_none() {
        return Ok(v);
    }
    torch_release_in(kb, text)
}

/// A `+cuXYZ` label names one of the release's CUDA builds; `+cpu` is always one.
fn check_variant(kb: &KnowledgeBase, torch: &Version, label: &str) -> Result<(), String> {
    if label == "cpu" {
        return Ok(());
    }
    let variants = torch_variants(kb, torch);
    let tags: Vec<String> = variants.iter().map(tag).collect();
    match TorchVariantRow::cuda_of_tag(label) {
        Some(c) if variants.contains(&c) => Ok(()),
        Some(_) => Err(format!(
            "torch {} has no {label} build; its CUDA builds: {}",
            Version::new(torch.parts()),
            tags.join(", ")
        )),
        None => Err(format!(
            "`+{}` is not a torch variant: write +cuXYZ (for torch {}: {}) or +cpu",
            echo(label),
            Version::new(torch.parts()),
            tags.join(", ")
        )),
    }
}

fn tag(cuda: &Version) -> String {
    format!("cu{}{}", cuda.major(), cuda.minor())
}

/// The CUDA releases torch `torch` was built with: its PyPI default and its variants.
pub fn torch_variants(kb: &KnowledgeBase, torch: &Version) -> Vec<Version> {
    let row = kb.torch_row(torch);
    let mut out: Vec<Version> = kb
        .torch_variants
        .iter()
        .filter(|v| v.covers(torch))
        .map(|v| v.cuda.clone())
        .chain(row.and_then(|r| r.pypi_cuda.clone()))
        .chain(row.into_iter().flat_map(|r| r.cuda_variants.clone()))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The CUDA a `+cuXYZ` label names, if `torch` carries one.
pub fn variant_cuda(torch: &Version) -> Option<Version> {
    torch.local().and_then(TorchVariantRow::cuda_of_tag)
}

/// `--torch` with `--cuda`: a `+cuXYZ` build names the same CUDA release, and the release works
/// with that CUDA at all ([`torch_cuda_refusal`]); else an error saying which to change.
pub fn torch_and_cuda(torch: Option<&Version>, cuda: Option<&Version>) -> anyhow::Result<()> {
    if let (Some(t), Some(c)) = (torch, cuda) {
        if let Some((detail, fix)) = torch_cuda_refusal(kb(), t, c) {
            anyhow::bail!("{detail}: {fix}");
        }
        if let Some(vc) = variant_cuda(t) {
            if vc.major_minor() != c.major_minor() {
                anyhow::bail!(
                    "--torch {t} is the CUDA {vc} build but --cuda {c} was given: drop --cuda, or name torch's cu{}{} build",
                    c.major(),
                    c.minor()
                );
            }
        }
    }
    Ok(())
}

/// Why torch `torch` cannot be built with CUDA `cuda`, as `(what, fix)`, where the knowledge base
/// says so: older than the release's build files accept, or a newer major than any of its builds
/// (its build files know nothing of that major's changes).
pub fn torch_cuda_refusal(
    kb: &KnowledgeBase,
    torch: &Version,
    cuda: &Version,
) -> Option<(String, String)> {
    let row = kb.torch_row(torch)?;
    if let Some(min) = row.min_cuda_source_build.as_ref().filter(|m| cuda < *m) {
        return Some((
            format!("torch {torch} needs CUDA ≥ {min} to build (its cmake/public/cuda.cmake refuses older)"),
            format!("--cuda {min} or newer"),
        ));
    }
    let newest = row.cuda_variants.iter().chain(&row.pypi_cuda).max()?;
    if cuda.major() <= newest.major() {
        return None;
    }
    let same_major: Vec<String> = row
        .cuda_variants
        .iter()
        .filter(|v| v.major() == newest.major())
        .map(|v| v.to_string())
        .collect();
    Some((
        format!(
            "torch {torch} predates CUDA {}: its official builds stop at cu{}{} (CUDA {newest}), and its build files know nothing of CUDA {}'s changes (archs nvcc {} dropped, removed APIs)",
            cuda.major(), newest.major(), newest.minor(), cuda.major(), cuda.major()
        ),
        format!(
            "build with CUDA {}.x (--cuda {}; official builds used {}), or build a torch release made for CUDA {}",
            newest.major(), newest, same_major.join(", "), cuda.major()
        ),
    ))
}

/// `--driver`: an NVIDIA driver version as nvidia-smi prints it (`570.86.10`, `535.104.05`,
/// `418.67`): a three-digit branch and one or two more parts.
pub fn driver_version(text: &str) -> Result<Version, String> {
    let bad = || {
        format!(
            "`{}` is not an NVIDIA driver version: they read like 570.86.10 or 535.104.05 (nvidia-smi's \"Driver Version\")",
            echo(text)
        )
    };
    let v = text.trim().parse::<Version>().map_err(|_| bad())?;
    let parts = v.parts().len();
    if v.local().is_some() || v.is_prerelease() || !(2..=3).contains(&parts) {
        return Err(bad());
    }
    if !(200..1000).contains(&v.major()) {
        return Err(bad());
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_releases_are_checked_against_the_knowledge_base() {
        let kb = kb();
        assert_eq!(cuda_release_in(kb, "12.8").unwrap().to_string(), "12.8");
        assert_eq!(cuda_release_in(kb, "12.4.1").unwrap().to_string(), "12.4.1");
        for (bad, says) in [
            (
                "12.80",
                "CUDA 12.80 does not exist (CUDA 12 releases: 12.0,",
            ),
            ("12.7", "CUDA 12.7 does not exist"),
            ("99.0", "archsmith knows CUDA 10.2 to"),
            (
                "1.28",
                "CUDA 1.28 does not exist (archsmith knows CUDA 10.2 to",
            ),
            (
                "12",
                "`12` names no CUDA release: write major.minor (CUDA 12 releases",
            ),
            ("cu124", "`cu124` is not a CUDA version"),
            ("13.2+cu", "a CUDA release is major.minor"),
        ] {
            let e = cuda_release_in(kb, bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn toolchain_releases_of_a_pypi_major_are_pypis_to_confirm() {
        assert!(toolchain_cuda_release("13.9").is_ok());
        assert!(toolchain_cuda_release("14.0").is_err());
        assert!(toolchain_cuda_release("12.80").is_err());
        assert!(toolchain_cuda_release("13").is_err());
    }

    #[test]
    fn torch_releases_and_variants_are_checked() {
        let kb = kb();
        for good in [
            "2.6.0",
            "2.6",
            "2.6.0+cu118",
            "2.6.0+cpu",
            "2.15.0+cu132",
            "2.8.0.dev20250601",
        ] {
            assert!(torch_release_in(kb, good).is_ok(), "{good}");
        }
        for (bad, says) in [
            (
                "2.6.5",
                "torch 2.6.5 does not exist (torch 2.6 releases: 2.6.0)",
            ),
            (
                "2.99.0",
                "torch 2.99.0 does not exist (archsmith knows torch 1.12.1 to",
            ),
            (
                "2.6.0+cu999",
                "torch 2.6.0 has no cu999 build; its CUDA builds: cu118, cu124, cu126",
            ),
            ("2.6.0+rocm6.2", "is not a torch variant"),
            ("banana", "`banana` is not a torch version"),
        ] {
            let e = torch_release_in(kb, bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn audits_take_releases_older_than_the_rows_as_written() {
        assert!(audited_torch_release("1.0").is_ok());
        assert!(audited_torch_release("0.4.1").is_ok());
        assert!(audited_torch_release("2.3.5").is_err());
        assert!(audited_torch_release("banana").is_err());
    }

    #[test]
    fn a_variant_and_a_contradicting_cuda_are_refused() {
        let t: Version = "2.6.0+cu118".parse().unwrap();
        let c: Version = "12.4".parse().unwrap();
        let e = torch_and_cuda(Some(&t), Some(&c)).unwrap_err().to_string();
        assert!(e.contains("CUDA 11.8 build but --cuda 12.4"), "{e}");
        assert!(torch_and_cuda(Some(&t), Some(&"11.8".parse().unwrap())).is_ok());
        assert_eq!(variant_cuda(&t).unwrap().to_string(), "11.8");
    }

    #[test]
    fn drivers_read_like_nvidia_smi_prints_them() {
        for good in ["570.86.10", "535.104.05", "418.67", "595.45.04"] {
            assert!(driver_version(good).is_ok(), "{good}");
        }
        for bad in ["5.35", "570", "1570.1", "570.86.10.1", "latest", "570.86+x"] {
            assert!(driver_version(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn long_input_is_echoed_bounded() {
        let long = "8.9,".repeat(25_000);
        let e = echo(&long);
        assert!(e.len() < 120 && e.ends_with("(100000 characters)"), "{e}");
    }
}
