//! Exact reproductions of torch's two `TORCH_CUDA_ARCH_LIST` parsers, per torch release.
//!
//! * [`cpp_extension_flags`] is `torch.utils.cpp_extension._get_cuda_arch_flags` (setup.py and JIT
//!   extension builds): spaces become `;`, named arches are expanded by plain substring replacement in
//!   torch's order, every element must be in that release's `supported_arches` (optionally `+PTX`), and
//!   the flags come back as `sorted(set(flags))`, a byte-wise string sort.
//! * [`cmake_flags`] is `CUDA_SELECT_NVCC_ARCH_FLAGS` from `select_compute_arch.cmake` (torch's own
//!   build and CMake consumers of TorchConfig): names give SASS only unless written `+PTX`, `f` and
//!   `X.Y(A.B)` are accepted, flags keep input order.
//!
//! The tables (names, supported archs) come from the knowledge base; the algorithms are torch's,
//! including its quirks (`Hopper+PTX` → `9.0+PTX+PTX` is rejected by Python), because users hit them.
//! `xtask/tests/torch_arch_flags.rs` runs the real torch function beside this one.

use crate::kb::kb;
use crate::version::Version;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TorchFlagsError {
    /// torch raises `ValueError: Unknown CUDA arch (X) or GPU not supported`.
    #[error("torch {torch} rejects `{e}`: ValueError: Unknown CUDA arch ({e}) or GPU not supported", e = crate::kb::user_input::echo(.element))]
    UnknownArch { torch: Version, element: String },
    /// Unset, empty or `native`: torch detects the visible GPUs; with none it raises IndexError.
    #[error("torch {torch} detects visible GPUs when TORCH_CUDA_ARCH_LIST is {what}; with no GPU it fails with IndexError: list index out of range")]
    NeedsGpu { torch: Version, what: &'static str },
    /// CMake: `Found Unknown CUDA Architecture Name in CUDA_SELECT_NVCC_ARCH_FLAGS: X`.
    #[error("torch {torch}'s CMake rejects `{e}`: Found Unknown CUDA Architecture Name in CUDA_SELECT_NVCC_ARCH_FLAGS: {e}", e = crate::kb::user_input::echo(.element))]
    CmakeUnknown { torch: Version, element: String },
    /// CMake keywords whose meaning depends on the GPUs present or the CUDA version's lists.
    #[error(
        "`{keyword}` makes torch's CMake choose archs itself ({meaning}); name the archs instead"
    )]
    CmakeKeyword {
        keyword: String,
        meaning: &'static str,
    },
    #[error("archsmith has no {parser} table of TORCH_CUDA_ARCH_LIST for torch {torch}; it has tables for torch {known}")]
    UnknownTorch {
        /// Which of torch's two parsers: `cpp_extension` or `CMake`.
        parser: &'static str,
        torch: Version,
        known: String,
    },
}

/// `_get_cuda_arch_flags()` for `TORCH_CUDA_ARCH_LIST=list` under torch `torch`, on a machine with no
/// GPU and no user `arch` flags in `extra_compile_args`.
pub fn cpp_extension_flags(
    torch: &Version,
    list: Option<&str>,
) -> Result<Vec<String>, TorchFlagsError> {
    let row = kb().torch_arch_list(torch).ok_or_else(|| {
        let ranges = kb().torch_arch_lists.iter().map(|r| (&r.from, &r.to));
        unknown_torch("cpp_extension", ranges, torch)
    })?;
    let list = match list {
        None => {
            return Err(TorchFlagsError::NeedsGpu {
                torch: torch.clone(),
                what: "unset",
            })
        }
        Some("") => {
            return Err(TorchFlagsError::NeedsGpu {
                torch: torch.clone(),
                what: "empty",
            })
        }
        Some("native") if row.native_keyword => {
            return Err(TorchFlagsError::NeedsGpu {
                torch: torch.clone(),
                what: "`native`",
            })
        }
        Some(l) => l,
    };
    let mut expanded = list.replace(' ', ";");
    for (name, expansion) in &row.named {
        expanded = expanded.replace(name.as_str(), expansion);
    }
    let mut flags = Vec::new();
    for element in expanded.split(';') {
        let base = element.strip_suffix("+PTX").unwrap_or(element);
        if !row.supported.iter().any(|s| s == base) {
            return Err(TorchFlagsError::UnknownArch {
                torch: torch.clone(),
                element: element.to_string(),
            });
        }
        // torch's format: num = major + minor with the suffix kept (`9.0a` → `90a`).
        let num = base.replacen('.', "", 1);
        flags.push(format!("-gencode=arch=compute_{num},code=sm_{num}"));
        if element.ends_with("+PTX") {
            flags.push(format!("-gencode=arch=compute_{num},code=compute_{num}"));
        }
    }
    flags.sort();
    flags.dedup();
    Ok(flags)
}

