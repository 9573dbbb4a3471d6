//! build-torch's output for people: the tree, the should-you-build advice, the preflight checks
//! with their fixes, the plan as a sourceable script, and the result.

use super::preflight::{Check, Status};
use super::{BeforeClone, Outcome, Prepared};
use crate::arch::advice::WheelAdvice;
use crate::build_output::step_weights::StepKind;
use crate::output::Table;

pub fn prepared(p: &Prepared, dry_run: bool, stop_after_configure: bool) -> String {
    let t = &p.tree;
    let kind = match &t.git {
        Some(g) => format!(
            "git {}{}",
            &g.head[..g.head.len().min(12)],
            if g.dirty { ", modified" } else { "" }
        ),
        None => "not a git checkout".into(),
    };
    let mut s = format!(
        "torch {} at {} ({} front end, {kind})\n{}\n\n",
        t.version_text,
        t.root.display(),
        t.front_end.name(),
        cuda_line(p.cuda.as_ref(), &p.cuda_reason)
    );
    s += &advice_table(&t.version, &p.advice);
    s += &format!("preflight ({:.1} s)\n", p.preflight_seconds);
    s += &checks_table(&p.checks);
    if let (Some(plan), true) = (&p.plan, dry_run) {
        s += &format!(
            "\nplan: {} jobs ({}), build directory {}\n",
            plan.jobs.jobs,
            plan.jobs.reason,
            plan.build_dir.display()
        );
        s += &plan.shell_script(&t.root, stop_after_configure);
    }
    if p.failed() {
        s += "\npreflight failed: nothing was built; the fixes are above\n";
    }
    s
}

/// `--dry-run` before the clone: the advice and checks that need no tree, and the clone to come.
pub fn before_clone(b: &BeforeClone) -> String {
    let mut s = format!(
        "torch {} (not cloned yet: this dry run fetched nothing)\n{}\n\n",
        b.torch,
        cuda_line(b.cuda.as_ref(), &b.cuda_reason)
    );
    s += &advice_table(&b.torch, &b.advice);
    s += "checks that need no tree\n";
    s += &checks_table(&b.checks);
    s += &format!(
        "\nthe build clones first (multi-GB, with submodules):\n  {} {}\nthe rest of preflight (host compiler, build tools, Python, submodules, disk, memory, cuDNN, every variable against the build files) reads the tree: it runs after the clone\n",
        b.clone,
        b.into.display()
    );
    if let Some(list) = &b.torch_cuda_arch_list {
        s += &format!("TORCH_CUDA_ARCH_LIST={list}\n");
    }
    if b.failed() {
        s += "\na check failed: the fixes are above\n";
    }
    s
}

/// `CUDA 12.4: why`, or for a CPU-only build `CPU-only: why`.
fn cuda_line(cuda: Option<&crate::version::Version>, reason: &str) -> String {
    match cuda {
        Some(c) => format!("CUDA {c}: {reason}"),
        None => format!("CPU-only: {reason}"),
    }
}

/// Whether the release's official wheels already run on each target.
fn advice_table(torch: &crate::version::Version, advice: &[WheelAdvice]) -> String {
    if advice.is_empty() {
        return String::new();
    }
    let mut s = format!(
        "should you build? official torch {} wheels:\n",
        torch.major_minor()
    );
    let mut tab = Table::new([
        "TARGET",
        "CC",
        "OFFICIAL WHEELS THAT RUN",
        "VIA",
        "A SOURCE BUILD ADDS",
    ]);
    for a in advice {
        tab.row([
            a.target.clone(),
            a.cc.to_string(),
            if a.runs_with.is_empty() {
                "none".into()
            } else {
                a.runs_with.join(", ")
            },
            a.via.clone().unwrap_or_else(|| "-".into()),
            a.source_build_adds.clone(),
        ]);
    }
    s += &indent(&tab.render());
    s.push('\n');
    s
}

/// Each check with its status, and its fix where it is not ok.
fn checks_table(checks: &[Check]) -> String {
    let mut tab = Table::new(["CHECK", "STATUS", "DETAIL"]);
    for c in checks {
        let status = match c.status {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "FAIL",
        };
        tab.row([c.name.to_string(), status.to_string(), c.detail.clone()]);
        if let (Some(fix), true) = (&c.fix, c.status != Status::Ok) {
            tab.row(["".to_string(), "".to_string(), format!("fix: {fix}")]);
        }
    }
    indent(&tab.render())
}

