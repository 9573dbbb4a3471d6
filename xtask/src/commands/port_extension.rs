//! `cargo xtask port-extension NAME|--src DIR [--recipe NAME] --arch SPEC [--dry-run|--check]`:
//! thin CLI over [`crate::port`].
//!
//! Exit status: 0 ported, built and verified (or, with --dry-run, the diff printed); 1 when
//! the build, the audit, the import or the smoke test fails or a review item is unexplained (and
//! with --check when the rules or patches would change something); 2 on other errors (a bad
//! recipe, a patch that does not apply, no source).

use crate::build_ext::{progress, BuildFailure};
use crate::output::{emit, print_json, Table};
use crate::port::{self, recipe::Recipe, Outcome, Request, RunMode, VerifyFailure};
use crate::version::Version;
use anyhow::{bail, Result};
use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct PortExtensionArgs {
    /// The recipe (`patches/NAME/recipe.toml`), e.g. legacy-demo or maskrcnn.
    #[arg(value_name = "NAME")]
    pub name: Option<String>,
    /// Port this directory instead of the recipe's source (it is copied, never modified).
    #[arg(long, value_name = "DIR")]
    pub src: Option<PathBuf>,
    /// The recipe to use with --src (default: NAME).
    #[arg(long, value_name = "NAME")]
    pub recipe: Option<String>,
    /// Archs to build and verify, e.g. `7.5,8.9,9.0` (the `archs --arch` grammar).
    #[arg(long, value_name = "SPEC", required_unless_present_any = ["dry_run", "check"])]
    pub arch: Option<String>,
    #[arg(long, value_name = "VER")]
    pub torch: Option<Version>,
    #[arg(long, value_name = "VER")]
    pub cuda: Option<Version>,
    /// Print the diff of rules + patches and the review items; build nothing.
    #[arg(long, conflicts_with = "check")]
    pub dry_run: bool,
    /// Build nothing; exit 1 if the rules or patches would change a file or a review item is unexplained.
    #[arg(long)]
    pub check: bool,
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &PortExtensionArgs) -> Result<i32> {
    let name = match (&args.recipe, &args.name) {
        (Some(r), Some(n)) if r != n => {
            bail!("NAME `{n}` and --recipe `{r}` differ: give one of them")
        }
        (Some(r), _) | (None, Some(r)) => r.clone(),
        (None, None) => bail!(
            "which recipe? give NAME or --recipe NAME (recipes: {})",
            port::recipe::list().join(", ")
        ),
    };
    let mode = if args.dry_run {
        RunMode::DryRun
    } else if args.check {
        RunMode::Check
    } else {
        RunMode::Full
    };
    let req = Request {
        recipe: Recipe::find(&name)?,
        src: args.src.clone(),
        arch: args.arch.clone().unwrap_or_default(),
        torch: args.torch.clone(),
        cuda: args.cuda.clone(),
        mode,
        progress: progress::Mode::Auto,
    };
    let out = match port::run(&req) {
        Ok(o) => o,
        Err(e) => {
            if let Some(f) = e.downcast_ref::<BuildFailure>() {
                if args.json {
                    print_json(&serde_json::json!({ "ok": false, "failure": f }))?;
                }
                eprintln!("error: the ported {name} does not build: {f}");
                return Ok(1);
            }
            if let Some(f) = e.downcast_ref::<VerifyFailure>() {
                if args.json {
                    print_json(&serde_json::json!({ "ok": false, "failure": f }))?;
                }
                eprintln!("error: {f}");
                return Ok(1);
            }
            return Err(e);
        }
    };
    emit(args.json, &out, |o| {
        let mut s = o.diff.clone().unwrap_or_default();
        s.push_str(&render(o));
        s
    })?;
    if mode == RunMode::Check && (!out.files_changed.is_empty() || out.unexplained > 0) {
        return Ok(1);
    }
    Ok(0)
}

