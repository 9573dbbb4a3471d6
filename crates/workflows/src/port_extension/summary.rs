//! The port's summary for people (`--json` serializes [`Outcome`] itself).

use super::Outcome;
use crate::output::Table;

impl Outcome {
    /// What the command prints for people: the diff of a dry run, then [`Self::summary`].
    pub fn rendered(&self) -> String {
        let mut s = self.diff.clone().unwrap_or_default();
        s.push_str(&self.summary());
        s
    }

    /// The summary people read: files changed, rewrites per rule, review items and how each was
    /// resolved, build time, archs verified, the smoke test's numbers; then per file the rules
    /// that changed it, per rule its rewrites and why, and the review items with what to check.
    pub fn summary(&self) -> String {
        let o = self;
        let mut t = Table::headerless();
        self.port_rows(&mut t);
        if let Some(b) = &o.build {
            build_rows(b, &mut t);
        }
        if let Some(st) = &o.stable_abi {
            stable_row(st, &mut t);
        }
        if let Some(sweep) = &o.import_sweep {
            let line = super::sweep_summary(sweep);
            t.row([
                "import sweep".to_string(),
                line.trim_start_matches("import sweep: ").to_string(),
            ]);
            for f in sweep.failures.iter().filter(|f| f.kind != "missing") {
                t.row([String::new(), f.to_string()]);
            }
        }
        if let Some(sm) = &o.smoke {
            smoke_rows(sm, &mut t);
        }
        if let Some(tests) = &o.tests {
            t.row([
                "package tests".to_string(),
                format!(
                    "{} ({} file(s), {:.0} s)",
                    tests.summary(),
                    tests.files.len(),
                    tests.seconds
                ),
            ]);
        }
        t.row(["time".to_string(), format!("{:.0} s", o.seconds)]);
        let mut s = t.render();
        if !o.changes.is_empty() {
            let mut r = Table::new(["FILE", "CHANGED BY (RULE ×N)"]);
            for (file, rules) in &o.changes {
                let list: Vec<String> = rules.iter().map(|(k, v)| format!("{k} ×{v}")).collect();
                r.row([file.clone(), list.join(", ")]);
            }
            s.push('\n');
            s.push_str(&r.render());
        }
        if !o.rewrites.is_empty() {
            let mut r = Table::new(["RULE", "REWRITES", "WHY"]);
            for (k, v) in &o.rewrites {
                let why = o.why.get(k).map(String::as_str).unwrap_or("");
                r.row([k.clone(), v.to_string(), short(why)]);
            }
            s.push('\n');
            s.push_str(&r.render());
        }
        if !o.review.is_empty() {
            let mut r = Table::new(["FILE:LINE", "RULE", "RESOLUTION", "WHAT TO CHECK"]);
            for x in &o.review {
                r.row([
                    format!("{}:{}", x.file, x.line),
                    x.rule.clone(),
                    x.resolution.clone(),
                    if x.explained {
                        String::new()
                    } else {
                        x.suggestion.clone()
                    },
                ]);
            }
            s.push('\n');
            s.push_str(&r.render());
        }
        s
    }

    /// Recipe, source, files, rewrites, patches, review items.
    fn port_rows(&self, t: &mut Table) {
        let o = self;
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
                "{}: {resolved} resolved by patches, {accepted} accepted, {} {}",
                o.review.len(),
                o.unexplained,
                if o.recipe_less {
                    "to review (listed below; they do not block a recipe-less port)"
                } else {
                    "unexplained"
                }
            ),
        ]);
    }
}

/// What was built and what its audit and import found.
/// `stable ABI  torch ≥ 2.10 (TORCH_TARGET_VERSION 0x020a…), CUDA runtime linked in (CUDA 13.2),
/// needs driver ≥ 580`.
fn stable_row(st: &super::StableAbi, t: &mut Table) {
    let mut line = format!(
        "torch >= {} (TORCH_TARGET_VERSION {}), operators torch.ops.{}.*",
        st.torch_target_version, st.torch_target_macro, st.namespace
    );
    if let Some(rt) = &st.cuda_runtime {
        line.push_str(&format!("; CUDA runtime {rt}"));
    }
    if let Some(d) = &st.driver_floor {
        line.push_str(&format!("; needs driver >= {d}"));
    }
    if let Some(d) = &st.ptx_driver_floor {
        line.push_str(&format!(" (>= {d} where only its PTX runs)"));
    }
    if let Some(p) = &st.platform_tag {
        line.push_str(&format!("; wheel {p}"));
    }
    t.row(["stable ABI".to_string(), line]);
}