pub fn outcome(o: &Outcome) -> String {
    let mut s = prepared(&o.prepared, false, false);
    if o.reused {
        s += "\nunchanged: source, plan and toolchain match the stamp; the existing wheel is returned\n";
    }
    if let Some(log) = &o.log {
        s += &format!(
            "\nbuilt in {:.0} s; log {}\n",
            o.build_seconds,
            log.display()
        );
    }
    if !o.slowest_steps.is_empty() {
        s += "slowest steps:\n";
        let mut tab = Table::headerless();
        for (step, secs) in &o.slowest_steps {
            tab.row([format!("{secs:.1} s"), step.clone()]);
        }
        s += &indent(&tab.render());
    }
    if let Some(i) = &o.insight {
        let mut tab = Table::headerless();
        for (what, detail) in i.heaviest_row().into_iter().chain(i.rows()) {
            tab.row([what.to_string(), detail]);
        }
        s += &tab.render();
    }
    if let Some(c) = &o.cache_stats {
        s += &format!("compiler cache: {c}\n");
    }
    if let Some(v) = &o.verify {
        s += &format!("\nverify {}\n", v.wheel.display());
        s += &indent(&v.table());
    }
    if let Some(sl) = &o.slice {
        s += &slice(sl);
        return s;
    }
    match &o.wheel {
        Some(w) => s += &format!("\nwheel: {}\n", w.display()),
        None if o.log.is_some() => {
            s += "\nconfigured (--stop-after configure): build/build.ninja is ready\n"
        }
        None => {}
    }
    s
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("  {l}\n")).collect()
}

/// `--only`'s result: each step with its time and device code, then the whole build estimated.
pub fn slice(r: &super::slice::SliceReport) -> String {
    let mut s = format!("\n{} step(s) for {}\n", r.steps.len(), r.targets.join(" "));
    let mut t = Table::new(["  SECONDS", "KIND", "DEVICE CODE", "VERDICT", "OUTPUT"]);
    for st in &r.steps {
        t.row([
            format!("  {:.1}", st.seconds),
            st.kind.to_string(),
            if st.images.is_empty() {
                "-".into()
            } else {
                st.images.join(" ")
            },
            if st.ok {
                st.verdict.clone()
            } else {
                format!("FAIL: {}", st.verdict)
            },
            st.output.clone(),
        ]);
    }
    s += &t.render();
    if let Some(i) = &r.insight {
        s += &i.table();
    }
    s += &estimate(&r.estimate);
    if !r.ok {
        s += "a step's output does not carry what the plan asks: see FAIL above\n";
    }
    s
}

/// The whole build as a slice's steps estimate it.
fn estimate(e: &super::slice::Estimate) -> String {
    let mut s = String::new();
    s += "\nthe whole build, estimated from the steps measured in this build directory\n";
    let mut t = Table::new(["  KIND", "STEPS", "MEASURED", "TYPICAL STEP", "CPU-HOURS"]);
    for (k, kind) in StepKind::ALL.iter().enumerate() {
        t.row([
            format!("  {}", kind.name()),
            e.steps[k].to_string(),
            e.measured[k].to_string(),
            e.typical[k].map_or("not measured".into(), |v| format!("{v:.1} s")),
            format!("{:.2}", e.cpu_seconds[k] / 3600.0),
        ]);
    }
    s += &t.render();
    s += "  weighed by the measured steps of their own target:\n";
    let mut t = Table::new([
        "    TARGET",
        "KIND",
        "STEPS",
        "MEASURED",
        "EACH",
        "CPU-HOURS",
    ]);
    for g in &e.by_target {
        t.row([
            format!(
                "    {}",
                if g.target.is_empty() {
                    "(no target)"
                } else {
                    &g.target
                }
            ),
            g.kind.to_string(),
            g.steps.to_string(),
            g.measured.to_string(),
            format!("{:.1} s", g.typical),
            format!("{:.2}", g.cpu_seconds / 3600.0),
        ]);
    }
    s += &t.render();
    let at: Vec<String> = e
        .hours_at
        .iter()
        .map(|(n, h)| format!("{h:.1} h with {n} jobs"))
        .collect();
    s += &format!("  wall clock, slots kept busy: {}\n", at.join(", "));
    s += &format!(
        "  with --dist: the compiles go to the cluster; links and other steps stay here: {:.1} h at this machine's jobs\n",
        e.local_hours_with_dist
    );
    let unmeasured = e.unmeasured_kinds();
    if !unmeasured.is_empty() {
        s += &format!(
            "  not in the estimate: {} steps (none measured yet)\n",
            unmeasured.join(", ")
        );
    }
    s
}
