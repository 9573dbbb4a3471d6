//! `cargo xtask doctor`: this machine as a build host and as a runtime, and — for a GPU or driver
//! you name — which torch releases and CUDA variants would run there ([`crate::doctor`]).

use crate::doctor::{diagnose, DoctorReport};
use crate::output::{documents, emit, Exit, Table};
use crate::version::Version;
use anyhow::Result;

#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// A GPU to plan for (name or compute capability); answers which torch builds would run on it.
    #[arg(long = "gpu", value_name = "NAME")]
    pub gpus: Vec<String>,
    /// An NVIDIA driver version to plan for (e.g. 470.161.03), instead of or besides this machine's.
    #[arg(long, value_name = "VER", value_parser = crate::kb::user_input::driver_version)]
    pub driver: Option<Version>,
    #[command(flatten)]
    pub output: crate::output::JsonOutput,
}

pub fn run(args: &DoctorArgs) -> Result<Exit> {
    let report = diagnose(&args.gpus, args.driver.as_ref())?;
    emit(args.output.json, documents::DOCTOR, &report, render)?;
    Ok(Exit::Success)
}

pub fn render(r: &DoctorReport) -> String {
    let mut s = String::new();
    s.push_str("runtime\n");
    match &r.driver {
        Some(d) => s.push_str(&format!(
            "  driver {} (from {}): CUDA ≤ {} natively; minor-version compatible with CUDA {}\n",
            d.version,
            d.source,
            d.cuda_native_max.as_deref().unwrap_or("?"),
            d.cuda_minor_compat_majors
                .iter()
                .map(|m| format!("{m}.x"))
                .collect::<Vec<_>>()
                .join(", ")
        )),
        None => s.push_str("  driver: none found\n"),
    }
    for d in &r.devices {
        let cc = d.cc.map(|c| c.to_string()).unwrap_or_else(|| "?".into());
        let id = d
            .device_id
            .as_deref()
            .map(|i| format!(", PCI {i}"))
            .unwrap_or_default();
        s.push_str(&format!("  GPU {} (CC {cc}{id})\n", d.name));
    }
    s.push_str("\nCUDA toolkits\n");
    let mut t = Table::new(["  release", "found via", "max gcc", "max clang", "nvcc"]);
    for k in &r.toolkits {
        t.row([
            format!(
                "  {}",
                k.release
                    .as_ref()
                    .map(|v| v.to_string())
                    .unwrap_or_else(|| "?".into())
            ),
            k.found_via.clone(),
            k.max_gcc
                .map(|v| v.to_string())
                .unwrap_or_else(|| "?".into()),
            k.max_clang
                .map(|v| v.to_string())
                .unwrap_or_else(|| "?".into()),
            k.nvcc.display().to_string(),
        ]);
    }
    if t.is_empty() {
        s.push_str("  none found\n");
    } else {
        s.push_str(&t.render());
    }
    s.push_str("\nhost compilers\n");
    for c in &r.host_compilers {
        let acc: Vec<String> = c
            .accepted_by
            .iter()
            .map(|(rel, ok)| format!("nvcc {rel}: {}", if *ok { "ok" } else { "TOO NEW" }))
            .collect();
        s.push_str(&format!(
            "  {} {} ({}){}\n",
            c.name,
            c.version,
            c.path.display(),
            if acc.is_empty() {
                String::new()
            } else {
                format!("  {}", acc.join(", "))
            }
        ));
    }
    s.push_str("\nPython / torch\n");
    for p in &r.pythons {
        let what = match (&p.info, &p.error) {
            (Some(i), _) => {
                let torch = match &i.torch {
                    Some(t) => format!(
                        "torch {t}, CUDA {}, archs {}",
                        i.cuda.as_ref().map_or("none".into(), |c| c.to_string()),
                        i.arch_list.join(" ")
                    ),
                    None => "no torch".into(),
                };
                format!("Python {}; {torch}", i.python)
            }
            (None, e) => format!("the probe did not run: {}", e.as_deref().unwrap_or("?")),
        };
        s.push_str(&format!(
            "  {} ({}): {what}\n",
            p.python.display(),
            p.found_via
        ));
    }
    if let Some(pf) = &r.plan_for {
        let who: Vec<String> = pf
            .gpus
            .iter()
            .map(|(n, c)| format!("{n} (CC {c})"))
            .collect();
        s.push_str(&format!(
            "\ntorch builds for {}{}\n",
            if who.is_empty() {
                "any GPU".to_string()
            } else {
                who.join(", ")
            },
            pf.driver
                .as_ref()
                .map(|d| format!(" with driver {d}"))
                .unwrap_or_default()
        ));
        // Newest first: the top entry is what to install, and its command follows.
        let names: Vec<String> = pf
            .runs_with
            .iter()
            .map(|o| {
                format!(
                    "{} {}{}",
                    o.torch,
                    o.variant,
                    if o.partly { " (partly)" } else { "" }
                )
            })
            .collect();
        s.push_str(&format!(
            "  runs with (newest first): {}\n",
            if names.is_empty() {
                "no official torch build".to_string()
            } else {
                names.join("; ")
            }
        ));
        let best = pf
            .runs_with
            .iter()
            .find(|o| !o.partly)
            .or(pf.runs_with.first());
        if let Some(best) = best {
            s.push_str(&format!("  install: {}\n", best.install));
            // Without a driver to check against, say what the advice assumes.
            if let (None, Some(floor)) = (&pf.driver, &best.min_driver) {
                s.push_str(&format!(
                    "  needs: NVIDIA driver ≥ {floor}; no driver was given or found (--driver VER checks one)\n"
                ));
            }
        }
        let mut t = Table::new(["  torch", "variant", "runs", "why not"]);
        for o in &pf.torch {
            let (runs, why) = match (o.runs, o.partly.is_empty()) {
                (true, true) => ("yes", String::new()),
                (true, false) => ("partly", o.partly.join("; ")),
                (false, _) => ("no", o.reason.clone()),
            };
            t.row([
                format!("  {}", o.torch),
                o.variant.clone(),
                runs.into(),
                why,
            ]);
        }
        s.push_str(&t.render());
    }
    for n in &r.notes {
        s.push_str(&format!("\nnote: {n}"));
    }
    if !r.notes.is_empty() {
        s.push('\n');
    }
    s
}
