//! What the arch model answers, as reports the commands render: a plan for a spec with every way
//! it is written and read ([`plan_report`]), whether GPUs run it ([`gpu_verdicts`]), what a driver
//! runs ([`describe_driver`]) and which official torch builds run on given GPUs ([`torch_options`]).
//! `archs`, `doctor`, `verify` and build-torch's "should you build at all" all ask here.

use super::compat::{runs_on, Image, PtxJit, Verdict};
use super::spec::{consumer_reports, ConsumerReport, Plan, PlanContext};
use crate::cuda_arch::{Arch, Cc};
use crate::kb::kb;
use crate::output::Table;
use crate::version::Version;
use anyhow::{bail, Result};
use serde::Serialize;

#[derive(Debug, Serialize)]
pub struct ReleaseChoice {
    pub version: String,
    /// True when the user gave no version and the newest known release was assumed.
    pub assumed: bool,
    /// The CUDA of the given torch release's default PyPI variant was taken.
    pub from_torch: bool,
}

#[derive(Debug, Serialize)]
pub struct GpuVerdict {
    pub name: String,
    pub cc: Cc,
    pub runs: bool,
    pub via: Option<String>,
    pub reason: String,
}

#[derive(Debug, Serialize)]
pub struct ArchsReport {
    pub input: String,
    pub torch: ReleaseChoice,
    pub cuda: ReleaseChoice,
    pub torch_cuda_arch_list: String,
    pub gencode: Vec<String>,
    pub sass: Vec<String>,
    pub ptx: Vec<String>,
    pub cmake_cuda_architectures: String,
    pub notes: Vec<String>,
    pub consumers: Vec<ConsumerReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpus: Option<Vec<GpuVerdict>>,
    /// With `--src`: what each arch cost in that source's last build (none where it has none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_build: Option<crate::build_insight::arch_cost_records::LastBuild>,
}

/// What `archs` asks for: a spec, optional releases, GPUs and driver to check the plan against.
#[derive(Debug, Clone)]
pub struct PlanRequest {
    pub arch: crate::arch::spec::ArchSpec,
    pub torch: Option<Version>,
    pub cuda: Option<Version>,
    pub gpus: Vec<String>,
    pub driver: Option<Version>,
}

/// Plans `args.arch` for the chosen (or newest known) torch and CUDA: every way the list is written
/// and read, and, for each named GPU, whether the result runs there.
pub fn plan_report(args: &PlanRequest) -> Result<ArchsReport> {
    crate::kb::user_input::torch_and_cuda(args.torch.as_ref(), args.cuda.as_ref())?;
    let ctx = PlanContext::new(args.torch.clone(), args.cuda.clone());
    let plan = match Plan::parse(&ctx, &args.arch) {
        Ok(p) => p,
        Err(e) => bail!(
            "invalid --arch `{}`:\n{e}",
            crate::kb::user_input::echo(&args.arch)
        ),
    };
    let mut notes = version_notes(&ctx);
    notes.extend(plan.notes.iter().cloned());
    if plan.has_family_targets() {
        notes.push("`f` targets: torch's cpp_extension rejects them in TORCH_CUDA_ARCH_LIST; pass them as -gencode in extra_compile_args['nvcc'] (which disables torch's own arch flags) or build through CMake".into());
    }
    let gpus = if args.gpus.is_empty() {
        None
    } else {
        Some(gpu_verdicts(&ctx, &plan, &args.gpus, args.driver.as_ref())?)
    };
    Ok(ArchsReport {
        input: crate::kb::user_input::echo(&args.arch),
        torch: ReleaseChoice {
            version: ctx.torch.to_string(),
            assumed: ctx.torch_assumed,
            from_torch: false,
        },
        cuda: ReleaseChoice {
            version: ctx.cuda.to_string(),
            assumed: ctx.cuda_assumed,
            from_torch: ctx.cuda_from_torch,
        },
        torch_cuda_arch_list: plan.torch_cuda_arch_list(),
        gencode: plan.gencode(),
        sass: plan.sass().iter().map(|a| a.sm()).collect(),
        ptx: plan.ptx().iter().map(|a| a.compute()).collect(),
        cmake_cuda_architectures: plan.cmake_cuda_architectures(),
        consumers: consumer_reports(&ctx, &args.arch, &plan),
        notes,
        gpus,
        last_build: None,
    })
}