/// What `CUDA_SELECT_NVCC_ARCH_FLAGS(out LIST)` produces: the flags in CMake's order (every SASS
/// target first, then every PTX target) as `-gencode arch=…,code=…` pairs joined by a space.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmakeFlags {
    pub flags: Vec<String>,
    /// `sm_75 sm_90 compute_90`: the `_readable` output variable.
    pub readable: Vec<String>,
}

pub fn cmake_flags(torch: &Version, list: &str) -> Result<CmakeFlags, TorchFlagsError> {
    let row = kb().torch_cmake_arch_list(torch).ok_or_else(|| {
        let ranges = kb().torch_cmake_arch_lists.iter().map(|r| (&r.from, &r.to));
        unknown_torch("CMake", ranges, torch)
    })?;
    let trimmed = list;
    match trimmed {
        "" | "Auto" => {
            return Err(TorchFlagsError::CmakeKeyword {
                keyword: if trimmed.is_empty() { "(empty)".into() } else { trimmed.into() },
                meaning: "it runs a detection program and falls back to the CUDA release's `Common` list when no GPU is found; that list contains sm_50, which CUDA 13 rejects",
            })
        }
        "All" => {
            return Err(TorchFlagsError::CmakeKeyword {
                keyword: "All".into(),
                meaning: "every name in CUDA_KNOWN_GPU_ARCHITECTURES, which with CUDA 13 still includes archs nvcc 13 rejects",
            })
        }
        "Common" => {
            return Err(TorchFlagsError::CmakeKeyword {
                keyword: "Common".into(),
                meaning: "the CUDA release's CUDA_COMMON_GPU_ARCHITECTURES, which with CUDA 13 still includes sm_50",
            })
        }
        _ => {}
    }
    // string(REGEX REPLACE "[ \t]+" ";") then list(REMOVE_DUPLICATES); CMake lists drop empty items.
    let mut elements: Vec<String> = Vec::new();
    for e in trimmed.split([' ', '\t', ';']).filter(|e| !e.is_empty()) {
        if !elements.iter().any(|x| x == e) {
            elements.push(e.to_string());
        }
    }
    let mut bins: Vec<String> = Vec::new();
    let mut ptxs: Vec<String> = Vec::new();
    for element in &elements {
        let (name, add_ptx) = match element.strip_suffix("+PTX") {
            Some(n) => (n, true),
            None => (element.as_str(), false),
        };
        let (bin, ptx): (Vec<String>, Vec<String>) = if row.number.regex.is_match(name) {
            (vec![name.to_string()], vec![name.to_string()])
        } else if let Some(n) = row.named.iter().find(|n| n.name == name) {
            let ptx = if n.ptx.is_empty() {
                n.bin.clone()
            } else {
                n.ptx.clone()
            };
            (n.bin.clone(), ptx)
        } else {
            return Err(TorchFlagsError::CmakeUnknown {
                torch: torch.clone(),
                element: name.to_string(),
            });
        };
        bins.extend(bin);
        if add_ptx {
            ptxs.extend(ptx);
        }
    }
    // Dots removed, then the release's REGEX MATCHALL for bins and for PTX.
    let match_all = |items: &[String], re: &regex::Regex| -> Vec<String> {
        let joined = items.join(";").replace('.', "");
        dedup(
            re.find_iter(&joined)
                .map(|m| m.as_str().to_string())
                .collect(),
        )
    };
    let bins = match_all(&bins, &row.bin_matchall.regex);
    let ptxs = match_all(&ptxs, &row.ptx_matchall.regex);
    let mut flags = Vec::new();
    let mut readable = Vec::new();
    for b in &bins {
        if let Some((code, arch)) = b.strip_suffix(')').and_then(|s| s.split_once('(')) {
            flags.push(format!("-gencode arch=compute_{arch},code=sm_{code}"));
            readable.push(format!("sm_{code}"));
        } else {
            flags.push(format!("-gencode arch=compute_{b},code=sm_{b}"));
            readable.push(format!("sm_{b}"));
        }
    }
    for p in &ptxs {
        flags.push(format!("-gencode arch=compute_{p},code=compute_{p}"));
        readable.push(format!("compute_{p}"));
    }
    Ok(CmakeFlags { flags, readable })
}

