//! Which CUDA release compiles a build: torch's own (or another minor of its major), or for a
//! stable-ABI build, which links the runtime in, the oldest archsmith provides that covers the
//! asked archs — by SASS where it can build them, by the PTX of its newest arch beyond that.

use super::{choose_cuda, EnvInfo};
use crate::arch::spec::{Plan, PlanContext, Target};
use crate::cuda_arch::{Arch, Variant};
use crate::kb::kb;
use crate::toolchain;
use crate::version::Version;
use anyhow::Result;

/// The release that compiles, where it comes from when not torch's own, and the arch list it
/// builds instead of the asked one where it covers some of them by PTX.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompilingCuda {
    pub cuda: Version,
    pub whence: Option<&'static str>,
    pub cover: Option<PtxCover>,
}

/// Asked archs newer than the compiling toolkit builds, run from the PTX of its newest arch,
/// which the driver JIT-compiles at first load (CUDA 12.4: SASS up to sm_90, `compute_90` PTX
/// for sm_100 and sm_120), so one old toolkit keeps the wheel on its major's oldest drivers.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PtxCover {
    /// The `--arch` as asked.
    pub asked: String,
    /// The TORCH_CUDA_ARCH_LIST built instead (`7.5;9.0+PTX`).
    pub built: String,
    /// The asked archs that get no SASS (`sm_120`).
    pub ptx_for: Vec<String>,
    /// The PTX they run (`compute_90`).
    pub ptx: String,
    /// The first CUDA release whose nvcc builds SASS for all of `ptx_for`.
    pub sass_from_cuda: String,
    /// The oldest driver that JIT-compiles the PTX (the compiling release's own minimum).
    pub jit_driver_floor: Option<String>,
    /// One sentence for people.
    pub said: String,
}

/// The CUDA release that will really compile, and where it comes from when not torch's own:
/// `asked` (`--cuda`: torch's major, any major for a stable build, which links its runtime in),
/// else torch's release or another minor of its major ([`compile_release`]: a cu117 torch builds
/// sm_90 with 11.8), else for a stable build of target `stable` the oldest that covers `arch`
/// ([`oldest_covering_release`]). The plan is then checked against that nvcc.
pub fn compiling_cuda(
    env: &EnvInfo,
    asked: Option<&Version>,
    stable: Option<&Version>,
    arch: &str,
) -> Result<CompilingCuda> {
    let plain = |(cuda, whence)| CompilingCuda {
        cuda,
        whence,
        cover: None,
    };
    if let (Some(r), Some(_), Some(_)) = (asked, stable, &env.torch_cuda) {
        return Ok(plain((r.clone(), None)));
    }
    let cuda = choose_cuda(&env.torch, env.torch_cuda.as_ref(), asked)?;
    Ok(match (asked, stable) {
        (Some(_), _) => plain((cuda, None)),
        (None, Some(target)) => oldest_covering_release(target, &env.torch, &cuda, arch),
        (None, None) => plain(compile_release(&cuda)),
    })
}

/// The CUDA release a stable-ABI build compiles with: the oldest archsmith provides (Debian's
/// archive, older than torch's `cuda`) that the target release `target` supports (the knowledge
/// base's `min_cuda_source_build` of it: 12.0 for 2.10) and that builds every arch of `arch`,
/// so the wheel runs on the oldest drivers (each CUDA major's minor-version-compatibility
/// floor); else the oldest whose newest arch's PTX runs on the asked archs it cannot build
/// ([`ptx_cover`]); else torch's `cuda`, compiled as [`compile_release`] would. Such a build
/// links the runtime in and reaches torch only through C shims, so torch's own CUDA major does
/// not bind it.
pub fn oldest_covering_release(
    target: &Version,
    torch: &Version,
    cuda: &Version,
    arch: &str,
) -> CompilingCuda {
    let floor = kb()
        .torch_row(target)
        .and_then(|row| row.min_cuda_source_build.clone());
    let mut older: Vec<Version> = kb()
        .debian_archive_toolkits()
        .map(|p| p.cuda.clone())
        .filter(|c| *c < cuda.major_minor())
        .filter(|c| floor.as_ref().is_none_or(|f| c >= f))
        .collect();
    older.sort();
    let torch = super::base_version(torch);
    let ctx = |c: &Version| PlanContext::new(Some(torch.clone()), Some(c.clone()));
    if let Some(c) = older.iter().find(|c| Plan::parse(&ctx(c), arch).is_ok()) {
        return CompilingCuda {
            cuda: c.clone(),
            whence: Some(
                "from Debian's archive: the oldest that builds every asked arch, for the oldest drivers",
            ),
            cover: None,
        };
    }
    if let Some((c, cover)) = older
        .iter()
        .find_map(|c| ptx_cover(&ctx(c), arch, cuda).map(|cover| (c, cover)))
    {
        return CompilingCuda {
            cuda: c.clone(),
            whence: Some("from Debian's archive: the oldest that builds the asked archs or their PTX, for the oldest drivers"),
            cover: Some(cover),
        };
    }
    let (cuda, whence) = compile_release(cuda);
    CompilingCuda {
        cuda,
        whence,
        cover: None,
    }
}