/// What the plan assumed about the torch and CUDA versions, and what a CPU build of torch means.
fn version_notes(ctx: &PlanContext) -> Vec<String> {
    let mut notes = Vec::new();
    if ctx.torch_assumed || ctx.cuda_assumed {
        notes.push(format!(
            "no {} given: planned for the newest known {}; pass them to plan for your versions",
            match (ctx.torch_assumed, ctx.cuda_assumed) {
                (true, true) => "--torch/--cuda",
                (true, false) => "--torch",
                _ => "--cuda",
            },
            match (ctx.torch_assumed, ctx.cuda_assumed) {
                (true, true) => format!("torch {} and CUDA {}", ctx.torch, ctx.cuda),
                (true, false) => format!("torch {}", ctx.torch),
                _ => format!("CUDA {}", ctx.cuda),
            }
        ));
    }
    let cpu_build = ctx
        .torch
        .to_string()
        .split_once('+')
        .is_some_and(|(_, local)| local == "cpu");
    if cpu_build {
        // A CPU build of torch has no CUDA: nothing planned here runs with it.
        notes.push(format!(
            "torch {} is a CPU-only build: it has no CUDA, so it compiles and runs no GPU code; this plan (CUDA {}) is for torch {} with CUDA (PyPI's default variant, or +cuXYZ)",
            ctx.torch,
            ctx.cuda,
            ctx.torch.to_string().split('+').next().unwrap_or_default()
        ));
    } else if ctx.cuda_from_torch && crate::kb::user_input::variant_cuda(&ctx.torch).is_some() {
        notes.push(format!(
            "no --cuda given: planned for CUDA {}, the CUDA of torch {}",
            ctx.cuda, ctx.torch
        ));
    } else if ctx.cuda_from_torch {
        notes.push(format!(
            "no --cuda given: planned for CUDA {}, the variant torch {} is built with on PyPI (cu{}{}); pass --cuda for another",
            ctx.cuda,
            ctx.torch,
            ctx.cuda.major(),
            ctx.cuda.minor()
        ));
    }
    notes
}

/// Per GPU query: does the plan run there, through which image, and if not why (and whether the
/// chosen CUDA could fix it at all).
pub fn gpu_verdicts(
    ctx: &PlanContext,
    plan: &Plan,
    queries: &[String],
    driver: Option<&Version>,
) -> Result<Vec<GpuVerdict>> {
    let jit = PtxJit {
        driver: driver.cloned(),
        ptx_min_driver: kb().ptx_min_driver(&ctx.cuda),
        ptx_cuda: Some(ctx.cuda.clone()),
    };
    let images = plan.images();
    queries
        .iter()
        .map(|q| {
            let (name, newest_cc) = kb().resolve_gpu(q)?;
            let cc = kb().gpu_cc_with_cuda(&name, newest_cc, &ctx.cuda);
            let Verdict {
                mut runs,
                via,
                mut reason,
            } = runs_on(&images, cc, &jit);
            if cc != newest_cc {
                reason = format!("{reason} ({name} reports CC {cc} with CUDA {}, CC {newest_cc} from a later CUDA)", ctx.cuda);
            }
            // The driver decides before any image does: too old for the build's CUDA, or for
            // the GPU itself, nothing runs (the same rule as doctor's).
            let driver_problems: Vec<String> = below_cuda_floor(driver, &ctx.cuda)
                .into_iter()
                .chain(below_gpu_floor(&name, cc, driver))
                .collect();
            if !driver_problems.is_empty() {
                let problem = format!(
                    "{}: update the driver",
                    driver_problems.join("; ")
                );
                reason = if runs {
                    problem
                } else {
                    format!("{problem}; and {reason}")
                };
                runs = false;
            }
            if !runs {
                if let Some(limit) = cuda_limit(&ctx.cuda, cc) {
                    reason = format!("{reason}. But {limit}");
                }
            }
            Ok(GpuVerdict {
                name,
                cc,
                runs,
                via: via.map(|i| i.name()),
                reason,
            })
        })
        .collect()
}

