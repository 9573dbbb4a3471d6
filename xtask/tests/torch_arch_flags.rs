//! Side by side with the real torch: archsmith's reading of TORCH_CUDA_ARCH_LIST must equal what
//! `torch.utils.cpp_extension._get_cuda_arch_flags` from the torch 2.15.0 wheel on PyPI returns,
//! for every spec in the corpus: the same flags in the same order, or both rejecting.
//!
//! The env is provisioned once under archsmith's cache and shared with the other real-torch tests.

use archsmith::arch::spec::{Plan, PlanContext};
use archsmith::arch::torch_flags::{cpp_extension_flags, TorchFlagsError};
use archsmith::paths::repo_root;
use archsmith::python::ensure_torch_env;
use archsmith::version::Version;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

/// Valid, invalid, named, `a`, `+PTX`, whitespace and duplicate specs; `None` = unset.
const CORPUS: &[Option<&str>] = &[
    // plain lists and separators
    Some("7.5"),
    Some("7.5;8.9;9.0"),
    Some("7.5 8.9 9.0"),
    Some("7.5;8.9 9.0+PTX"),
    Some("8.0;8.6+PTX"),
    Some("3.5;3.7;5.0;5.2;5.3;6.0;6.1;6.2;7.0;7.2"),
    Some("7.5;10.0"),
    Some("7.5+PTX;8.0+PTX"),
    Some("12.1+PTX"),
    Some("8.7;8.9+PTX"),
    // arch-specific
    Some("9.0a"),
    Some("9.0a+PTX"),
    Some("10.0a"),
    Some("12.0a;12.1a+PTX"),
    Some("10.3;10.3a;10.7+PTX"),
    Some("11.0;11.0a+PTX"),
    Some("10.7a"),
    // named
    Some("Turing"),
    Some("Ampere"),
    Some("Ada"),
    Some("Hopper"),
    Some("Blackwell"),
    Some("Rubin"),
    Some("Blackwell+Tegra"),
    Some("Ampere+Tegra"),
    Some("Volta+Tegra"),
    Some("Kepler+Tesla"),
    Some("Maxwell+Tegra"),
    Some("Pascal;Volta"),
    Some("Ampere 8.9"),
    Some("Turing;Ampere;Ada;Hopper;Blackwell"),
    // duplicates
    Some("9.0;9.0"),
    Some("9.0;9.0+PTX"),
    Some("Hopper;9.0"),
    Some("8.6 8.6 8.6+PTX"),
    // invalid
    None,
    Some(""),
    Some("native"),
    Some("7.5,8.9"),
    Some("7.5;"),
    Some(";7.5"),
    Some("7.5;;8.0"),
    Some(" 7.5"),
    Some("7.5 "),
    Some("7.5\t8.0"),
    Some("10.0f"),
    Some("12.0f+PTX"),
    Some("sm_80"),
    Some("8.6(8.0)"),
    Some("Hopper+PTX"),
    Some("hopper"),
    Some("8.6+ptx"),
    Some("8.6+PTX+PTX"),
    Some("5.1"),
    Some("10.1"),
    Some("10.1a"),
    Some("9.0b"),
    Some("All"),
    Some("Common"),
    Some("8"),
    Some("80"),
    Some("8.6a"),
];

#[derive(serde::Deserialize)]
struct ProbeOutput {
    torch: String,
    results: Vec<ProbeResult>,
}

#[derive(serde::Deserialize)]
struct ProbeResult {
    spec: Option<String>,
    ok: bool,
    flags: Option<Vec<String>>,
    error: Option<String>,
}

