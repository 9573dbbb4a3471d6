//! The memory the job models size their pools by, under a real memory cgroup (issue 48): a
//! process in a child group of the v1 memory hierarchy limited to 1.5 GiB sees at most that,
//! whatever the host has free. Before, `host::mem_available_gib` read only /proc/meminfo and a
//! build in such a group started 4 nvcc jobs on this 24 GiB machine; the kernel killed them.

use archsmith::host::LimitedGroup;
use archsmith::process::{Cmd, Output};
use std::path::Path;

const XTASK: &str = env!("CARGO_BIN_EXE_xtask");
const LIMIT: u64 = 1536 * 1024 * 1024;

/// A child memory cgroup limited to `limit` bytes (archsmith's own, removed when dropped).
fn group(name: &str, limit: u64) -> LimitedGroup {
    LimitedGroup::create(name, limit).unwrap_or_else(|e| panic!("this test needs it: {e:#}"))
}

/// archsmith run with `args` inside `group` (it joins the group before it starts).
fn xtask_in(group: &LimitedGroup, args: &[&str], peaks: Option<&Path>) -> Output {
    let mut cmd = Cmd::new(XTASK).args(args).in_cgroup(group.procs());
    if let Some(p) = peaks {
        cmd = cmd.env("ARCHSMITH_COMPILE_PEAKS", p);
    }
    cmd.output().unwrap()
}

#[test]
fn a_cgroup_limit_bounds_the_memory_builds_plan_for() {
    let group = group("archsmith-test", LIMIT);
    let out = xtask_in(&group, &["doctor", "--json"], None);
    let stdout = &out.stdout;
    assert!(out.success(), "{stdout}\n{}", out.stderr);
    let doc: serde_json::Value = serde_json::from_str(stdout).unwrap();
    let memory = &doc["memory"];
    assert_eq!(memory["cgroup"]["limit_bytes"], LIMIT, "{memory}");
    assert!(
        memory["cgroup"]["path"]
            .as_str()
            .is_some_and(|p| p.ends_with(group.path.file_name().unwrap().to_str().unwrap())),
        "{memory}"
    );
    assert!(
        memory["host_available_gib"].as_f64().unwrap() > 1.5,
        "{memory}"
    );

    // The people's line says which limit and what is left.
    let out = xtask_in(&group, &["doctor"], None);
    let text = &out.stdout;
    assert!(text.contains("limits this process to 1.5 GiB"), "{text}");
}

/// A real out-of-memory kill, named as one: build-ext in a 400 MiB cgroup plans one job (the
/// limit, not the host's free memory) and the kernel still kills the compile of torch headers;
/// the error says so, with the limit and the fix, instead of "no compiler error in the output".
#[test]
fn a_compile_the_kernel_kills_is_named_as_an_out_of_memory_kill() {
    let group = group("archsmith-oom", 400 * 1024 * 1024);
    let out_dir = tempfile::tempdir().unwrap();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tinyext");
    let args = [
        "build-ext",
        fixture.to_str().unwrap(),
        "--arch",
        "7.5",
        "--torch",
        "2.15.0",
        "--out",
        out_dir.path().to_str().unwrap(),
    ];
    let out = xtask_in(&group, &args, None);
    let stderr = &out.stderr;
    assert_eq!(out.status, Some(1), "{stderr}");
    assert!(stderr.contains("(limited by available memory)"), "{stderr}");
    assert!(
        stderr.contains("(SIGKILL: out of memory)")
            && stderr.contains("memory cgroup allows 0.4 GiB")
            && stderr.contains("--jobs 1"),
        "{stderr}"
    );
    assert!(!stderr.contains("no compiler error"), "{stderr}");
}

/// The nvcc compiles of the trace of `outcome` (build-ext's --json): (start µs, end µs, args),
/// and how many waited for memory.
fn nvcc_spans(outcome: &serde_json::Value) -> (Vec<(u64, u64, serde_json::Value)>, usize) {
    let path = outcome["result"]["insight"]["trace"]
        .as_str()
        .expect("a trace");
    let trace: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let events = trace["traceEvents"].as_array().unwrap();
    let spans = events
        .iter()
        .filter(|e| e["ph"] == "X" && e["cat"] == "nvcc")
        .map(|e| {
            let ts = e["ts"].as_u64().unwrap();
            (ts, ts + e["dur"].as_u64().unwrap(), e["args"].clone())
        })
        .collect();
    let waits = events
        .iter()
        .filter(|e| e["name"] == "waiting for memory")
        .count();
    (spans, waits)
}

/// The memory pool refuses to start a compile that would not fit (issue 48): in a 3 GiB cgroup
/// the build's pool is what the cgroup leaves less a 1 GiB reserve (under 2 GiB), a first build knows no peak and
/// reserves 2.5 GiB per nvcc compile, so with three jobs asked for, tinyext's second .cu waits
/// for the first to end instead of running beside it; the next build of the same source reserves
/// the peaks it measured (about 0.1 GiB) and runs them at once.
#[test]
fn the_memory_pool_makes_a_compile_wait_that_would_not_fit_and_learns_from_measured_peaks() {
    // 3 GiB: the C++ compile of torch headers beside them (not in the pool) takes about 1.5.
    let group = group("archsmith-pool", 3072 * 1024 * 1024);
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tinyext");
    let peaks = tempfile::tempdir().unwrap();
    let peaks_file = peaks.path().join("peaks.json");
    let build = || {
        let out_dir = tempfile::tempdir().unwrap();
        let args = [
            "build-ext",
            fixture.to_str().unwrap(),
            "--arch",
            "7.5,9.0",
            "--torch",
            "2.15.0",
            "--jobs",
            "3",
            "--json",
            "--out",
            out_dir.path().to_str().unwrap(),
        ];
        let out = xtask_in(&group, &args, Some(&peaks_file));
        let stderr = out.stderr.clone();
        assert_eq!(out.status, Some(0), "{stderr}");
        let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
        (v, stderr, out_dir)
    };
    let (first, stderr, _out) = build();
    let (spans, waits) = nvcc_spans(&first);
    assert_eq!(spans.len(), 2, "{spans:?}");
    assert_eq!(waits, 1, "{spans:?}");
    let (a, b) = (&spans[0], &spans[1]);
    assert!(
        a.1 <= b.0 || b.1 <= a.0,
        "the two compiles overlapped: {spans:?}"
    );
    // The guard says so in the build's log.
    let log = std::fs::read_to_string(first["result"]["log"].as_str().unwrap()).unwrap();
    assert!(
        log.contains("waits for memory: needs 2.50 GiB; 1 running compile(s) reserved 2.50 GiB of the build's"),
        "{stderr}\n{log}"
    );
    assert!(spans
        .iter()
        .all(|s| s.2["reserved_from"] == "the first-build estimate for nvcc"));
    assert_eq!(first["result"]["insight"]["peaks_kept"], 2);

    let (second, _, _out) = build();
    let (spans, waits) = nvcc_spans(&second);
    assert_eq!(waits, 0, "{spans:?}");
    assert!(
        spans
            .iter()
            .all(|s| s.2["reserved_from"] == "its peak in an earlier build"
                && s.2["reserved_mib"].as_u64().unwrap() < 512),
        "{spans:?}"
    );
    let (a, b) = (&spans[0], &spans[1]);
    assert!(
        a.0 < b.1 && b.0 < a.1,
        "measured peaks fit together: they ran at once: {spans:?}"
    );
}