/// Why `driver` cannot run anything built with CUDA `cuda` (older than that major's floor, or the
/// release's own minimum before minor-version compatibility), if so. The one rule `archs --driver`
/// and `doctor` share, beside [`below_gpu_floor`].
pub fn below_cuda_floor(driver: Option<&Version>, cuda: &Version) -> Option<String> {
    let d = driver?;
    let (floor, why) = kb().driver_floor(cuda)?;
    crate::kb::drivers::driver_below(d, &floor).then(|| format!("driver {d} < {floor}, {why}"))
}

/// Why `driver` cannot run GPU `name` at all (older than the GPU's own floor), if so.
pub fn below_gpu_floor(name: &str, cc: Cc, driver: Option<&Version>) -> Option<String> {
    let d = driver?;
    let floor = kb().gpu_driver_floor(name, cc)?;
    crate::kb::drivers::driver_below(d, &floor.driver).then(|| {
        format!(
            "driver {d} predates the {name}: it needs {} or newer ({}), whatever the CUDA",
            floor.driver, floor.why
        )
    })
}

/// When the chosen CUDA cannot compile for `cc` at all, the usual fix ("add cc") is impossible;
/// says which CUDA releases can.
fn cuda_limit(cuda: &Version, cc: Cc) -> Option<String> {
    let arch = Arch::plain(cc.major, cc.minor);
    if kb().cuda_supports(cuda, arch) {
        return None;
    }
    Some(match kb().target(arch) {
        Some(row) => match &row.last_cuda {
            Some(last) if *last < *cuda => format!(
                "CUDA {cuda} cannot compile for CC {cc} (nvcc supports {} from CUDA {} through {last}): build with CUDA {last} or older",
                arch.sm(),
                row.first_cuda
            ),
            _ => format!(
                "CUDA {cuda} cannot compile for CC {cc} (nvcc supports {} from CUDA {}): use CUDA {} or newer",
                arch.sm(),
                row.first_cuda,
                row.first_cuda
            ),
        },
        None => format!("no CUDA release compiles for CC {cc}"),
    })
}

#[derive(Debug, Serialize)]
pub struct Driver {
    pub version: Version,
    pub source: String,
    /// Newest CUDA whose GA release this driver meets natively.
    pub cuda_native_max: Option<String>,
    /// CUDA majors this driver runs through minor-version compatibility (no PTX JIT of newer PTX).
    pub cuda_minor_compat_majors: Vec<u32>,
}

/// What a driver runs: the newest CUDA whose GA minimum it meets, and the majors it runs through
/// minor-version compatibility.
pub fn describe_driver(version: Version, source: String) -> Driver {
    let native = kb()
        .cuda
        .iter()
        .filter(|c| c.min_driver_linux.as_ref().is_some_and(|m| *m <= version))
        .max_by(|a, b| a.version.cmp(&b.version))
        .map(|c| c.version.to_string());
    let compat = kb()
        .cuda_majors
        .iter()
        .filter(|m| m.minor_compat_min_driver <= version)
        .map(|m| m.major)
        .collect();
    Driver {
        version,
        source,
        cuda_native_max: native,
        cuda_minor_compat_majors: compat,
    }
}

#[derive(Debug, Serialize)]
pub struct TorchOption {
    pub torch: String,
    pub variant: String,
    pub runs: bool,
    pub reason: String,
    /// How to install the line's newest release in this variant.
    pub install: String,
    /// Where it runs but an audited library of the wheel carries the GPU's image in only some
    /// containers: which, and what cannot launch (the knowledge base's `partial_sass` facts,
    /// which `verify binary` reads from the same wheel).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub partly: Vec<String>,
    /// The oldest NVIDIA driver that runs this variant, and what sets it.
    pub min_driver: Option<String>,
}