/// `arch` built by `ctx.cuda` with the asked archs it cannot build replaced by the PTX of the
/// newest plain arch it builds (and torch accepts): None where an asked arch is not newer than
/// that one (PTX runs only on its own compute capability and later), is arch- or
/// family-specific (their features are not in any older PTX), or predates the toolkit.
/// `newer`: the release that would build their SASS instead (torch's), for the advice.
fn ptx_cover(ctx: &PlanContext, arch: &str, newer: &Version) -> Option<PtxCover> {
    let plan = Plan::parse_unvalidated(ctx, arch).ok()?;
    let accepted = kb().torch_arch_list(&ctx.torch)?;
    let newest: Arch = kb()
        .cuda_targets(&ctx.cuda)
        .into_iter()
        .filter(|a| a.variant == Variant::Plain)
        .filter(|a| accepted.supported.iter().any(|s| *s == a.to_string()))
        .max()?;
    let (builds, beyond): (Vec<Target>, Vec<Target>) = plan
        .targets
        .iter()
        .partition(|t| kb().cuda_supports(&ctx.cuda, t.arch));
    let coverable = |t: &Target| {
        t.arch.variant == Variant::Plain
            && t.arch.cc() > newest.cc()
            && kb()
                .target(t.arch)
                .is_some_and(|row| row.first_cuda > ctx.cuda)
    };
    if beyond.is_empty() || !beyond.iter().all(coverable) {
        return None;
    }
    let mut targets: Vec<Target> = builds.into_iter().filter(|t| t.arch != newest).collect();
    targets.push(Target {
        arch: newest,
        ptx: true,
    });
    targets.sort_by_key(|t| t.arch);
    let built = targets
        .iter()
        .map(Target::to_string)
        .collect::<Vec<_>>()
        .join(";");
    Plan::parse(ctx, &built).ok()?;
    let ptx_for: Vec<String> = beyond.iter().map(|t| t.arch.sm()).collect();
    let sass_from_cuda = beyond
        .iter()
        .filter_map(|t| kb().target(t.arch).map(|r| r.first_cuda.clone()))
        .max()?;
    let jit_driver_floor = kb().ptx_min_driver(&ctx.cuda).map(|d| d.to_string());
    let (it, its) = match ptx_for.len() {
        1 => ("it", "its"),
        _ => ("them", "their"),
    };
    let said = format!(
        "{}: no SASS from CUDA {} (nvcc builds {it} from CUDA {sass_from_cuda}); {it} {} the {} PTX, which the driver JIT-compiles at first load{}. Give --cuda {} (torch's) for {its} SASS, on CUDA {}.x's drivers",
        ptx_for.join(", "),
        ctx.cuda,
        if ptx_for.len() == 1 { "runs" } else { "run" },
        newest.compute(),
        jit_driver_floor
            .as_ref()
            .map(|d| format!(" (a driver >= {d})"))
            .unwrap_or_default(),
        newer.major_minor(),
        newer.major(),
    );
    Some(PtxCover {
        asked: arch.to_string(),
        built,
        ptx_for,
        ptx: newest.compute(),
        sass_from_cuda: sass_from_cuda.to_string(),
        jit_driver_floor,
        said,
    })
}