/// The summary people read.
pub fn render(o: &Outcome) -> String {
    let mut s = String::new();
    let mut t = Table::headerless();
    t.row(["recipe".to_string(), o.recipe.clone()]);
    t.row(["source".to_string(), o.source.clone()]);
    t.row(["work tree".to_string(), o.work_tree.display().to_string()]);
    t.row([
        "files".to_string(),
        format!(
            "{} scanned by the rules, {} changed by rules and patches",
            o.files_scanned,
            o.files_changed.len()
        ),
    ]);
    t.row([
        "rewrites".to_string(),
        format!("{}", o.rewrites.values().sum::<usize>()),
    ]);
    t.row([
        "patches".to_string(),
        if o.patches.is_empty() {
            "none".to_string()
        } else {
            o.patches
                .iter()
                .map(|p| format!("{} ({} files)", p.patch, p.files.len()))
                .collect::<Vec<_>>()
                .join(", ")
        },
    ]);
    let resolved = o
        .review
        .iter()
        .filter(|r| r.resolution.starts_with("patch"))
        .count();
    let accepted = o
        .review
        .iter()
        .filter(|r| r.resolution.starts_with("accepted"))
        .count();
    t.row([
        "review items".to_string(),
        format!(
            "{}: {resolved} resolved by patches, {accepted} accepted, {} unexplained",
            o.review.len(),
            o.unexplained
        ),
    ]);
    if let Some(b) = &o.build {
        t.row([
            "build".to_string(),
            if b.reused {
                format!(
                    "reused: the wheel of an identical port and toolchain (it took {:.0} s compiling)",
                    b.build_seconds
                )
            } else {
                format!(
                    "{:.0} s compiling, {:.0} s with audit and import (torch {}, CUDA {})",
                    b.build_seconds, b.total_seconds, b.torch, b.cuda
                )
            },
        ]);
        t.row(["wheel".to_string(), b.wheel.display().to_string()]);
        for (f, sass) in &b.sass {
            let ptx = b.ptx.get(f).cloned().unwrap_or_default();
            t.row([
                "archs verified".to_string(),
                format!(
                    "{f}: SASS {}{} (planned {})",
                    sass.join(" "),
                    if ptx.is_empty() {
                        String::new()
                    } else {
                        format!(", PTX {}", ptx.join(" "))
                    },
                    b.torch_cuda_arch_list
                ),
            ]);
        }
        t.row(["imported".to_string(), b.imported.join(", ")]);
    }
    if let Some(sm) = &o.smoke {
        for dev in ["cpu", "cuda"] {
            match &sm[dev] {
                serde_json::Value::String(msg) => {
                    t.row([format!("smoke {dev}"), msg.clone()]);
                }
                serde_json::Value::Object(m) => {
                    for (k, v) in m {
                        let line = if k == "nms" {
                            format!(
                                "{} cases, {} boxes, {} kept, {} mismatches vs torchvision.ops.nms",
                                v["cases"], v["boxes"], v["kept"], v["mismatches"]
                            )
                        } else {
                            format!(
                                "{} cases, {} outputs, max |diff| {} vs torchvision.ops.roi_align",
                                v["cases"], v["outputs"], v["max_abs_diff"]
                            )
                        };
                        t.row([format!("smoke {dev} {k}"), line]);
                    }
                }
                _ => {}
            }
        }
    }
    t.row(["time".to_string(), format!("{:.0} s", o.seconds)]);
    s.push_str(&t.render());
    if !o.rewrites.is_empty() {
        let mut r = Table::new(["RULE", "REWRITES"]);
        for (k, v) in &o.rewrites {
            r.row([k.clone(), v.to_string()]);
        }
        s.push('\n');
        s.push_str(&r.render());
    }
    if !o.review.is_empty() {
        let mut r = Table::new(["FILE:LINE", "RULE", "RESOLUTION"]);
        for x in &o.review {
            r.row([
                format!("{}:{}", x.file, x.line),
                x.rule.clone(),
                x.resolution.clone(),
            ]);
        }
        s.push('\n');
        s.push_str(&r.render());
    }
    s
}