/// For each torch release line (major.minor) and official CUDA variant: would it run on these GPUs
/// with this driver?
pub fn torch_options(gpus: &[(String, Cc)], driver: Option<&Version>) -> Vec<TorchOption> {
    let mut lines: Vec<Version> = kb().torch.iter().map(|t| t.version.major_minor()).collect();
    lines.dedup();
    let mut out = Vec::new();
    for line in lines {
        let patches: Vec<String> = kb()
            .torch
            .iter()
            .filter(|t| t.version.major_minor() == line)
            .map(|t| t.version.to_string())
            .collect();
        let mut variants: Vec<_> = kb()
            .torch_variants
            .iter()
            .filter(|v| v.covers(&line))
            .collect();
        variants.sort_by(|a, b| a.cuda.cmp(&b.cuda));
        for variant in variants {
            let floor = kb().driver_floor(&variant.cuda);
            let mut problems = official_build_problems(gpus, driver, &variant.cuda);
            let images = variant_images(variant);
            let jit = PtxJit {
                driver: driver.cloned(),
                ptx_min_driver: kb().ptx_min_driver(&variant.cuda),
                ptx_cuda: Some(variant.cuda.clone()),
            };
            let newest_row = kb()
                .torch
                .iter()
                .filter(|t| t.version.major_minor() == line)
                .max_by(|a, b| a.version.cmp(&b.version));
            // The partial-coverage facts were read from the release's default PyPI wheel.
            let audited = newest_row.filter(|r| {
                r.pypi_cuda
                    .as_ref()
                    .is_some_and(|c| c.major_minor() == variant.cuda.major_minor())
            });
            let mut partly = Vec::new();
            for (name, newest_cc) in gpus {
                let cc = &kb().gpu_cc_with_cuda(name, *newest_cc, &variant.cuda);
                if let Some(problem) = below_gpu_floor(name, *cc, driver) {
                    problems.push(problem);
                    continue;
                }
                let verdict = runs_on(&images, *cc, &jit);
                if let (Some(row), Some(via)) = (audited, verdict.via.as_ref()) {
                    for p in row.partial_sass.iter().filter(|p| {
                        via.kind == crate::arch::compat::ImageKind::Sass
                            && p.arch.parse::<Arch>().is_ok_and(|a| a == via.arch)
                    }) {
                        let origin = p
                            .origin
                            .as_deref()
                            .and_then(|o| kb().kernel_origins.iter().find(|k| k.name == o));
                        partly.push(format!(
                            "{name}: {} {} carries {} in {} of {} containers{}",
                            row.version,
                            p.library,
                            via.name(),
                            p.with_image,
                            p.containers,
                            origin.map_or(String::new(), |o| format!(
                                "; the others are {}'s: {} fail with 'no kernel image' ({})",
                                o.name, o.operations, o.workaround
                            ))
                        ));
                    }
                }
                if !verdict.runs {
                    let ptx = if variant.ptx.is_empty() {
                        "no PTX".to_string()
                    } else {
                        format!("PTX {}", variant.ptx.join(" "))
                    };
                    problems.push(format!(
                        "{name}: no image for CC {cc} (built for {}; {ptx})",
                        variant.sass.join(" ")
                    ));
                }
            }
            let newest = kb()
                .torch
                .iter()
                .filter(|t| t.version.major_minor() == line)
                .map(|t| &t.version)
                .max();
            out.push(TorchOption {
                partly,
                min_driver: floor.map(|(v, why)| format!("{v} ({why})")),
                install: newest
                    .map(|v| kb().install_command(v, variant))
                    .unwrap_or_default(),
                torch: patches.join(", "),
                variant: variant.tag(),
                runs: problems.is_empty(),
                reason: if problems.is_empty() {
                    "ok".into()
                } else {
                    problems.join("; ")
                },
            });
        }
    }
    out
}

