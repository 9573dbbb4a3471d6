//! `cargo xtask verify env` on real environments: the torch 2.15.0 env archsmith provisions (true
//! expectations pass; a wrong arch list, a wrong version and a wrong CUDA fail naming what
//! differs; JUnit written), a Python without torch, and a venv inside a conda prefix.

mod support;

use serde_json::Value;
use std::path::Path;
use std::process::Command;

fn verify_env(python: &Path, extra: &[&str]) -> (i32, Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["verify", "env", "--python"])
        .arg(python)
        .args(extra)
        .arg("--json")
        .output()
        .expect("run xtask");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\n{stderr}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    (out.status.code().unwrap_or(-1), v, stderr)
}

fn item<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == name)
        .unwrap_or_else(|| panic!("no item {name} in {v}"))
}

#[test]
fn the_real_torch_env_passes_its_truth_and_fails_a_wrong_list() {
    let env = archsmith::python::ensure_torch_env(&support::TORCH.parse().unwrap()).unwrap();
    let scratch = support::scratch("verify-env");
    let junit = scratch.join("env.xml");
    let truth = [
        "--expect",
        "torch==2.15.0",
        "--expect-cuda",
        "13.2",
        "--expect-arch",
        "7.5;8.0;8.6;9.0;10.0;12.0",
        "--gpu",
        "L4",
        "--no-conda",
        "--gpu-smoke",
        "--junit",
        junit.to_str().unwrap(),
    ];
    let (code, v, stderr) = verify_env(&env.python, &truth);
    assert_eq!(code, 0, "{v}\n{stderr}");
    assert_eq!(v["schema"], 1);
    assert_eq!(v["ok"], true);
    assert_eq!(item(&v, "torch==2.15.0")["status"], "ok");
    // torch's, torchvision's and numpy's compiled modules all load into their own env.
    let modules = item(&v, "compiled modules load");
    assert_eq!(modules["status"], "ok", "{modules}");
    let count: usize = modules["detail"]
        .as_str()
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert!(count >= 10, "{modules}");
    assert_eq!(item(&v, "libtorch_cuda.so")["status"], "ok");
    assert_eq!(
        item(&v, "arch flags")["detail"],
        "_cuda_getArchFlags() = sm_75 sm_80 sm_86 sm_90 sm_100 sm_120"
    );
    assert_eq!(item(&v, "runs on L4 (CC 8.9)")["detail"], "via sm_86");
    assert_eq!(item(&v, "gpu smoke")["status"], "skipped");
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(
        xml.contains(r#"<testcase name="arch flags" classname="verify env">"#),
        "{xml}"
    );
    assert!(xml.contains(r#"failures="0""#), "{xml}");

    // A list this torch was not built for: each difference named.
    let (code, v, _) = verify_env(
        &env.python,
        &[
            "--expect-arch",
            "7.5,8.9,9.0",
            "--expect-cuda",
            "12.8",
            "--expect",
            "torch==2.6.0",
        ],
    );
    assert_eq!(code, 1);
    let lib = item(&v, "libtorch_cuda.so");
    assert_eq!(lib["status"], "fail");
    let d = lib["detail"].as_str().unwrap();
    assert!(
        d.starts_with(
            "missing sm_89 (1 of 476 containers); not planned sm_80 (in every container)"
        ),
        "{d}"
    );
    assert_eq!(item(&v, "arch flags")["status"], "fail");
    assert_eq!(
        item(&v, "torch.version.cuda")["detail"],
        "13.2 but expected CUDA 12.8"
    );
    assert_eq!(
        item(&v, "torch==2.6.0")["detail"],
        "torch 2.15.0+cu132 is installed"
    );

    // The T4 runs libtorch_cuda.so but libtorch_cuda_linalg.so only partly: the same verdict as
    // `verify binary` and doctor give (a failure, naming the library and MAGMA's kernels).
    let (code, v, _) = verify_env(&env.python, &["--gpu", "T4"]);
    let t4 = item(&v, "runs on Tesla T4 (CC 7.5)");
    assert_eq!(code, 1);
    assert_eq!(t4["status"], "fail", "{t4}");
    let detail = t4["detail"].as_str().unwrap();
    assert!(
        detail.starts_with("partly: via sm_75")
            && detail
                .contains("libtorch_cuda_linalg.so (1 of 33 containers): MAGMA (32 containers"),
        "{t4}"
    );
}

#[test]
fn a_python_without_torch_fails_and_bad_input_exits_2() {
    let python = archsmith::python::host_python().unwrap();
    let (code, v, _) = verify_env(&python, &[]);
    if v["torch"].is_null() {
        assert_eq!(code, 1);
        assert_eq!(item(&v, "torch")["status"], "fail");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["verify", "env", "--expect", "torch"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("expected NAME==VERSION"));
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["verify", "env", "--python", "/nonexistent/python3"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// A venv created inside a directory that holds `conda-meta/` (what a conda prefix has): its
/// sys.path entries are conda's, and --no-conda fails on them.
#[test]
fn no_conda_fails_inside_a_conda_prefix() {
    let prefix = support::scratch("verify-env-conda");
    std::fs::create_dir_all(prefix.join("conda-meta")).unwrap();
    let venv = prefix.join("envs/py");
    let host = archsmith::python::host_python().unwrap();
    let ok = Command::new(&host)
        .args(["-m", "venv", "--without-pip"])
        .arg(&venv)
        .status()
        .unwrap();
    assert!(ok.success());
    let (code, v, _) = verify_env(&venv.join("bin/python"), &["--no-conda"]);
    assert_eq!(code, 1);
    let c = item(&v, "no conda paths");
    assert_eq!(c["status"], "fail");
    assert!(c["detail"].as_str().unwrap().contains("sys.path: "), "{c}");
    // Without --no-conda it is reported, not failed.
    let (_, v, _) = verify_env(&venv.join("bin/python"), &[]);
    assert_eq!(item(&v, "no conda paths")["status"], "skipped");
    let _ = std::fs::remove_dir_all(&prefix);
}

/// An env with one stale compiled extension: torchvision 0.21.0 (built for torch 2.6.0 cu124, with
/// the pre-C++11 ABI) beside torch 2.15.0 cu132. The env is a venv whose site-packages reaches the shared
/// torch env's through a `.pth` file, so the shared env is never touched.
#[test]
fn a_stale_compiled_extension_is_named_and_fails_the_env() {
    let env = archsmith::python::ensure_torch_env(&support::TORCH.parse().unwrap()).unwrap();
    let shared = archsmith::python::probe(&env.python, archsmith::python::Depth::Files).unwrap();
    let root = support::scratch("verify-env-stale");
    let _ = std::fs::remove_dir_all(&root);
    let host = archsmith::python::host_python().unwrap();
    let made = Command::new(&host)
        .args(["-m", "venv", "--without-pip"])
        .arg(root.join("venv"))
        .status()
        .unwrap();
    assert!(made.success());
    let python = root.join("venv/bin/python");
    let site = archsmith::python::probe(&python, archsmith::python::Depth::Files)
        .unwrap()
        .purelib;
    std::fs::write(
        site.join("shared-torch-env.pth"),
        format!("{}\n", shared.purelib.display()),
    )
    .unwrap();
    let stale =
        archsmith::downloads::download_wheel("torchvision", &"0.21.0".parse().unwrap()).unwrap();
    archsmith::wheel::Wheel::open(&stale)
        .unwrap()
        .extract_all(&site)
        .unwrap();

    // Beside it, a package that has nothing to do with torch, with an optional backend whose
    // library is absent (numba's TBB layer, CuPy's cuTENSOR in a real image): reported, not
    // counted against torch.
    let optional = optional_backend(&root, &site, &python);

    let (code, v, stderr) = verify_env(&python, &[]);
    assert_eq!(code, 1, "{v}\n{stderr}");
    let others = item(&v, "modules that do not use torch");
    assert_eq!(others["status"], "skipped", "{others}");
    let said = others["detail"].as_str().unwrap();
    assert!(
        said.starts_with("1 would not load")
            && said.contains("optionalpkg/_tbbpool.")
            && said.contains("libgone_backend.so.3"),
        "{said}"
    );
    std::fs::remove_dir_all(optional).unwrap();
    torch_global_bridge(&root, &python);
    let failed: Vec<&Value> = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["status"] == "fail")
        .collect();
    let names: Vec<&str> = failed.iter().map(|i| i["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"loads: torchvision/_C.so"), "{names:?}");
    let detail = item(&v, "loads: torchvision/_C.so")["detail"]
        .as_str()
        .unwrap()
        .to_string();
    // The loader stops at the first failure: a cu124 build needs libcudart.so.12, which a cu132
    // torch env does not have (its symbols, built with the pre-C++11 ABI, would fail next).
    for want in [
        "libcudart.so.12: cannot open shared object file",
        "built for CUDA 12",
        "CUDA 13.2",
    ] {
        assert!(detail.contains(want), "{want} missing from {detail}");
    }
    // What Python does with the same file agrees.
    let truth = archsmith::python::import_check::import_in_fresh_interpreter(
        &python,
        &site.join("torchvision/_C.so"),
        "library",
        "torchvision._C",
        &[],
    )
    .unwrap();
    assert!(!truth.loads && truth.link_failed(), "{truth:?}");

    // Before an upgrade: the same torchvision, installed in an env of torch 2.6.0's era, read
    // against torch 2.15.0 by `audit upgrade --installed`.
    let project = root.join("project");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("train.py"), "import torch\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["audit", "upgrade", "--from", "2.6.0", "--to", "2.15.0"])
        .arg(&project)
        .arg("--installed")
        .arg(&python)
        .arg("--to-python")
        .arg(&env.python)
        .arg("--json")
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(1), "{v}");
    let breaking: Vec<&str> = v["compiled"]["breaking"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["path"].as_str().unwrap())
        .collect();
    assert!(
        breaking.iter().any(|p| p.ends_with("torchvision/_C.so")),
        "{breaking:?}"
    );
    assert!(
        breaking.iter().all(|p| p.contains("torchvision/")),
        "{breaking:?}"
    );
    // And by torch 2.15.0's real exports: torchvision 0.21's `_C.so` is tied to one torch's C++
    // ABI (rebuilt at every upgrade), and refused there.
    let files = v["compiled"]["torch_range"]["files"].as_array().unwrap();
    let c = files
        .iter()
        .find(|f| f["path"].as_str().unwrap().ends_with("torchvision/_C.so"))
        .unwrap();
    assert_eq!(c["torch"]["kind"], "tied", "{c}");
    assert_eq!(c["torch"]["loads_on"], serde_json::json!([]), "{c}");
}

/// `SITE/optionalpkg/_tbbpool.<tag>.so`, a compiled module that needs `libgone_backend.so.3`,
/// which is gone after the link (as an optional backend's library is absent from an image). The
/// package directory.
fn optional_backend(root: &Path, site: &Path, python: &Path) -> std::path::PathBuf {
    let lib = root.join("lib");
    let pkg = site.join("optionalpkg");
    std::fs::create_dir_all(&lib).unwrap();
    std::fs::create_dir_all(&pkg).unwrap();
    std::fs::write(lib.join("gone.c"), "int gone(void){return 1;}\n").unwrap();
    std::fs::write(
        lib.join("mod.c"),
        "int gone(void); int f(void){return gone();}\n",
    )
    .unwrap();
    let cc = |args: &[&str]| {
        let ok = Command::new("cc")
            .current_dir(&lib)
            .args(args)
            .status()
            .unwrap();
        assert!(ok.success(), "cc {args:?}");
    };
    cc(&[
        "-shared",
        "-fPIC",
        "-Wl,-soname,libgone_backend.so.3",
        "-o",
        "libgone_backend.so.3",
        "gone.c",
    ]);
    let suffix = archsmith::process::Cmd::new(python)
        .args([
            "-c",
            "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))",
        ])
        .read()
        .unwrap();
    let module = pkg.join(format!("_tbbpool{}", suffix.trim()));
    cc(&[
        "-shared",
        "-fPIC",
        "-o",
        module.to_str().unwrap(),
        "mod.c",
        "-L.",
        "-l:libgone_backend.so.3",
    ]);
    std::fs::remove_file(lib.join("libgone_backend.so.3")).unwrap();
    pkg
}

/// A module that binds torch's C shim (`aoti_torch_dtype_float32`) without linking libtorch, as
/// cuda.core's tensor bridge does: it loads once its package has made `torch._C` global, and
/// not before. The verdict says both, and Python agrees with each.
fn torch_global_bridge(root: &Path, python: &Path) {
    use archsmith::python::import_check::import_in_fresh_interpreter;
    use archsmith::verify::load_check::{check_paths, linker::Objects, Target};
    let dir = root.join("bridge");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("bridge.c"),
        "int aoti_torch_dtype_float32(void); int dtype(void){return aoti_torch_dtype_float32();}\n",
    )
    .unwrap();
    let file = dir.join("_bridge.so");
    let ok = Command::new("cc")
        .current_dir(&dir)
        .args(["-shared", "-fPIC", "-o", "_bridge.so", "bridge.c"])
        .status()
        .unwrap();
    assert!(ok.success());
    let mut objects = Objects::default();
    let target = Target::from_python(python, &mut objects).unwrap();
    let v = &check_paths(&target, &mut objects, std::slice::from_ref(&file)).unwrap()[0];
    assert!(v.loads && v.needs_torch_global, "{v:?}");
    let preloads = v.preloads(&target);
    assert!(preloads[0].starts_with("RTLD_GLOBAL:"), "{preloads:?}");
    let truth = import_in_fresh_interpreter(python, &file, v.kind, "_bridge", &preloads).unwrap();
    assert!(truth.loads, "{truth:?}");
    let plain = import_in_fresh_interpreter(python, &file, v.kind, "_bridge", &[]).unwrap();
    assert!(!plain.loads, "{plain:?}");
    assert!(
        plain
            .error
            .as_deref()
            .unwrap()
            .contains("undefined symbol: aoti_torch_dtype_float32"),
        "{plain:?}"
    );
}

/// `--torch-range`: the env's compiled modules against each release's real exports, before an
/// upgrade. The torch 2.15.0 env's torchvision 0.29.2 is on the stable ABI from 2.13: it loads on
/// 2.15.0 (the item passes) and not on 2.12.1 (the item fails naming `_C_stable.so` and the shims
/// 2.12.1 lacks); a range that is not one exits 2.
#[test]
fn the_envs_modules_are_checked_against_a_range_of_releases() {
    let env = archsmith::python::ensure_torch_env(&support::TORCH.parse().unwrap()).unwrap();
    let (code, v, stderr) = verify_env(&env.python, &["--torch-range", "torch==2.15.0"]);
    let ok = item(&v, "loads on torch==2.15.0");
    assert_eq!(ok["status"], "ok", "{ok}\n{stderr}");
    assert!(
        ok["detail"].as_str().unwrap().contains("on the stable ABI"),
        "{ok}"
    );
    assert_eq!(code, 0, "{v}");
    let (code, v, _) = verify_env(&env.python, &["--torch-range", "torch>=2.12.1,<2.14"]);
    let not = item(&v, "loads on torch>=2.12.1,<2.14");
    assert_eq!(not["status"], "fail", "{not}");
    let detail = not["detail"].as_str().unwrap();
    assert!(
        detail.contains("torchvision/_C_stable.so") && detail.contains("not on 2.12.1"),
        "{detail}"
    );
    assert_eq!(code, 1);
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["verify", "env", "--torch-range", "torch>=9.0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--torch-range"));
}