fn build_rows(b: &super::BuildSummary, t: &mut Table) {
    t.row([
        "build".to_string(),
        if b.built.reused {
            format!(
                "reused: the wheel of an identical port and toolchain (it took {:.0} s compiling)",
                b.built.record.build_seconds
            )
        } else {
            format!(
                "{:.0} s compiling, {:.0} s with audit and import (torch {}, CUDA {})",
                b.built.record.build_seconds,
                b.built.total_seconds,
                b.built.record.torch,
                b.built.record.cuda
            )
        },
    ]);
    t.row(["wheel".to_string(), b.built.wheel.display().to_string()]);
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
                b.built.record.torch_cuda_arch_list
            ),
        ]);
    }
    if b.cpu_only {
        t.row([
            "archs verified".to_string(),
            format!(
                "none to verify: the package declares no CUDA code (C++ extensions only), so the arch list {} did not apply",
                b.built.record.torch_cuda_arch_list
            ),
        ]);
    }
    if let Some(cover) = &b.built.record.ptx_cover {
        t.row(["PTX cover".to_string(), cover.said.clone()]);
    }
    t.row(["imported".to_string(), b.built.record.imported.join(", ")]);
    if let Some(w) = b
        .built
        .record
        .warnings
        .iter()
        .find(|w| w.contains("asked nvcc for"))
    {
        t.row(["arch guard".to_string(), w.clone()]);
    }
}

/// What the generic smoke test says of a CUDA op it could not call (verify/smoke/generic_ops.py).
const NO_GPU: &str = "CUDA ops: skipped: no GPU";

/// The smoke test's numbers: per module of a generic test, per device of a numeric one.
fn smoke_rows(sm: &serde_json::Value, t: &mut Table) {
    if let Some(why) = sm["skipped"].as_str() {
        t.row(["smoke".to_string(), format!("skipped: {why}")]);
    }
    if let Some(mods) = sm["modules"].as_object() {
        for (m, v) in mods {
            let calls = v["calls"].as_array().cloned().unwrap_or_default();
            let n = |st: &str| calls.iter().filter(|c| c["status"] == st).count();
            let no_gpu =
                |c: &serde_json::Value| c["detail"].as_str().is_some_and(|d| d.starts_with(NO_GPU));
            if !calls.is_empty() && calls.iter().all(no_gpu) {
                t.row([
                    format!("smoke {m}"),
                    format!(
                        "imports; {} function(s), {} operator(s); {NO_GPU}",
                        v["functions"].as_array().map_or(0, Vec::len),
                        v["operators"].as_array().map_or(0, Vec::len),
                    ),
                ]);
                continue;
            }
            t.row([
                    format!("smoke {m}"),
                    format!(
                        "imports; {} function(s), {} operator(s); {} ran on CPU inputs, {} raised, {} crashed on guessed inputs, {} skipped",
                        v["functions"].as_array().map_or(0, Vec::len),
                        v["operators"].as_array().map_or(0, Vec::len),
                        n("ran"),
                        n("raised"),
                        n("crashed"),
                        n("skipped")
                    ),
                ]);
            // A crash on a guessed shape is the op's missing input checks, not the port's doing:
            // named so the user knows which ops to call only with real inputs.
            for c in calls.iter().filter(|c| c["status"] == "crashed") {
                t.row([
                    format!("smoke {m} warning"),
                    format!(
                        "{}: {}",
                        c["name"].as_str().unwrap_or_default(),
                        c["detail"].as_str().unwrap_or_default()
                    ),
                ]);
            }
        }
    }
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

/// The first sentence of a rule's reason, for the table.
fn short(why: &str) -> String {
    let first = why.split(". ").next().unwrap_or(why);
    if first.chars().count() > 110 {
        format!("{}…", first.chars().take(109).collect::<String>())
    } else {
        first.to_string()
    }
}