/// What rules out every official build of CUDA `cuda` before any image is looked at: a driver
/// below CUDA's floor, a GPU PyPI's wheels are not built for (Jetson), whatever its CC.
fn official_build_problems(
    gpus: &[(String, Cc)],
    driver: Option<&Version>,
    cuda: &Version,
) -> Vec<String> {
    let jetson = gpus.iter().filter_map(|(name, _)| {
        kb().torch_wheels_instead(name)
            .map(|instead| format!("{name}: PyPI's torch wheels do not run there; {instead}"))
    });
    below_cuda_floor(driver, cuda)
        .into_iter()
        .chain(jetson)
        .collect()
}

/// For one GPU (or compute capability): does torch `torch`'s official wheel already run there,
/// through which image, and what a source build for its own arch adds.
#[derive(Debug, Serialize)]
pub struct WheelAdvice {
    pub target: String,
    pub cc: Cc,
    /// The official variants of that release that run there (`cu124 (PyPI)`, `cu118`, …).
    pub runs_with: Vec<String>,
    /// The image the default (PyPI) wheel, or else the first variant that runs, loads.
    pub via: Option<String>,
    /// What building from source adds for this target.
    pub source_build_adds: String,
}

/// "Should you build at all?": for each target, the official wheels of `torch` that already run
/// there (PyPI's default first) and what a from-source build adds. Advice, not a refusal.
pub fn official_wheel_advice(torch: &Version, targets: &[(String, Cc)]) -> Vec<WheelAdvice> {
    let pypi = kb().torch_row(torch).and_then(|r| r.pypi_cuda.clone());
    let mut variants: Vec<_> = kb()
        .torch_variants
        .iter()
        .filter(|v| v.covers(torch))
        .collect();
    // PyPI's default first, then by CUDA.
    variants.sort_by_key(|v| (Some(&v.cuda) != pypi.as_ref(), v.cuda.clone()));
    let jit = |v: &crate::kb::TorchVariantRow| PtxJit {
        driver: None,
        ptx_min_driver: None,
        ptx_cuda: Some(v.cuda.clone()),
    };
    let images = |v: &crate::kb::TorchVariantRow| variant_images(v);
    targets
        .iter()
        .map(|(name, cc)| {
            let mut runs_with = Vec::new();
            let mut via = None;
            for v in &variants {
                let verdict = runs_on(&images(v), *cc, &jit(v));
                if verdict.runs {
                    let pypi_tag = if Some(&v.cuda) == pypi.as_ref() { " (PyPI)" } else { "" };
                    runs_with.push(format!("{}{pypi_tag}", v.tag()));
                    if via.is_none() {
                        via = verdict.via;
                    }
                }
            }
            let native = Arch::plain(cc.major, cc.minor);
            let source_build_adds = match &via {
                None => {
                    let first = kb()
                        .torch_variants
                        .iter()
                        .filter(|v| runs_on(&images(v), *cc, &jit(v)).runs)
                        .min_by(|a, b| a.from.cmp(&b.from).then(a.cuda.cmp(&b.cuda)));
                    match first {
                        Some(v) if v.from > *torch => format!(
                            "the only way to run torch {torch} there (no official wheel has an image for CC {cc}); official wheels run it from torch {} ({})",
                            v.from,
                            v.tag()
                        ),
                        _ => format!("the only way to run torch {torch} there (no official wheel has an image for CC {cc})"),
                    }
                }
                Some(img) if img.kind == super::compat::ImageKind::Sass && img.arch == native => {
                    format!("nothing for this GPU: the official wheel carries native {}", native.sm())
                }
                Some(img) if img.kind == super::compat::ImageKind::Sass => format!(
                    "native {} SASS (the official wheel runs its {} SASS there)",
                    native.sm(),
                    img.arch.sm()
                ),
                Some(img) => format!(
                    "{} SASS instead of JIT-compiling {} at first launch",
                    native.sm(),
                    img.arch.compute()
                ),
            };
            WheelAdvice {
                target: name.clone(),
                cc: *cc,
                runs_with,
                via: via.map(|i| i.name()),
                source_build_adds,
            }
        })
        .collect()
}

