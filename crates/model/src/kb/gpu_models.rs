//! GPUs and their chips: the names users type, each GPU's compute capability (and the one it
//! reported to older CUDA releases), names that mean more than one GPU, and the chips the PCI ID
//! Repository's product names resolve through.

use super::{blank, invalid, pci_ids, KbError, KnowledgeBase};
use crate::cuda_arch::{Arch, Cc, Variant};
use crate::version::Version;
use serde::Deserialize;

/// The `segment` values a GPU row may have.
pub const GPU_SEGMENTS: [&str; 4] = ["data-centre", "workstation", "consumer", "jetson"];

/// One GPU model, its compute capability and the spellings users type.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuRow {
    pub name: String,
    #[serde(default)]
    pub aliases: Vec<String>,
    /// The compute capability it reports with the newest CUDA.
    pub cc: String,
    /// Where older CUDA releases gave it another compute capability (Jetson Thor: sm_101 through
    /// CUDA 12.9, sm_110 from 13.0), oldest first.
    #[serde(default)]
    pub earlier_cc: Vec<EarlierCc>,
    /// Its own minimum driver where that is newer than its architecture's (a GPU launched on a later
    /// driver branch than the first of its CC); otherwise the floor comes from the CUDA release
    /// that first compiled for its CC ([`KnowledgeBase::gpu_driver_floor`]).
    pub min_driver: Option<Version>,
    /// `data-centre`, `workstation`, `consumer` or `jetson`.
    pub segment: String,
    /// Where torch for this GPU comes from when PyPI's wheels are not built for it (Jetson's
    /// integrated GPUs run NVIDIA's JetPack builds): every official-wheel verdict says so instead
    /// of recommending `pip install torch`.
    pub torch_wheels: Option<TorchWheels>,
    pub source: String,
}

/// PyPI's torch wheels do not run on a GPU; what does.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TorchWheels {
    /// Why PyPI's do not, and where the builds that run come from.
    pub instead: String,
    pub source: String,
}

/// A compute capability a GPU reported up to a CUDA release.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EarlierCc {
    pub cc: String,
    /// The last CUDA release (major.minor) that gives the GPU this compute capability.
    pub through_cuda: Version,
    pub source: String,
}

impl GpuRow {
    /// The compute capability the GPU reports to software built with CUDA `cuda`.
    pub fn cc_with_cuda(&self, cuda: &Version) -> Result<Cc, crate::cuda_arch::ArchParseError> {
        let mm = cuda.major_minor();
        let earlier = self
            .earlier_cc
            .iter()
            .find(|e| mm <= e.through_cuda.major_minor());
        earlier.map_or(&self.cc, |e| &e.cc).parse()
    }
}

/// A GPU chip (`AD102`) and the compute capability of every product built on it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuChipRow {
    pub chip: String,
    pub cc: String,
    pub architecture: String,
    pub source: String,
}

/// A name people give to more than one GPU (`RTX 6000`: the Turing Quadro or the Ada card): a
/// lookup lists the candidates and asks, instead of picking one.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AmbiguousGpuNameRow {
    pub name: String,
    /// `[[gpu]]` names.
    pub candidates: Vec<String>,
    pub source: String,
}