fn dedup(v: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for x in v {
        if !out.contains(&x) {
            out.push(x);
        }
    }
    out
}

/// No table of `parser` for `torch`; `ranges` are the releases it has tables for.
fn unknown_torch<'a>(
    parser: &'static str,
    ranges: impl Iterator<Item = (&'a Version, &'a Version)>,
    torch: &Version,
) -> TorchFlagsError {
    let known = ranges
        .map(|(from, to)| format!("{from}–{to}"))
        .collect::<Vec<_>>()
        .join(", ");
    TorchFlagsError::UnknownTorch {
        parser,
        torch: torch.clone(),
        known,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn py(torch: &str, list: &str) -> Result<Vec<String>, TorchFlagsError> {
        cpp_extension_flags(&torch.parse().unwrap(), Some(list))
    }

    fn gencode(pairs: &[(&str, &str)]) -> Vec<String> {
        pairs
            .iter()
            .map(|(a, c)| format!("-gencode=arch=compute_{a},code={c}"))
            .collect()
    }

    #[test]
    fn research_examples_for_2_15() {
        assert_eq!(
            py("2.15", "8.0;8.6+PTX").unwrap(),
            gencode(&[("80", "sm_80"), ("86", "compute_86"), ("86", "sm_86")])
        );
        assert_eq!(
            py("2.15", "8.0 8.6+PTX").unwrap(),
            py("2.15", "8.0;8.6+PTX").unwrap()
        );
        assert_eq!(py("2.15", "9.0a").unwrap(), gencode(&[("90a", "sm_90a")]));
        assert_eq!(
            py("2.15", "Hopper").unwrap(),
            gencode(&[("90", "compute_90"), ("90", "sm_90")])
        );
        assert_eq!(
            py("2.15", "Rubin").unwrap(),
            gencode(&[("107", "compute_107"), ("107", "sm_107")])
        );
        // Byte-wise sort: compute_100 sorts before compute_75.
        assert_eq!(
            py("2.15", "7.5;10.0").unwrap(),
            gencode(&[("100", "sm_100"), ("75", "sm_75")])
        );
        for bad in [
            "10.0f",
            "12.0f",
            "7.5;",
            "sm_80",
            "8.6(8.0)",
            "Hopper+PTX",
            "hopper",
            "7.5,8.0",
            "7.5\t8.0",
        ] {
            assert!(
                matches!(py("2.15", bad), Err(TorchFlagsError::UnknownArch { .. })),
                "{bad}"
            );
        }
        assert!(matches!(
            py("2.15", "native"),
            Err(TorchFlagsError::NeedsGpu { .. })
        ));
    }

    #[test]
    fn per_version_differences_come_from_the_table() {
        // 9.0a: accepted from 2.2.
        assert!(py("2.1", "9.0a").is_err());
        assert!(py("2.2", "9.0a").is_ok());
        // 10.0a: accepted from 2.7.
        assert!(py("2.6", "10.0a").is_err());
        assert_eq!(py("2.7", "10.0a").unwrap(), gencode(&[("100a", "sm_100a")]));
        // Blackwell grew: 2.6 → sm_100+PTX, 2.7 → 10.0;12.0+PTX, 2.8 → 10.0;10.3;12.0;12.1+PTX.
        assert_eq!(
            py("2.6", "Blackwell").unwrap(),
            gencode(&[("100", "compute_100"), ("100", "sm_100")])
        );
        assert_eq!(
            py("2.7", "Blackwell").unwrap(),
            gencode(&[("100", "sm_100"), ("120", "compute_120"), ("120", "sm_120")])
        );
        assert_eq!(py("2.8", "Blackwell").unwrap().len(), 5);
        // Blackwell+Tegra: sm_101 in 2.7–2.8, sm_110 from 2.9.
        assert_eq!(
            py("2.8", "Blackwell+Tegra").unwrap(),
            gencode(&[("101", "sm_101")])
        );
        assert_eq!(
            py("2.9", "Blackwell+Tegra").unwrap(),
            gencode(&[("110", "sm_110")])
        );
        // Ampere+Tegra only from 2.1; before, "Ampere" is replaced inside it.
        assert!(
            matches!(py("2.0", "Ampere+Tegra"), Err(TorchFlagsError::UnknownArch { element, .. }) if element == "8.6+PTX+Tegra")
        );
        assert_eq!(
            py("2.1", "Ampere+Tegra").unwrap(),
            gencode(&[("87", "sm_87")])
        );
        // `native` is a keyword from 2.9; before it is just an unknown arch.
        assert!(matches!(
            py("2.8", "native"),
            Err(TorchFlagsError::UnknownArch { .. })
        ));
        // No `f` in any release.
        for t in ["1.12", "2.0", "2.6", "2.9", "2.15"] {
            assert!(py(t, "10.0f").is_err(), "{t}");
        }
    }

    #[test]
    fn unknown_torch_release_is_named() {
        let e = cpp_extension_flags(&"1.4".parse().unwrap(), Some("7.5")).unwrap_err();
        assert!(
            e.to_string()
                .contains("no cpp_extension table of TORCH_CUDA_ARCH_LIST for torch 1.4"),
            "{e}"
        );
    }

    fn cm(list: &str) -> Vec<String> {
        cmake_flags(&"2.15".parse().unwrap(), list).unwrap().flags
    }

    #[test]
    fn cmake_examples_from_research() {
        assert_eq!(cm("10.0f"), ["-gencode arch=compute_100f,code=sm_100f"]);
        assert_eq!(
            cm("12.0f+PTX"),
            [
                "-gencode arch=compute_120f,code=sm_120f",
                "-gencode arch=compute_120f,code=compute_120f"
            ]
        );
        assert_eq!(cm("8.6(8.0)"), ["-gencode arch=compute_80,code=sm_86"]);
        assert_eq!(cm("Hopper"), ["-gencode arch=compute_90,code=sm_90"]);
        assert_eq!(
            cm("Hopper+PTX"),
            [
                "-gencode arch=compute_90,code=sm_90",
                "-gencode arch=compute_90,code=compute_90"
            ]
        );
        assert_eq!(cm("Ampere+PTX").len(), 4);
        assert!(matches!(
            cmake_flags(&"2.15".parse().unwrap(), "Foo"),
            Err(TorchFlagsError::CmakeUnknown { .. })
        ));
        assert!(matches!(
            cmake_flags(&"2.15".parse().unwrap(), "Common"),
            Err(TorchFlagsError::CmakeKeyword { .. })
        ));
    }
}