/// The CUDA release a build for a torch of CUDA `cuda` compiles with, and where it comes from when
/// it is another minor of the same major (torch's cpp_extension accepts any minor of its own
/// major: it warns). In order: `cuda` where PyPI has it or the machine has it; the newest toolkit
/// of that major on this machine; `cuda` where Debian's archive has it; the newest of that major
/// the archive has. Installs nothing; `cuda` when nothing of the major is known (the install then
/// says what to do).
pub fn compile_release(cuda: &Version) -> (Version, Option<&'static str>) {
    if toolchain::from_pypi(cuda) {
        return (cuda.clone(), None);
    }
    let usable: Vec<Version> = toolchain::discover()
        .unwrap_or_default()
        .into_iter()
        .filter(|t| t.usable)
        .filter_map(|t| t.cuda)
        .filter(|c| c.major() == cuda.major())
        .collect();
    if usable.iter().any(|c| c.major_minor() == cuda.major_minor()) {
        return (cuda.clone(), None);
    }
    if let Some(found) = usable.into_iter().max() {
        return (found, Some("found on this machine"));
    }
    if kb().debian_archive_toolkit(cuda).is_some() {
        return (cuda.clone(), None);
    }
    match kb().debian_archive_releases(cuda.major()).pop() {
        Some(archive) => (archive, Some("from Debian's archive")),
        None => (cuda.clone(), None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stable-ABI build compiles with the oldest toolkit archsmith provides that builds the
    /// asked archs and that its target release supports: Debian's 12.4 for sm_90 on a 2.10
    /// target (12.0 and up); 12.4 again for sm_100/sm_120, by its compute_90 PTX, which the
    /// driver JITs there; torch's own CUDA where an asked arch is arch-specific beyond 12.4
    /// (sm_100a: no older PTX has its features) or the target supports nothing older (2.15:
    /// 12.6 and up). Read from the knowledge base only.
    #[test]
    fn a_stable_build_compiles_with_the_oldest_toolkit_that_covers_its_archs() {
        let v = |s: &str| -> Version { s.parse().unwrap() };
        let target = crate::codemod::catalogue::torch_target_release("0x020a000000000000");
        assert_eq!(target, Some(v("2.10.0")));
        assert_eq!(
            crate::codemod::catalogue::torch_target_release("2.10"),
            None
        );
        let (torch, cuda) = (v("2.15.0"), v("13.2"));
        let chosen =
            |target: &str, arch: &str| oldest_covering_release(&v(target), &torch, &cuda, arch);
        let full = chosen("2.10.0", "7.5,8.9,9.0");
        assert_eq!((full.cuda, full.cover), (v("12.4"), None));
        assert_eq!(chosen("2.10.0", "9.0").cuda, v("12.4"));

        let covered = chosen("2.10.0", "8.9,9.0,12.0");
        assert_eq!(covered.cuda, v("12.4"));
        let cover = covered.cover.expect("sm_120 by PTX");
        assert_eq!(cover.built, "8.9;9.0+PTX");
        assert_eq!(cover.ptx_for, ["sm_120"]);
        assert_eq!(cover.ptx, "compute_90");
        assert_eq!(cover.sass_from_cuda, "12.8");
        assert_eq!(
            cover.jit_driver_floor,
            kb().ptx_min_driver(&v("12.4")).map(|d| d.to_string())
        );
        assert!(
            cover.said.starts_with("sm_120: no SASS from CUDA 12.4 (nvcc builds it from CUDA 12.8); it runs the compute_90 PTX")
                && cover.said.ends_with("Give --cuda 13.2 (torch's) for its SASS, on CUDA 13.x's drivers"),
            "{}",
            cover.said
        );
        // An asked arch alone beyond the toolkit: sm_90's SASS and PTX carry it.
        let alone = chosen("2.10.0", "10.0,12.0").cover.expect("by PTX");
        assert_eq!((alone.built.as_str(), alone.ptx_for.len()), ("9.0+PTX", 2));

        assert_eq!(
            chosen("2.10.0", "9.0,10.0a"),
            CompilingCuda {
                cuda: v("13.2"),
                whence: None,
                cover: None
            }
        );
        assert_eq!(chosen("2.15.0", "9.0").cuda, v("13.2"));
    }
}
