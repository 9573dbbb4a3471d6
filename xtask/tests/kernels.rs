//! `cargo xtask kernels`: the test kernels built with the shared CUDA 13.2 toolchain (provisioned once in
//! archsmith's cache) and audited against the plan; the audit itself is shown to catch a wrong binary.

use archsmith::arch::compat::Image;
use archsmith::arch::spec::{Plan, Target};
use archsmith::kernels;
use archsmith::process::Cmd;
use archsmith::toolchain;
use serde_json::Value;
use std::collections::BTreeSet;

const XTASK: &str = env!("CARGO_BIN_EXE_xtask");

fn run_kernels(spec: &str) -> Value {
    toolchain::ensure(&"13.2".parse().unwrap()).expect("CUDA 13.2 toolchain");
    let cmd = Cmd::new(XTASK).args(["kernels", "--cuda", "13.2", "--json", "--arch", spec]);
    let out = cmd.output().unwrap();
    assert_eq!(out.status, Some(0), "{}\n{}", out.stdout, out.stderr);
    serde_json::from_str(&out.stdout).unwrap()
}

fn kernel<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["name"] == name)
        .unwrap_or_else(|| panic!("{name} missing"))
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

fn check_run_column(report: &Value, k: &Value) {
    if report["gpu"].is_null() {
        assert_eq!(k["run"], "skipped: no GPU", "{k}");
    } else if k["run_result"].is_null() {
        // The plan has no image for this GPU; the report must say so rather than pass silently.
        assert!(k["run"].as_str().unwrap().starts_with("skipped: "), "{k}");
    } else {
        assert_eq!(k["run_result"]["passed"], true, "{k}");
    }
}