/// Runs the probe with `python` (optionally on another torch wheel's function) over the corpus.
fn run_probe(python: &Path, wheel: Option<&Path>) -> ProbeOutput {
    let probe = repo_root().join("verify/probes/torch_arch_flags.py");
    let mut cmd = Command::new(python);
    cmd.arg(&probe);
    if let Some(w) = wheel {
        cmd.arg("--wheel").arg(w);
    }
    let mut child = cmd
        // No GPU may be visible: unset/native then take torch's detection path, which must fail here.
        .env("CUDA_VISIBLE_DEVICES", "")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the probe");
    let input = serde_json::to_vec(CORPUS).unwrap();
    child.stdin.take().unwrap().write_all(&input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "probe failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let probe: ProbeOutput = serde_json::from_slice(&out.stdout).expect("probe JSON");
    assert_eq!(probe.results.len(), CORPUS.len());
    probe
}

/// Compares archsmith's emulation for `torch` with the probe's results; returns (accepted, rejected).
fn compare(torch: &Version, probe: &ProbeOutput) -> (usize, usize) {
    let (mut accepted, mut rejected) = (0, 0);
    for (spec, real) in CORPUS.iter().zip(&probe.results) {
        assert_eq!(real.spec.as_deref(), *spec);
        match (cpp_extension_flags(torch, *spec), real.ok) {
            (Ok(flags), true) => {
                assert_eq!(
                    Some(&flags),
                    real.flags.as_ref(),
                    "torch {torch}: flags differ for {spec:?}"
                );
                accepted += 1;
            }
            (Err(e), false) => {
                let real_err = real.error.as_deref().unwrap_or_default();
                match e {
                    TorchFlagsError::UnknownArch { element, .. } => {
                        let expected = format!(
                            "ValueError: Unknown CUDA arch ({element}) or GPU not supported"
                        );
                        assert_eq!(
                            real_err, expected,
                            "torch {torch}: error differs for {spec:?}"
                        );
                    }
                    TorchFlagsError::NeedsGpu { .. } => assert!(
                        real_err.starts_with("IndexError"),
                        "torch {torch} {spec:?}: {real_err}"
                    ),
                    other => panic!("{spec:?}: unexpected error kind {other}"),
                }
                rejected += 1;
            }
            (ours, _) => panic!(
                "torch {torch} {spec:?}: archsmith says {ours:?}, torch says ok={} {:?} {:?}",
                real.ok, real.flags, real.error
            ),
        }
    }
    (accepted, rejected)
}

/// Older releases accept different lists (9.0a from 2.2, 10.0a from 2.7, Blackwell's expansion,
/// `native` from 2.9). Their functions are taken verbatim from the PyPI wheels (downloaded once into
/// archsmith's cache) and run beside the knowledge-base-driven emulation.
#[test]
fn archsmith_matches_older_torch_releases() {
    let python = archsmith::python::host_python().unwrap();
    let mut probes = Vec::new();
    for version in ["2.1.2", "2.7.1", "2.8.0"] {
        let wheel = archsmith::downloads::download_wheel("torch", &version.parse().unwrap())
            .expect("download the torch wheel");
        let probe = run_probe(&python, Some(&wheel));
        assert_eq!(probe.torch.split('+').next(), Some(version));
        let (accepted, rejected) = compare(&version.parse().unwrap(), &probe);
        assert!(
            accepted >= 15 && rejected >= 20,
            "torch {version}: {accepted} accepted, {rejected} rejected"
        );
        probes.push(probe);
    }
    // The releases really differ on this corpus, so the per-version table is what makes them agree.
    let result = |i: usize, spec: &str| {
        let idx = CORPUS.iter().position(|s| *s == Some(spec)).unwrap();
        &probes[i].results[idx]
    };
    assert!(!result(0, "9.0a").ok && result(1, "9.0a").ok);
    assert!(!result(0, "10.0a").ok && result(1, "10.0a").ok);
    assert!(!result(1, "10.3;10.3a;10.7+PTX").ok && !result(2, "11.0;11.0a+PTX").ok);
    assert_ne!(result(1, "Blackwell").flags, result(2, "Blackwell").flags);
    assert!(result(2, "native")
        .error
        .as_deref()
        .unwrap_or_default()
        .starts_with("ValueError"));
}

#[test]
fn archsmith_reads_torch_cuda_arch_list_exactly_like_torch_2_15() {
    let torch: Version = "2.15.0".parse().unwrap();
    let env = ensure_torch_env(&torch).expect("provision the torch 2.15.0 env");
    let probe = run_probe(&env.python, None);
    assert!(
        probe.torch.starts_with("2.15.0"),
        "probe ran torch {}",
        probe.torch
    );
    assert!(CORPUS.len() >= 40);
    let (accepted, rejected) = compare(&torch, &probe);
    assert!(
        accepted >= 25 && rejected >= 20,
        "corpus balance: {accepted} accepted, {rejected} rejected"
    );

    // The user-facing planner must give the same flags for anything torch accepts; its validation
    // may only add nvcc's limits (no single CUDA compiles both 3.5 and 11.0).
    let ctx = PlanContext::new(Some(torch.clone()), Some("13.5".parse().unwrap()));
    for (spec, real) in CORPUS.iter().zip(&probe.results).filter(|(_, r)| r.ok) {
        let spec = spec.unwrap();
        if let Err(e) = Plan::parse(&ctx, spec) {
            let only_cuda = e
                .to_string()
                .lines()
                .all(|l| l.contains("is not supported by CUDA 13.5"));
            assert!(
                only_cuda,
                "{spec:?}: torch accepts it but the planner says {e}"
            );
        }
        let plan = Plan::parse_unvalidated(&ctx, spec).unwrap();
        assert_eq!(
            Some(plan.gencode()),
            real.flags,
            "planner flags differ for {spec:?}"
        );
    }
}