impl KnowledgeBase {
    /// Finds a GPU by the name a user types: case, spaces, dashes and the vendor words
    /// (`NVIDIA`, `GeForce`, `Tesla`, `Quadro`) do not matter.
    /// Resolves a `--gpu` argument: a known GPU name, or a compute capability such as `8.9`.
    pub fn resolve_gpu(&self, query: &str) -> anyhow::Result<(String, Cc)> {
        if let Ok(cc) = query.parse::<Cc>() {
            // A compute capability no GPU has (99.0, 0.0) would be planned for silently.
            if self.target(Arch::plain(cc.major, cc.minor)).is_none() {
                let known: Vec<String> = self
                    .targets
                    .iter()
                    .filter_map(|t| t.arch.parse::<Arch>().ok())
                    .filter(|a| a.variant == Variant::Plain)
                    .map(|a| a.to_string())
                    .collect();
                anyhow::bail!(
                    "CC {cc} is no GPU's compute capability: give one of {} (or a GPU's name, `archs --list-gpus`)",
                    known.join(", ")
                );
            }
            return Ok((format!("CC {cc}"), cc));
        }
        // Compared lightly (case, spaces, dashes, "NVIDIA"): "Quadro RTX 6000" names one GPU
        // even though the full normalization would strip "Quadro".
        let q = light_gpu_name(query);
        if let Some(a) = self
            .ambiguous_gpu_names
            .iter()
            .find(|a| !q.is_empty() && light_gpu_name(&a.name) == q)
        {
            let listed: Vec<String> = a
                .candidates
                .iter()
                .filter_map(|c| self.gpu(c))
                .map(|g| format!("\"{}\" (CC {})", g.name, g.cc))
                .collect();
            anyhow::bail!(
                "`{}` names more than one GPU: {}; give the full name, or the compute capability (--gpu 8.9)",
                crate::kb::user_input::echo(query),
                listed.join(", ")
            );
        }
        if let Some(g) = self.gpu(query) {
            return Ok((g.name.clone(), g.cc.parse()?));
        }
        // A product the rows do not name, found in this machine's PCI ID Repository by its chip.
        match pci_ids::by_name(self, pci_ids::system_devices(), query) {
            Some(found) => Ok(found),
            None => {
                let q = normalize_gpu_name(query);
                let mut close: Vec<&str> = self
                    .gpus
                    .iter()
                    .filter(|g| {
                        let n = normalize_gpu_name(&g.name);
                        !q.is_empty() && (n.contains(&q) || q.contains(&n))
                    })
                    .map(|g| g.name.as_str())
                    .collect();
                close.truncate(6);
                let hint = if close.is_empty() {
                    String::new()
                } else {
                    format!(" Did you mean: {}?", close.join(", "))
                };
                let query = crate::kb::user_input::echo(query);
                anyhow::bail!("unknown GPU `{query}`.{hint} Give one of the {} GPUs `archs --list-gpus` lists (e.g. \"RTX 4090\", \"H100\", \"Jetson Orin\") or its compute capability, e.g. --gpu 8.9", self.gpus.len())
            }
        }
    }

    pub fn gpu(&self, query: &str) -> Option<&GpuRow> {
        let q = normalize_gpu_name(query);
        if q.is_empty() {
            return None;
        }
        self.gpus.iter().find(|g| {
            std::iter::once(&g.name)
                .chain(&g.aliases)
                .any(|n| normalize_gpu_name(n) == q)
        })
    }

    /// The compute capability GPU `name` (resolved as [`Self::resolve_gpu`], `cc` its answer)
    /// reports with CUDA `cuda`; `cc` itself for GPUs whose CC never changed.
    /// Every compute capability GPU `name` is known by: `cc` (its newest), then those older
    /// CUDA releases gave it, each with the last CUDA that used it. A binary built by one of those
    /// releases carries images for that name of the device (Jetson Thor: sm_101 through 12.9).
    pub fn gpu_ccs(&self, name: &str, cc: Cc) -> Vec<(Cc, Option<Version>)> {
        let mut out = vec![(cc, None)];
        if let Some(g) = self.gpu(name) {
            for e in g.earlier_cc.iter().rev() {
                if let Ok(c) = e.cc.parse() {
                    out.push((c, Some(e.through_cuda.clone())));
                }
            }
        }
        out
    }

    /// Where torch for GPU `name` comes from when PyPI's wheels do not run there.
    pub fn torch_wheels_instead(&self, name: &str) -> Option<&str> {
        self.gpu(name)
            .and_then(|g| g.torch_wheels.as_ref())
            .map(|w| w.instead.as_str())
    }

    pub fn gpu_cc_with_cuda(&self, name: &str, cc: Cc, cuda: &Version) -> Cc {
        self.gpu(name)
            .filter(|g| !g.earlier_cc.is_empty())
            .and_then(|g| g.cc_with_cuda(cuda).ok())
            .unwrap_or(cc)
    }

    /// Arch family name for a compute capability (`Hopper` for 9.0).
    pub fn family(&self, cc: Cc) -> Option<&str> {
        self.target(Arch::new(cc.major, cc.minor, Variant::Plain))
            .map(|t| t.family.as_str())
    }
}