/// The images an official torch variant carries (its SASS and PTX rows).
/// What a user with torch `torch` (built with CUDA `torch_cuda`) can do when no nvcc of that
/// CUDA major is on the machine and PyPI has none for it (11.x, 12.x): torch compiles extensions
/// only with its own major, so a CUDA 13 toolkit is no answer for this torch. Either install a
/// toolkit of that major (the distribution packages the knowledge base knows, NVIDIA's
/// installers), or move to the newest torch built with a CUDA whose nvcc archsmith installs from
/// PyPI and that runs on `gpus` with `driver` (both optional), as one pip command.
pub fn toolkit_advice(
    torch: &Version,
    torch_cuda: &Version,
    gpus: &[(String, Cc)],
    driver: Option<&Version>,
) -> String {
    let program = crate::output::program();
    let major = torch_cuda.major();
    let mm = torch_cuda.major_minor();
    let packages = kb().cuda_packages_for(major);
    let mut s = format!(
        "torch {torch} was built with CUDA {torch_cuda}: its extensions compile only with a CUDA {major}.x nvcc, and PyPI has no nvcc for CUDA {major}.x.\n"
    );
    let archive: Vec<String> = kb()
        .debian_archive_releases(major)
        .iter()
        .map(|c| format!("`{program} toolchain install --cuda {c}`"))
        .collect();
    if !archive.is_empty() {
        s += &format!(
            "- {}: NVIDIA's CUDA {major}.x from Debian's archive, no root (build-ext, port-extension and kernels install it themselves when the archive is reachable; torch accepts another {major}.x minor)\n",
            archive.join(" or ")
        );
    }
    s += &format!("- install a CUDA {major}.x toolkit here, found without flags afterwards (nvcc on PATH, CUDA_HOME, /usr/local/cuda-{mm}): ");
    if !packages.is_empty() {
        s += &format!("{}; or ", packages.join("; "));
    }
    s += &format!(
        "NVIDIA's installer for CUDA {mm} (https://developer.nvidia.com/cuda-toolkit-archive, or `apt install cuda-toolkit-{}` from NVIDIA's repository)\n",
        mm.to_string().replace('.', "-")
    );
    let pypi_major = kb().first_pypi_nvcc_major().unwrap_or(u32::MAX);
    let option = torch_options(gpus, driver)
        .into_iter()
        .rev()
        .find(|o| o.runs && o.partly.is_empty() && variant_major(&o.variant) >= Some(pypi_major));
    match option {
        Some(o) => {
            let cuda = crate::kb::TorchVariantRow::cuda_of_tag(&o.variant)
                .map_or_else(|| kb().releases.newest_cuda.clone(), |c| c.major_minor());
            let runs = if gpus.is_empty() {
                String::new()
            } else {
                let names: Vec<&str> = gpus.iter().map(|(n, _)| n.as_str()).collect();
                format!(", runs on {}", names.join(", "))
            };
            let needs = match (driver, &o.min_driver) {
                (None, Some(floor)) => format!("; needs NVIDIA driver ≥ {floor}"),
                _ => String::new(),
            };
            s += &format!(
                "- or move to a torch built with CUDA {cuda}, whose nvcc archsmith installs itself: `{}` ({}{runs}{needs}), then `{program} toolchain install --cuda {cuda}`",
                o.install,
                o.variant
            );
        }
        None => {
            s += &format!(
                "- no torch built with a CUDA archsmith installs from PyPI runs{}: a CUDA {major}.x toolkit is the way",
                if gpus.is_empty() && driver.is_none() {
                    String::new()
                } else {
                    " on these GPUs with this driver".to_string()
                }
            );
        }
    }
    s
}

/// `cu132` → 13.
fn variant_major(tag: &str) -> Option<u32> {
    crate::kb::TorchVariantRow::cuda_of_tag(tag).map(|c| c.major())
}