#[test]
fn builds_and_audits_every_kernel_for_7_5_8_9_9_0_ptx() {
    let report = run_kernels("7.5,8.9,9.0+PTX");
    assert_eq!(report["ok"], true);
    assert_eq!(report["cmake_cuda_architectures"], "75-real;89-real;90");
    let expect = [
        (
            "f32_elementwise",
            vec!["sm_75", "sm_89", "sm_90", "compute_90"],
        ),
        ("half_math", vec!["sm_75", "sm_89", "sm_90", "compute_90"]),
        ("bf16_math", vec!["sm_89", "sm_90", "compute_90"]),
        ("fp8_e4m3", vec!["sm_89", "sm_90", "compute_90"]),
        ("mma_sync", vec!["sm_89", "sm_90", "compute_90"]),
    ];
    for (name, images) in expect {
        let k = kernel(&report, name);
        assert_eq!(k["audit"], "ok", "{k}");
        // The binary was read back, and holds exactly these images.
        assert_eq!(strings(&k["found"]), images, "{name}");
        // NVIDIA's cuobjdump reads the same images from the binary as archsmith's reader.
        let binary = std::path::Path::new(k["binary"].as_str().unwrap());
        let tc = toolchain::ensure(&"13.2".parse().unwrap()).unwrap();
        let by_nvidia: Vec<String> = kernels::cuobjdump_images(&tc, binary)
            .unwrap()
            .iter()
            .map(Image::name)
            .collect();
        let mut ours = strings(&k["found"]);
        ours.sort();
        let mut theirs = by_nvidia;
        theirs.sort();
        assert_eq!(ours, theirs, "{name}: archsmith::binary vs cuobjdump");
        check_run_column(&report, k);
    }
    for name in ["bf16_math", "mma_sync", "fp8_e4m3"] {
        let skipped = &kernel(&report, name)["skipped"];
        assert_eq!(skipped[0]["arch"], "7.5", "{name}: {skipped}");
    }
    let hopper = kernel(&report, "hopper_setmaxnreg");
    assert_eq!(hopper["audit"], "not built");
    assert!(hopper["binary"].is_null());
    let why_90 = hopper["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["arch"] == "9.0")
        .unwrap();
    assert!(
        why_90["reason"].as_str().unwrap().contains("request 9.0a"),
        "{why_90}"
    );
}

#[test]
fn the_sm_90a_kernel_is_built_only_when_9_0a_is_requested() {
    let report = run_kernels("8.0,9.0a");
    assert_eq!(report["ok"], true);
    let hopper = kernel(&report, "hopper_setmaxnreg");
    assert_eq!(strings(&hopper["found"]), ["sm_90a"]);
    check_run_column(&report, hopper);
    let skipped = &hopper["skipped"];
    assert_eq!(skipped.as_array().unwrap().len(), 1);
    assert_eq!(skipped[0]["arch"], "8.0");
    assert_eq!(strings(&kernel(&report, "fp8_e4m3")["found"]), ["sm_90a"]);
    assert_eq!(
        strings(&kernel(&report, "f32_elementwise")["found"]),
        ["sm_80", "sm_90a"]
    );
}

#[test]
fn the_audit_catches_a_binary_that_differs_from_the_plan() {
    let tc = toolchain::ensure(&"13.2".parse().unwrap()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let src = kernels::kernels_dir().join("f32_elementwise.cu");
    let bin = dir.path().join("f32_sm75_only");
    // Built by hand without the PTX the plan below asks for.
    tc.cmd(tc.nvcc())
        .args(["-gencode", "arch=compute_75,code=sm_75", "-I"])
        .arg(kernels::kernels_dir())
        .arg(&src)
        .arg("-o")
        .arg(&bin)
        .read()
        .unwrap();
    let found = kernels::audit_images(&bin).unwrap();
    assert_eq!(kernels::cuobjdump_images(&tc, &bin).unwrap(), found);
    assert_eq!(found.iter().map(Image::name).collect::<Vec<_>>(), ["sm_75"]);
    let plan = Plan {
        targets: vec![Target {
            arch: "7.5".parse().unwrap(),
            ptx: true,
        }],
        notes: vec![],
    };
    let expected: BTreeSet<Image> = plan.images().into_iter().collect();
    assert_eq!(
        kernels::compare_images(&expected, &found).unwrap_err(),
        "missing compute_75"
    );

    // A host-only program has no device code at all: an error, not an empty pass.
    let err = kernels::audit_images(std::path::Path::new("/bin/sh"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("does not contain device code"), "{err}");
}

#[test]
fn archs_this_cuda_cannot_compile_are_refused_before_building() {
    let out = Cmd::new(XTASK)
        .args(["kernels", "--cuda", "13.2", "--arch", "7.0,8.9"])
        .output()
        .unwrap();
    assert_eq!(out.status, Some(2));
    assert!(
        out.stderr.contains("CUDA 13.2's nvcc does not compile 7.0"),
        "{}",
        out.stderr
    );
}

#[test]
fn a_kernel_declared_lower_than_it_needs_breaks_the_build() {
    let tc = toolchain::ensure(&"13.2".parse().unwrap()).unwrap();
    let tools =
        toolchain::buildtools::ensure(&archsmith::paths::cache_dir().join("tools"), &mut |_| {})
            .unwrap();
    // A copy of kernels/ whose manifest claims fp8_e4m3 runs on sm_80.
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("kernels");
    std::fs::create_dir_all(&src).unwrap();
    for f in ["CMakeLists.txt", "common.cuh", "fp8_e4m3.cu"] {
        std::fs::copy(kernels::kernels_dir().join(f), src.join(f)).unwrap();
    }
    std::fs::write(
        src.join("kernels.toml"),
        "[[kernel]]\nname = \"fp8_e4m3\"\nmin_arch = \"8.0\"\nwhat = \"wrongly declared\"\n",
    )
    .unwrap();
    let manifest = kernels::load_manifest(&src).unwrap();
    let plan = Plan {
        targets: vec![Target {
            arch: "8.0".parse().unwrap(),
            ptx: false,
        }],
        notes: vec![],
    };
    let selections = kernels::select(&manifest, &plan);
    assert_eq!(
        selections[0].targets.len(),
        1,
        "the wrong declaration selects sm_80"
    );
    let build_dir = dir.path().join("build");
    let err = kernels::build(
        &kernels::Build {
            source_dir: &src,
            build_dir: &build_dir,
            toolchain: &tc,
            tools: Some(&tools),
            plan: &plan,
            no_image_arch: None,
        },
        &selections,
    )
    .unwrap_err();
    let msg = format!("{err:#}");
    assert!(msg.contains("building kernels/ failed"), "{msg}");
    assert!(
        msg.contains("fp8_e4m3 needs the e4m3x2 cvt instruction (sm_89+)"),
        "the compiler's #error is quoted: {msg}"
    );
}

/// Issue 50: an air-gapped GPU host with a system CUDA and no cmake failed the GPU check's kernels
/// step. The kernels are single files: with no cmake and ninja to be had (offline, a fresh home,
/// a PATH without them), nvcc alone builds them, and the audit still finds exactly the plan.
#[test]
fn with_no_cmake_nvcc_alone_builds_the_planned_images() {
    let tc = toolchain::ensure(&"13.2".parse().unwrap()).expect("CUDA 13.2 toolchain");
    let home = tempfile::tempdir().unwrap();
    let path = std::env::join_paths([
        tc.bin_dir(),
        std::path::PathBuf::from("/usr/bin"),
        std::path::PathBuf::from("/bin"),
    ])
    .unwrap();
    assert!(
        std::env::split_paths(&path).all(|d| !d.join("cmake").exists()),
        "the case is a PATH without cmake"
    );
    let cmd = Cmd::new(XTASK)
        .args([
            "kernels",
            "--cuda",
            "13.2",
            "--json",
            "--offline",
            "--arch",
            "8.9,9.0+PTX",
        ])
        .env("ARCHSMITH_HOME", home.path())
        .env("CUDA_HOME", tc.cuda_home())
        .env("PATH", &path);
    let out = cmd.output().unwrap();
    assert_eq!(out.status, Some(0), "{}\n{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("with nvcc alone"), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("not on this machine, and would have to be downloaded"),
        "{}",
        out.stderr
    );
    let report: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(report["ok"], true, "{report}");
    assert!(report["cmake"]
        .as_str()
        .unwrap()
        .starts_with("none: nvcc alone"));
    let f32 = kernel(&report, "f32_elementwise");
    assert_eq!(f32["audit_ok"], true, "{f32}");
    assert_eq!(
        strings(&f32["found"]),
        ["sm_89", "sm_90", "compute_90"],
        "{f32}"
    );
}