/// A GPU name with case, spaces, dashes and a leading "NVIDIA" dropped: `NVIDIA RTX-6000` →
/// `rtx6000`. Keeps the words [`normalize_gpu_name`] strips, for names that differ only by them.
pub fn light_gpu_name(name: &str) -> String {
    let lower = name.trim().to_ascii_lowercase();
    let lower = lower.strip_prefix("nvidia").unwrap_or(&lower);
    lower
        .chars()
        .filter(|c| !c.is_whitespace() && *c != '-' && *c != '_')
        .collect()
}

/// `NVIDIA GeForce RTX-4090` → `rtx4090`. Public so tests and `doctor` agree on one spelling rule.
///
/// Lowercases and splits on whitespace, `-`, `_` and parentheses, then drops the words that never
/// tell two GPUs apart: vendor and product-line words (`NVIDIA`, `GeForce`, `Tesla`, `Quadro`, `GPU`,
/// `Laptop`, Jetson's `nvgpu`), memory sizes (`80GB`, `144G`) and form factors (`SXM4`, `PCIe`,
/// `HBM3e`), so `nvidia-smi`'s `NVIDIA A100-SXM4-80GB` and `NVIDIA H100 80GB HBM3` match `A100` and
/// `H100`. Words that do change the chip (`Ti`, `SUPER`, `Ada`, `NVL`, `Max-Q`) are kept.
pub fn normalize_gpu_name(name: &str) -> String {
    let lower = name.to_lowercase();
    lower
        .split(|c: char| c.is_whitespace() || matches!(c, '-' | '_' | '(' | ')'))
        .filter(|w| !w.is_empty() && !is_noise_word(w))
        .collect()
}

fn is_noise_word(w: &str) -> bool {
    if matches!(
        w,
        "nvidia" | "geforce" | "tesla" | "quadro" | "gpu" | "laptop" | "nvgpu" | "pcie" | "sxm"
    ) {
        return true;
    }
    let all_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    // Memory size: `80gb`, `144g`.
    if w.strip_suffix("gb")
        .or_else(|| w.strip_suffix('g'))
        .is_some_and(all_digits)
    {
        return true;
    }
    // Form factor with a generation: `sxm2`, `sxm5`.
    if w.strip_prefix("sxm").is_some_and(all_digits) {
        return true;
    }
    // Memory type: `hbm2`, `hbm2e`, `hbm3`, `hbm3e`.
    w.strip_prefix("hbm")
        .map(|r| r.strip_suffix('e').unwrap_or(r))
        .is_some_and(all_digits)
}

/// Each GPU row: a compute capability, a source, a known segment, names that say something.
pub(super) fn validate(kb: &KnowledgeBase) -> Result<(), KbError> {
    for g in &kb.gpus {
        if g.cc.parse::<Cc>().is_err() {
            return invalid(format!("gpu `{}` has cc `{}`, expected X.Y", g.name, g.cc));
        }
        if blank(&g.source) {
            return invalid(format!("gpu `{}` has no source", g.name));
        }
        if !GPU_SEGMENTS.contains(&g.segment.as_str()) {
            return invalid(format!(
                "gpu `{}` has segment `{}`, expected one of {GPU_SEGMENTS:?}",
                g.name, g.segment
            ));
        }
        if let Some(n) = std::iter::once(&g.name)
            .chain(&g.aliases)
            .find(|n| normalize_gpu_name(n).is_empty())
        {
            return invalid(format!(
                "gpu `{}`: name `{n}` normalizes to nothing",
                g.name
            ));
        }
    }
    Ok(())
}

/// `archs --list-gpus`: every GPU row, its compute capability, segment and other names.
pub fn gpu_table() -> String {
    let mut t = crate::output::Table::new(["GPU", "CC", "SEGMENT", "ALSO"]);
    for g in &super::kb().gpus {
        t.row([
            g.name.clone(),
            g.cc.clone(),
            g.segment.clone(),
            g.aliases.join(", "),
        ]);
    }
    t.render()
}