pub fn variant_images(v: &crate::kb::TorchVariantRow) -> Vec<Image> {
    v.sass
        .iter()
        .filter_map(|s| s.parse::<Arch>().ok().map(Image::sass))
        .chain(
            v.ptx
                .iter()
                .filter_map(|s| s.parse::<Arch>().ok().map(Image::ptx)),
        )
        .collect()
}

/// Whether an official variant runs on `cc`, the driver unknown (PTX JIT assumed possible).
pub fn variant_runs_on(v: &crate::kb::TorchVariantRow, cc: Cc) -> Verdict {
    let jit = PtxJit {
        driver: None,
        ptx_min_driver: None,
        ptx_cuda: Some(v.cuda.clone()),
    };
    runs_on(&variant_images(v), cc, &jit)
}

impl ArchsReport {
    /// The aligned table people read (`--json` prints the report itself).
    pub fn table(&self) -> String {
        let r = self;
        let mut out = String::new();
        let assumed = |c: &ReleaseChoice| match (c.assumed, c.from_torch) {
            (true, _) => " (newest known)",
            (_, true) => " (its PyPI default)",
            _ => "",
        };
        out.push_str(&format!(
            "archs {}  for torch {}{}, CUDA {}{}\n\n",
            r.input,
            r.torch.version,
            assumed(&r.torch),
            r.cuda.version,
            assumed(&r.cuda)
        ));
        let mut t = Table::headerless();
        t.row(["TORCH_CUDA_ARCH_LIST", r.torch_cuda_arch_list.as_str()]);
        t.row(["SASS".to_string(), r.sass.join(" ")]);
        t.row([
            "PTX".to_string(),
            if r.ptx.is_empty() {
                "none".to_string()
            } else {
                r.ptx.join(" ")
            },
        ]);
        t.row([
            "CMAKE_CUDA_ARCHITECTURES",
            r.cmake_cuda_architectures.as_str(),
        ]);
        for (i, g) in r.gencode.iter().enumerate() {
            t.row([if i == 0 { "nvcc flags" } else { "" }, g.as_str()]);
        }
        out.push_str(&t.render());
        out.push('\n');
        r.consumer_and_gpu_lines(&mut out);
        if let Some(last) = &r.last_build {
            out.push('\n');
            for line in last.lines() {
                out.push_str(&line);
                out.push('\n');
            }
        }
        if !r.notes.is_empty() {
            out.push('\n');
            for n in &r.notes {
                out.push_str(&format!("note: {n}\n"));
            }
        }
        out
    }

    /// Whether each consumer of the list (torch's two parsers, nvcc) takes it, and where GPUs
    /// were named, whether the plan runs on each.
    fn consumer_and_gpu_lines(&self, out: &mut String) {
        let r = self;
        let mut c = Table::new(["consumer", "input as written", "exported list"]);
        for rep in &r.consumers {
            c.row([
                rep.consumer,
                if rep.accepts_input {
                    "accepted"
                } else {
                    "rejected"
                },
                if rep.accepts_exported {
                    "accepted"
                } else {
                    "rejected"
                },
            ]);
        }
        out.push_str(&c.render());
        for rep in r
            .consumers
            .iter()
            .filter(|c| !c.accepts_input || !c.accepts_exported)
        {
            let detail = if rep.accepts_input {
                &rep.exported_detail
            } else {
                &rep.input_detail
            };
            out.push_str(&format!("  {}: {}\n", rep.consumer, detail));
        }
        if let Some(gpus) = &r.gpus {
            out.push('\n');
            let mut g = Table::new(["GPU", "CC", "runs", "via", "why"]);
            for v in gpus {
                g.row([
                    v.name.clone(),
                    v.cc.to_string(),
                    if v.runs { "yes" } else { "NO" }.to_string(),
                    v.via.clone().unwrap_or_else(|| "-".into()),
                    v.reason.clone(),
                ]);
            }
            out.push_str(&g.render());
        }
    }
}
