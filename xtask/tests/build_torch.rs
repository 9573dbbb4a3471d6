//! `cargo xtask build-torch` end to end on trees that mimic each of torch's front ends
//! (`tests/fixtures/torch-tree-*`): the dry-run plan and its variable cross-check, preflight
//! failures with their fixes, a real build of the setup.py fixture with CMake, ninja and the CUDA
//! 13.2 nvcc from PyPI (progress, log, first error, stamp reuse, reconfigure on a changed list,
//! the verify step), `--version` cloning a local git repository, and the verify step on the real
//! torch 2.15.0 wheel. The real PyTorch 2.6.0 tree (Debian's source package) is exercised by
//! `real_torch_tree_*`, which runs where `ARCHSMITH_TORCH_SRC` names one (docs/build-torch.md).

mod support;

use support::git;

use archsmith::process::Cmd;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

const CUDA: &str = "13.2";

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn xtask_env(args: &[&str], env: &[(&str, &str)], dir: Option<&Path>) -> Run {
    let mut c = Command::new(env!("CARGO_BIN_EXE_xtask"));
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    // The host compiler comes from the test's own choice, never the caller's shell.
    c.env_remove("CUDAHOSTCXX").env_remove("CXX");
    if let Some(d) = dir {
        c.current_dir(d);
    }
    let out = c.output().expect("run xtask");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn xtask(args: &[&str]) -> Run {
    xtask_env(args, &[], None)
}

/// `build-torch --arch ARCH --src SRC --cuda 13.2 --dry-run --json` plus `extra`, as JSON.
fn dry_run(src: &str, arch: &str, extra: &[&str]) -> Value {
    let mut args = vec![
        "build-torch",
        "--arch",
        arch,
        "--src",
        src,
        "--cuda",
        CUDA,
        "--dry-run",
        "--json",
    ];
    args.extend_from_slice(extra);
    json(&xtask(&args))
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// A private copy of a fixture tree (builds write `build/` into it), and the scratch directory
/// that holds it (removed when dropped: keep it for the test's length).
fn copy_fixture(name: &str, test: &str) -> (support::Scratch, PathBuf) {
    let scratch = support::scratch(test);
    let dir = scratch.join("src");
    copy_dir(&fixture(name), &dir);
    (scratch, dir)
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let p = e.path();
        let t = to.join(e.file_name());
        if p.is_dir() {
            copy_dir(&p, &t);
        } else {
            std::fs::copy(&p, &t).unwrap();
        }
    }
}

fn json(r: &Run) -> Value {
    serde_json::from_str(&r.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}):\n{}\nstderr:\n{}", r.stdout, r.stderr))
}

fn check<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["prepared"]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check {name} in {v}"))
}

fn var<'a>(v: &'a Value, name: &str) -> Option<&'a Value> {
    v["prepared"]["plan"]["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == name)
}

fn value(v: &Value, name: &str) -> String {
    var(v, name).unwrap_or_else(|| panic!("the plan sets no {name}"))["value"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Every build variable is read by the tree (file:line) or by CMake.
fn assert_all_read(v: &Value) {
    for e in v["prepared"]["plan"]["env"].as_array().unwrap() {
        if e["kind"] == "build" {
            assert!(!e["read_by"].is_null(), "nothing reads {e}");
        }
    }
    assert_eq!(check(v, "variables read")["status"], "ok");
}

#[test]
fn dry_run_plans_the_setup_py_front_end() {
    let (_src_scratch, src) = copy_fixture("torch-tree-setup-py", "bt-dry-setup");
    let s = src.to_str().unwrap();
    let v = dry_run(s, "7.5,8.9,9.0", &[]);
    let tree = &v["prepared"]["tree"];
    assert_eq!(tree["front_end"], "setup-py");
    assert_eq!(tree["version_text"], "2.12.0a0");
    assert_eq!(tree["python_min"], "3.9.0");
    assert_eq!(tree["cmake_min"], "3.18");
    assert_eq!(tree["gcc_min"], "9.3");
    assert_eq!(value(&v, "TORCH_CUDA_ARCH_LIST"), "7.5;8.9;9.0");
    assert_eq!(value(&v, "USE_CUDA"), "1");
    assert_eq!(value(&v, "USE_NINJA"), "1");
    assert_eq!(value(&v, "USE_CCACHE"), "0");
    assert_eq!(value(&v, "BUILD_TEST"), "0");
    assert_eq!(value(&v, "PYTORCH_BUILD_VERSION"), "2.12.0a0+cu132");
    assert_eq!(value(&v, "PYTORCH_BUILD_NUMBER"), "0");
    assert_eq!(
        value(&v, "TORCH_NVCC_FLAGS"),
        "-Xfatbin -compress-all -compress-mode=size"
    );
    // One CUDA root for every location variable.
    let root = value(&v, "CUDA_HOME");
    assert_eq!(value(&v, "CUDA_PATH"), root);
    assert_eq!(value(&v, "CUDAToolkit_ROOT"), root);
    assert_eq!(
        value(&v, "CUDA_NVCC_EXECUTABLE"),
        format!("{root}/bin/nvcc")
    );
    assert_eq!(value(&v, "CUDACXX"), format!("{root}/bin/nvcc"));
    assert!(var(&v, "CMAKE_GENERATOR").is_none());
    assert_all_read(&v);
    let plan = &v["prepared"]["plan"];
    let cmd: Vec<&str> = plan["wheel_command"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap())
        .collect();
    assert_eq!(&cmd[1..3], ["setup.py", "bdist_wheel"]);
    let configure: Vec<&str> = plan["configure_command"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap())
        .collect();
    assert_eq!(&configure[1..], ["setup.py", "build", "--cmake-only"]);
    // The advice is there for each planned arch.
    let advice = v["prepared"]["advice"].as_array().unwrap();
    assert_eq!(advice.len(), 3);
    assert!(
        advice[1]["source_build_adds"]
            .as_str()
            .unwrap()
            .contains("native sm_89"),
        "{advice:?}"
    );

    // The people's form is a sourceable environment.
    let r = xtask(&[
        "build-torch",
        "--arch",
        "7.5,8.9,9.0",
        "--src",
        s,
        "--cuda",
        CUDA,
        "--dry-run",
    ]);
    let exports: String = r
        .stdout
        .lines()
        .filter(|l| l.starts_with("export "))
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(r.stdout.contains("# command: cd "), "{}", r.stdout);
    let out = Cmd::new("sh")
        .arg("-c")
        .arg(format!(
            "{exports}printf '%s|%s' \"$TORCH_CUDA_ARCH_LIST\" \"$USE_CUDA\""
        ))
        .read()
        .unwrap();
    assert_eq!(out, "7.5;8.9;9.0|1");
    let _ = std::fs::remove_dir_all(src.parent().unwrap());
}

#[test]
fn dry_run_plans_the_scikit_build_front_end() {
    let (_src_scratch, src) = copy_fixture("torch-tree-scikit-build", "bt-dry-skbuild");
    let s = src.to_str().unwrap();
    let v = dry_run(s, "7.5,8.9,9.0", &[]);
    assert_eq!(v["prepared"]["tree"]["front_end"], "scikit-build-core");
    assert_eq!(v["prepared"]["tree"]["python_min"], "3.10");
    assert_eq!(v["prepared"]["tree"]["cmake_min"], "3.27");
    assert_eq!(value(&v, "TORCH_CUDA_ARCH_LIST"), "7.5;8.9;9.0");
    assert_eq!(value(&v, "CMAKE_GENERATOR"), "Ninja");
    assert_eq!(value(&v, "PYTORCH_BUILD_VERSION"), "2.15.0+cu132");
    // setup.py's switches are gone with setup.py.
    assert!(var(&v, "USE_NINJA").is_none());
    assert_all_read(&v);
    let plan = &v["prepared"]["plan"];
    let cmd: Vec<&str> = plan["wheel_command"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap())
        .collect();
    assert_eq!(&cmd[1..5], ["-m", "pip", "wheel", "--no-build-isolation"]);
    assert!(cmd.contains(&"-Cbuild-dir=build"), "{cmd:?}");
    assert_eq!(plan["configure_command"][0], "cmake");
    let _ = std::fs::remove_dir_all(src.parent().unwrap());
}

#[test]
fn preflight_fails_fast_with_the_fix() {
    let (_sk_scratch, sk) = copy_fixture("torch-tree-scikit-build", "bt-preflight");
    let s = sk.to_str().unwrap();
    // An arch CUDA 13 dropped.
    let r = xtask(&[
        "build-torch",
        "--arch",
        "7.0",
        "--src",
        s,
        "--cuda",
        CUDA,
        "--json",
    ]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    let v = json(&r);
    let c = check(&v, "arch list");
    assert_eq!(c["status"], "fail");
    assert!(
        c["detail"]
            .as_str()
            .unwrap()
            .contains("7.0 is not supported by CUDA 13.2"),
        "{c}"
    );
    assert!(c["fix"].as_str().unwrap().contains("--cuda 12.9"), "{c}");
    assert!(v["wheel"].is_null());
    eprintln!(
        "preflight for --cuda 13.2 --arch 7.0: {} s",
        v["prepared"]["preflight_seconds"]
    );

    // A misspelt switch: nothing in the tree reads it.
    let v = dry_run(s, "9.0", &["--set", "USE_CUDNNN=0"]);
    let c = check(&v, "variables read");
    assert_eq!(c["status"], "fail");
    assert!(
        c["detail"]
            .as_str()
            .unwrap()
            .contains("USE_CUDNNN=0 (--set)"),
        "{c}"
    );
    assert!(var(&v, "USE_CUDNNN").unwrap()["read_by"].is_null());
    // `--set NAME=` leaves a variable unset.
    let r = xtask(&[
        "build-torch",
        "--arch",
        "9.0",
        "--src",
        s,
        "--cuda",
        CUDA,
        "--set",
        "USE_MAGMA=",
        "--dry-run",
        "--json",
    ]);
    assert!(var(&json(&r), "USE_MAGMA").is_none());

    // Missing submodules in a tarball-like tree: named, with where to get them.
    let v = dry_run(s, "9.0", &[]);
    let c = check(&v, "submodules");
    assert_eq!(c["status"], "fail");
    let detail = c["detail"].as_str().unwrap();
    assert!(
        detail.contains("third_party/cutlass") && detail.contains("third_party/kineto"),
        "{c}"
    );
    let fix = c["fix"].as_str().unwrap();
    assert!(
        fix.contains("pytorch-v2.15.0.tar.gz") && fix.contains("--set USE_KINETO=0"),
        "{c}"
    );
    assert!(!fix.contains("USE_CUDA=0"), "{c}");
    // Switching a feature off drops its directory from the list.
    let r = xtask(&[
        "build-torch",
        "--arch",
        "9.0",
        "--src",
        s,
        "--cuda",
        CUDA,
        "--set",
        "USE_KINETO=0",
        "--dry-run",
        "--json",
    ]);
    let detail = check(&json(&r), "submodules")["detail"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(!detail.contains("kineto"), "{detail}");

    // The same tree as a git checkout: the fix is the submodule command for exactly those.
    git(&sk, &["init", "-q"]);
    git(&sk, &["add", "."]);
    git(&sk, &["commit", "-qm", "fixture"]);
    let v = dry_run(s, "9.0", &[]);
    let fix = check(&v, "submodules")["fix"].as_str().unwrap().to_string();
    assert!(
        fix.starts_with(&format!(
            "git -C {s} submodule update --init --recursive -- third_party/"
        )),
        "{fix}"
    );
    assert!(v["prepared"]["tree"]["git"]["head"].as_str().unwrap().len() == 40);

    // A torch that predates the CUDA.
    let (_old_scratch, old) = copy_fixture("torch-tree-setup-py", "bt-preflight-old");
    std::fs::write(old.join("version.txt"), "2.6.0\n").unwrap();
    let r = xtask(&[
        "build-torch",
        "--arch",
        "7.5,8.9,9.0",
        "--src",
        old.to_str().unwrap(),
        "--cuda",
        CUDA,
        "--json",
    ]);
    assert_eq!(r.code, 2);
    let c = check(&json(&r), "torch vs CUDA").clone();
    assert_eq!(c["status"], "fail");
    assert!(
        c["detail"]
            .as_str()
            .unwrap()
            .contains("torch 2.6.0 predates CUDA 13"),
        "{c}"
    );
    assert!(c["fix"].as_str().unwrap().contains("--cuda 12.6"), "{c}");

    // Not a torch tree, and no source at all: exit 2 with what to give.
    let r = xtask(&[
        "build-torch",
        "--arch",
        "9.0",
        "--src",
        sk.parent().unwrap().to_str().unwrap(),
    ]);
    assert_eq!(r.code, 2);
    assert!(
        r.stderr
            .contains("not a PyTorch source tree (no version.txt"),
        "{}",
        r.stderr
    );
    let r = xtask(&["build-torch", "--arch", "9.0"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("give --src DIR"), "{}", r.stderr);
    for d in [sk, old] {
        let _ = std::fs::remove_dir_all(d.parent().unwrap());
    }
}

/// nvcc 11.8's ceiling is GCC 11 (crt/host_config.h): with Debian bookworm's real
/// `nvidia-cuda-toolkit` (11.8) and its default g++ 12, preflight refuses and names the g++-11
/// that is installed beside it. Runs where that toolkit is installed; says so where it is not.
#[test]
#[ignore = "system-toolkit tier: needs Debian's nvidia-cuda-toolkit 11.8 with g++-12 and g++-11 (apt-get install nvidia-cuda-toolkit); cargo test -- --ignored"]
fn preflight_refuses_a_gcc_newer_than_a_real_nvcc_11_8_accepts() {
    let nvcc = Path::new("/usr/bin/nvcc");
    let g12 = Path::new("/usr/bin/g++-12");
    let g11 = Path::new("/usr/bin/g++-11");
    let is_118 = Cmd::new(nvcc)
        .arg("--version")
        .read()
        .is_ok_and(|v| v.contains("release 11.8"));
    assert!(
        is_118 && g12.exists() && g11.exists(),
        "needs Debian's nvidia-cuda-toolkit 11.8 with g++-12 and g++-11 (apt-get install nvidia-cuda-toolkit)"
    );
    let (_src_scratch, src) = copy_fixture("torch-tree-setup-py", "bt-gcc");
    std::fs::write(src.join("version.txt"), "2.6.0\n").unwrap();
    let s = src.to_str().unwrap();
    let args = [
        "build-torch",
        "--arch",
        "7.5,8.9,9.0",
        "--src",
        s,
        "--cuda",
        "11.8",
        "--json",
    ];
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(args)
        .env("CXX", g12)
        .env_remove("CUDAHOSTCXX")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let hc = check(&v, "host compiler").clone();
    assert_eq!(hc["status"], "fail");
    assert!(
        hc["detail"]
            .as_str()
            .unwrap()
            .contains("newer than nvcc 11.8.89 accepts (GCC ≤ 11"),
        "{hc}"
    );
    assert!(
        hc["fix"]
            .as_str()
            .unwrap()
            .contains("CUDAHOSTCXX=/usr/bin/g++-11"),
        "{hc}"
    );
    // With the fix applied, the host compiler passes.
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(args)
        .env("CXX", g12)
        .env("CUDAHOSTCXX", g11)
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(check(&v, "host compiler")["status"], "ok");
    assert_eq!(value(&v, "CUDAHOSTCXX"), "/usr/bin/g++-11");
    let _ = std::fs::remove_dir_all(src.parent().unwrap());
}

/// A Python with what the setup.py fixture's front end imports, made with archsmith's installer.
fn build_python(scratch: &Path) -> PathBuf {
    build_python_with(
        scratch,
        &["pyyaml", "typing_extensions", "setuptools", "wheel"],
    )
}

fn build_python_with(scratch: &Path, packages: &[&str]) -> PathBuf {
    use archsmith::python::installer::Installer;
    let dir = scratch.join("py");
    let inst = Installer::detect().unwrap();
    inst.venv(&archsmith::python::host_python().unwrap(), &dir)
        .unwrap();
    let py = dir.join("bin/python");
    let pkgs: Vec<String> = packages.iter().map(|s| s.to_string()).collect();
    inst.install_into(&py, &pkgs).unwrap();
    py
}

/// `build-torch` of a fixture tree for `arch` with the fixture's switches, as JSON.
fn fixture_build_args(arch: &str, src: &Path, py: &Path, out: &Path) -> Vec<String> {
    [
        "build-torch",
        "--arch",
        arch,
        "--src",
        src.to_str().unwrap(),
        "--cuda",
        CUDA,
        "--python",
        py.to_str().unwrap(),
        "--set",
        "USE_CUDNN=0",
        "--set",
        "USE_NUMPY=0",
        "--out",
        out.to_str().unwrap(),
        "--json",
    ]
    .map(str::to_string)
    .to_vec()
}

/// The third_party directories as checked-out submodules would leave them.
fn fake_submodules(src: &Path) {
    for d in [
        "pybind11",
        "cpuinfo",
        "pthreadpool",
        "FP16",
        "FXdiv",
        "psimd",
        "sleef",
        "onnx",
        "fmt",
        "flatbuffers",
        "cutlass",
        "NVTX",
        "kineto",
        "gloo",
        "tensorpipe",
        "cpp-httplib",
        "fbgemm",
        "ideep",
        "XNNPACK",
        "NNPACK",
        "ittapi",
        "protobuf",
    ] {
        let p = src.join("third_party").join(d);
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(p.join("LICENSE"), "fixture\n").unwrap();
    }
}

#[test]
fn builds_the_fixture_tree_verifies_it_and_reuses_or_reconfigures() {
    let (_src_scratch, src) = copy_fixture("torch-tree-setup-py", "bt-build");
    let scratch = src.parent().unwrap().to_path_buf();
    fake_submodules(&src);
    let py = build_python(&scratch);
    let out = scratch.join("out");
    let (s, p, o) = (
        src.to_str().unwrap(),
        py.to_str().unwrap(),
        out.to_str().unwrap(),
    );
    let build_with = |arch: &str, extra: &[&str]| {
        let mut args = vec![
            "build-torch",
            "--arch",
            arch,
            "--src",
            s,
            "--cuda",
            CUDA,
            "--python",
            p,
            "--set",
            "USE_CUDNN=0",
            "--set",
            "USE_NUMPY=0",
            "--out",
            o,
            "--json",
        ];
        args.extend_from_slice(extra);
        xtask(&args)
    };
    let build = |arch: &str| build_with(arch, &[]);
    let r = build("7.5,8.9,9.0+PTX");
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let v = json(&r);
    let wheel = PathBuf::from(v["wheel"].as_str().unwrap());
    assert!(wheel.is_file() && wheel.parent() == Some(out.as_path()));
    assert_eq!(
        wheel
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .split('-')
            .nth(1),
        Some("2.12.0a0+cu132")
    );
    assert_eq!(v["reused"], false);
    // Progress from ninja's [N/M] lines, the full log on disk, .ninja_log beside the wheel.
    assert!(r.stderr.contains("torch [1/2] kernel.cu"), "{}", r.stderr);
    let log = std::fs::read_to_string(v["log"].as_str().unwrap()).unwrap();
    assert!(
        log.contains("export TORCH_CUDA_ARCH_LIST='7.5;8.9;9.0+PTX'")
            && log.contains("Building CUDA object"),
        "{log}"
    );
    assert!(out
        .join(format!(
            "{}.ninja_log",
            wheel.file_name().unwrap().to_str().unwrap()
        ))
        .is_file());
    assert_compiles_were_metered(&v, &[("kernel.cu", "nvcc")]);
    // The verify step: exactly the planned images, and the live module's answers.
    let verify = &v["verify"];
    assert_eq!(verify["ok"], true, "{verify}");
    let items = verify["items"].as_array().unwrap();
    let item = |n: &str| {
        items
            .iter()
            .find(|i| i["name"] == n)
            .unwrap_or_else(|| panic!("{n}: {verify}"))
    };
    assert_eq!(item("libtorch_cuda.so")["status"], "ok");
    assert_eq!(item("torch.version.cuda")["detail"], "13.2");
    assert_eq!(
        item("arch flags")["detail"],
        "_cuda_getArchFlags() = sm_75 sm_89 sm_90 compute_90"
    );
    let audit = xtask(&[
        "verify",
        "binary",
        wheel.to_str().unwrap(),
        "--expect-arch",
        "7.5,8.9,9.0+PTX",
        "--strict",
    ]);
    assert_eq!(audit.code, 0, "{}", audit.stdout);

    // Unchanged: the stamp returns the same wheel without building.
    let r = build("7.5,8.9,9.0+PTX");
    let v = json(&r);
    assert_eq!(v["reused"], true, "{}", r.stderr);
    assert!(v["log"].is_null());
    assert_eq!(v["wheel"].as_str().unwrap(), wheel.to_str().unwrap());

    // A changed list: the old CMakeCache.txt is named and reconfigured, never silently reused.
    // (With sccache through CMake's launchers, and its statistics at the end.)
    let r = build_with("8.0,9.0", &["--cache", "sccache"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v = json(&r);
    let reconf: Vec<&str> = v["prepared"]["reconfigure"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap())
        .collect();
    assert_eq!(reconf, ["TORCH_CUDA_ARCH_LIST: 7.5;8.9;9.0+PTX → 8.0;9.0"]);
    assert_eq!(v["verify"]["ok"], true, "{}", v["verify"]);
    let stats = v["cache_stats"].as_str().unwrap_or_default();
    assert!(stats.contains("Compile requests"), "{stats}");
    assert_eq!(
        value(&v, "CMAKE_CUDA_COMPILER_LAUNCHER"),
        value(&v, "CMAKE_CXX_COMPILER_LAUNCHER")
    );
    let new_wheel = v["wheel"].as_str().unwrap().to_string();
    let audit = xtask(&[
        "verify",
        "binary",
        &new_wheel,
        "--expect-arch",
        "8.0,9.0",
        "--strict",
    ]);
    assert_eq!(audit.code, 0, "{}", audit.stdout);

    // A compile error: exit 1, the first real error with its file and line, the log's path.
    let kernel = src.join("aten/kernel.cu");
    let text = std::fs::read_to_string(&kernel).unwrap();
    std::fs::write(
        &kernel,
        text.replace(
            "y[i] = a * x[i] + y[i];",
            "y[i] = a * x[i] + undeclared_name;",
        ),
    )
    .unwrap();
    let r = build("8.0,9.0");
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr.contains("the torch build failed (exit 1)"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains("aten/kernel.cu") && r.stderr.contains("undeclared_name"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("full log: "), "{}", r.stderr);
    // No half-written wheel: only delivered wheels and their records.
    for e in std::fs::read_dir(&out).unwrap().flatten() {
        let n = e.file_name().to_string_lossy().into_owned();
        assert!(!n.contains(".partial-"), "{n}");
    }
    let _ = std::fs::remove_dir_all(&scratch);
}

/// Every compile of the build ran through archsmith's compile meter (CMake's launcher): the trace
/// holds each of `compiles` (file, tool) measured — a peak of its own process tree, what the
/// memory pool reserved for it — CMake's own probes while configuring do not show, and the
/// summary names the heaviest.
fn assert_compiles_were_metered(v: &Value, compiles: &[(&str, &str)]) {
    let insight = &v["insight"];
    let trace: Value = serde_json::from_slice(
        &std::fs::read(insight["trace"].as_str().expect("a trace path")).unwrap(),
    )
    .unwrap();
    let events = trace["traceEvents"].as_array().unwrap();
    for (name, tool) in compiles {
        let e = events
            .iter()
            .find(|e| e["ph"] == "X" && e["name"] == *name && e["cat"] == *tool)
            .unwrap_or_else(|| panic!("{name} ({tool}) in {trace}"));
        assert!(e["args"]["peak_rss_mib"].as_u64().unwrap() > 1, "{e}");
        assert!(
            e["args"]["reserved_from"]
                .as_str()
                .is_some_and(|r| r.contains("estimate") || r.contains("earlier build")),
            "{e}"
        );
    }
    assert!(
        !events.iter().any(|e| e["name"]
            .as_str()
            .is_some_and(|n| n.contains("CompilerABI"))),
        "{trace}"
    );
    let heaviest = &insight["summary"]["heaviest"];
    assert!(heaviest[1].as_u64().unwrap() > 1 << 20, "{heaviest}");
}

/// `--set USE_CUDA=0`: no arch list, toolkit or cuDNN in preflight or the plan, a `+cpu` wheel,
/// and a verify step that holds it to carrying no device code and computing on the CPU with the
/// library the build compiled. GPU options are refused rather than ignored.
#[test]
fn a_cpu_only_build_plans_no_cuda_and_verifies_a_wheel_without_device_code() {
    let (_src_scratch, src) = copy_fixture("torch-tree-setup-py", "bt-cpu");
    let scratch = src.parent().unwrap().to_path_buf();
    fake_submodules(&src);
    let s = src.to_str().unwrap();
    for (extra, says) in [
        (
            &["--set", "USE_CUDA=0", "--arch", "8.0"][..],
            "a CPU-only build compiles no GPU code",
        ),
        (
            &["--set", "USE_CUDA=OFF", "--cuda", CUDA][..],
            "uses no CUDA",
        ),
        (&["--set", "USE_CUDA="][..], "--arch SPEC is required"),
    ] {
        let mut args = vec!["build-torch", "--src", s, "--dry-run"];
        args.extend_from_slice(extra);
        let r = xtask(&args);
        assert_eq!(r.code, 2, "{extra:?}: {}", r.stderr);
        assert!(r.stderr.contains(says), "{extra:?}: {}", r.stderr);
    }
    // The install RPATH emptied, as Debian's tree has it: preflight fails before anything builds
    // (its whole build ended in a wheel that does not import); upstream's line back, it passes.
    let deps = src.join("cmake/Dependencies.cmake");
    let upstream = std::fs::read_to_string(&deps).unwrap();
    let line = r#"set(CMAKE_INSTALL_RPATH "${_rpath_portable_origin}")"#;
    std::fs::write(
        &deps,
        upstream.replace(line, r#"set(CMAKE_INSTALL_RPATH "")"#),
    )
    .unwrap();
    let dry = || {
        xtask(&[
            "build-torch",
            "--src",
            s,
            "--dry-run",
            "--set",
            "USE_CUDA=0",
            "--json",
        ])
    };
    let r = dry();
    assert_eq!(r.code, 2, "{}", r.stderr);
    let rpath = check(&json(&r), "install rpath").clone();
    assert_eq!(rpath["status"], "fail", "{rpath}");
    assert!(rpath["fix"].as_str().unwrap().contains(line), "{rpath}");
    std::fs::write(&deps, &upstream).unwrap();
    assert_eq!(check(&json(&dry()), "install rpath")["status"], "ok");

    let py = build_python(&scratch);
    let out = scratch.join("out");
    let (p, o) = (py.to_str().unwrap(), out.to_str().unwrap());
    let build = || {
        xtask(&[
            "build-torch",
            "--src",
            s,
            "--python",
            p,
            "--set",
            "USE_CUDA=0",
            "--set",
            "USE_NUMPY=0",
            "--out",
            o,
            "--json",
        ])
    };
    let r = build();
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let v = json(&r);
    assert!(v["prepared"]["cuda"].is_null());
    let checks: Vec<&str> = v["prepared"]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    for gpu_only in ["arch list", "torch vs CUDA", "CUDA toolkit", "cuDNN"] {
        assert!(!checks.contains(&gpu_only), "{gpu_only} in {checks:?}");
    }
    assert!(check(&v, "host compiler")["detail"]
        .as_str()
        .unwrap()
        .contains("CPU-only: no nvcc"));
    for cuda_var in [
        "TORCH_CUDA_ARCH_LIST",
        "CUDA_HOME",
        "CUDAHOSTCXX",
        "TORCH_NVCC_FLAGS",
        "USE_CUDNN",
        "USE_NCCL",
    ] {
        assert!(var(&v, cuda_var).is_none(), "the plan sets {cuda_var}");
    }
    assert_all_read(&v);
    assert_eq!(value(&v, "USE_CUDA"), "0");
    assert!(value(&v, "PYTORCH_BUILD_VERSION").ends_with("+cpu"));
    let wheel = PathBuf::from(v["wheel"].as_str().unwrap());
    let name = wheel.file_name().unwrap().to_str().unwrap();
    assert!(name.starts_with("torch-2.12.0a0+cpu-"), "{name}");
    let items = v["verify"]["items"].as_array().unwrap();
    let item = |n: &str| {
        items
            .iter()
            .find(|i| i["name"] == n)
            .unwrap_or_else(|| panic!("{n}: {}", v["verify"]))
    };
    assert_eq!(v["verify"]["ok"], true, "{}", v["verify"]);
    assert!(item("device code")["detail"]
        .as_str()
        .unwrap()
        .starts_with("none in 2 libraries"));
    // libtorch_cpu.so needs libc10.so beside it, through the install RPATH.
    assert_eq!(
        item("library paths")["detail"],
        "every need of its own libraries (1) is reached through $ORIGIN"
    );
    assert_eq!(item("torch.version.cuda")["status"], "ok");
    assert_eq!(item("arch flags")["status"], "ok");
    // The matmul ran through the built libtorch_cpu.so and matched plain Python's sums.
    assert_eq!(item("cpu smoke")["status"], "ok", "{}", v["verify"]);
    assert_compiles_were_metered(&v, &[("c10.cpp", "c++"), ("cpu_kernel.cpp", "c++")]);

    // The same wheel verified on its own: as CPU-only it passes; held to an arch list it fails
    // for carrying no device code.
    let verify = |extra: &[&str]| {
        let mut args = vec![
            "build-torch",
            "--verify-wheel",
            wheel.to_str().unwrap(),
            "--json",
        ];
        args.extend_from_slice(extra);
        xtask(&args)
    };
    let r = verify(&["--set", "USE_CUDA=0"]);
    assert_eq!(r.code, 0, "{}", r.stdout);
    let r = verify(&["--arch", "8.0"]);
    assert_eq!(r.code, 1, "{}", r.stdout);
    assert!(
        r.stdout
            .contains("no library in the wheel carries device code"),
        "{}",
        r.stdout
    );

    // Unchanged: the stamp returns it, though the build rewrote torch/lib, torch/version.py and
    // torchgen/packaged in the tree.
    assert!(src.join("build/install_manifest.txt").is_file());
    assert!(src.join("torch/lib/libc10.so").is_file());
    let v = json(&build());
    assert_eq!(v["reused"], true);
    assert_eq!(v["wheel"].as_str().unwrap(), wheel.to_str().unwrap());
    // A source edited: built again.
    let kernel = src.join("aten/c10.cpp");
    let text = std::fs::read_to_string(&kernel).unwrap();
    std::fs::write(&kernel, format!("{text}// edited\n")).unwrap();
    let v = json(&build());
    assert_eq!(v["reused"], false);
    let _ = std::fs::remove_dir_all(&scratch);
}

#[test]
fn stop_after_configure_leaves_a_configured_build_directory() {
    let (_src_scratch, src) = copy_fixture("torch-tree-setup-py", "bt-configure");
    let scratch = src.parent().unwrap().to_path_buf();
    fake_submodules(&src);
    let py = build_python(&scratch);
    let out = scratch.join("out");
    let mut args = fixture_build_args("7.5,8.9,9.0", &src, &py, &out);
    args.extend(["--stop-after".to_string(), "configure".to_string()]);
    let r = xtask(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let v = json(&r);
    assert!(v["wheel"].is_null());
    let cache = std::fs::read_to_string(src.join("build/CMakeCache.txt")).unwrap();
    assert!(
        cache.contains("TORCH_CUDA_ARCH_LIST:UNINITIALIZED=7.5;8.9;9.0")
            || cache.contains("TORCH_CUDA_ARCH_LIST:STRING=7.5;8.9;9.0"),
        "{cache}"
    );
    assert!(src.join("build/build.ninja").is_file());
    let _ = std::fs::remove_dir_all(&scratch);
}

#[test]
fn version_clones_a_release_with_its_submodules() {
    let scratch = support::scratch("bt-clone");
    // A "pytorch" repository with a submodule, both local.
    let sub = scratch.join("pybind11");
    std::fs::create_dir_all(&sub).unwrap();
    std::fs::write(sub.join("LICENSE"), "fixture\n").unwrap();
    git(&sub, &["init", "-q"]);
    git(&sub, &["add", "."]);
    git(&sub, &["commit", "-qm", "sub"]);
    let repo = scratch.join("pytorch");
    copy_dir(&fixture("torch-tree-scikit-build"), &repo);
    // A real release (versions are checked against the knowledge base); the clone of this
    // test's own mirror goes to a directory named for the mirror, so it touches no real clone.
    let version = "2.15.0".to_string();
    std::fs::write(repo.join("version.txt"), format!("{version}\n")).unwrap();
    git(&repo, &["init", "-q"]);
    git(
        &repo,
        &[
            "-c",
            "protocol.file.allow=always",
            "submodule",
            "add",
            "-q",
            sub.to_str().unwrap(),
            "third_party/pybind11",
        ],
    );
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-qm", "release"]);
    git(&repo, &["tag", &format!("v{version}")]);
    let url = format!("file://{}", repo.display());
    let env = [
        ("ARCHSMITH_PYTORCH_GIT", url.as_str()),
        ("GIT_CONFIG_COUNT", "1"),
        ("GIT_CONFIG_KEY_0", "protocol.file.allow"),
        ("GIT_CONFIG_VALUE_0", "always"),
    ];
    let dry_run = [
        "build-torch",
        "--arch",
        "9.0",
        "--version",
        &version,
        "--cuda",
        CUDA,
        "--dry-run",
        "--json",
    ];
    // Before the clone, a dry run fetches nothing: it says what the clone would fetch.
    let r = xtask_env(&dry_run, &env, None);
    let v = json(&r);
    assert_eq!(v["document"], "build-torch-before-clone", "{v}");
    let into = PathBuf::from(v["into"].as_str().unwrap());
    assert!(!into.exists(), "the dry run cloned into {}", into.display());
    assert!(
        v["clone"]
            .as_str()
            .unwrap()
            .ends_with(&format!("--branch v{version} {url}")),
        "{v}"
    );
    // A run that builds clones first (here preflight then refuses the arch: nothing is built).
    let r = xtask_env(
        &[
            "build-torch",
            "--arch",
            "3.5",
            "--torch",
            &version,
            "--cuda",
            CUDA,
        ],
        &env,
        None,
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(into.join("version.txt").is_file(), "{}", r.stderr);
    // Now cloned, the dry run reads the tree.
    let r = xtask_env(&dry_run, &env, None);
    let v = json(&r);
    let root = PathBuf::from(v["prepared"]["tree"]["root"].as_str().unwrap());
    assert_eq!(root, into);
    let dir_name = root.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        root.parent().unwrap().ends_with("sources")
            && dir_name.starts_with(&format!("pytorch-v{version}-"))
            && dir_name.len() == format!("pytorch-v{version}-").len() + 12,
        "{}",
        root.display()
    );
    assert!(
        root.join("third_party/pybind11/LICENSE").is_file(),
        "the submodule came with the clone"
    );
    assert_eq!(v["prepared"]["tree"]["git"]["tag"], format!("v{version}"));
    // A release tag gives the release version, whatever version.txt's suffix.
    assert_eq!(
        value(&v, "PYTORCH_BUILD_VERSION"),
        format!("{version}+cu132")
    );
    // --src and --version together: refused.
    let r = xtask(&[
        "build-torch",
        "--arch",
        "9.0",
        "--version",
        &version,
        "--src",
        ".",
    ]);
    assert_eq!(r.code, 2);
    let _ = std::fs::remove_dir_all(&root);
    let _ = std::fs::remove_dir_all(&scratch);
}

/// The verify step on the real torch 2.15.0 wheel, a stand-in for a finished build: its own list
/// (`7.5;8.0;8.6;9.0;10.0;12.0`) passes; a wrong one fails naming what differs.
#[test]
fn verify_step_on_the_real_torch_wheel() {
    let wheel = support::torch_wheel();
    let env = archsmith::python::ensure_torch_env(&support::TORCH.parse().unwrap()).unwrap();
    let (w, p) = (wheel.to_str().unwrap(), env.python.to_str().unwrap());
    let r = xtask(&[
        "build-torch",
        "--verify-wheel",
        w,
        "--arch",
        "7.5;8.0;8.6;9.0;10.0;12.0",
        "--cuda",
        "13.2",
        "--python",
        p,
        "--json",
    ]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let v = json_plain(&r);
    assert_eq!(v["ok"], true);
    let item = |v: &Value, n: &str| {
        v["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["name"] == n)
            .unwrap()
            .clone()
    };
    assert_eq!(
        item(&v, "arch flags")["detail"],
        "_cuda_getArchFlags() = sm_75 sm_80 sm_86 sm_90 sm_100 sm_120"
    );
    assert_eq!(item(&v, "torch.version.cuda")["status"], "ok");
    assert!(item(&v, "libtorch_cuda.so")["detail"]
        .as_str()
        .unwrap()
        .contains("per-kernel extras sm_89×1 sm_90a×4"));

    // 8.9 added: libtorch_cuda.so has sm_89 in 1 of 476 containers; the module's flags lack it.
    let r = xtask(&[
        "build-torch",
        "--verify-wheel",
        w,
        "--arch",
        "7.5,8.0,8.6,8.9,9.0,10.0,12.0",
        "--cuda",
        "13.2",
        "--python",
        p,
        "--json",
    ]);
    assert_eq!(r.code, 1);
    let v = json_plain(&r);
    assert!(
        item(&v, "libtorch_cuda.so")["detail"]
            .as_str()
            .unwrap()
            .starts_with("missing sm_89 (1 of 476 containers)"),
        "{v}"
    );
    assert_eq!(item(&v, "arch flags")["status"], "fail");
    // 8.0, 10.0 and 12.0 left out: present in every container, so another list was used.
    let r = xtask(&[
        "build-torch",
        "--verify-wheel",
        w,
        "--arch",
        "7.5,8.6,9.0",
        "--json",
    ]);
    assert_eq!(r.code, 1);
    let d = item(&json_plain(&r), "libtorch_cuda.so")["detail"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(d.starts_with("not planned sm_80 (in every container), sm_100 (in every container), sm_120 (in every container)"), "{d}");
    // The wrong CUDA.
    let r = xtask(&[
        "build-torch",
        "--verify-wheel",
        w,
        "--arch",
        "7.5;8.0;8.6;9.0;10.0;12.0",
        "--cuda",
        "12.8",
        "--python",
        p,
        "--json",
    ]);
    assert_eq!(r.code, 1);
    assert_eq!(
        item(&json_plain(&r), "torch.version.cuda")["detail"],
        "13.2 but the build used CUDA 12.8"
    );
}

fn json_plain(r: &Run) -> Value {
    serde_json::from_str(&r.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}):\n{}\n{}", r.stdout, r.stderr))
}

/// The real PyTorch 2.6.0 tree (Debian trixie's source package `pytorch`, unpacked with
/// `dpkg-source --skip-patches -x`: upstream's files without third_party/): detection, the plan's
/// cross-check, the missing submodules, the advice. Runs where `ARCHSMITH_TORCH_SRC` names it.
#[test]
#[ignore = "real-tree tier: set ARCHSMITH_TORCH_SRC to an unpacked PyTorch 2.6.0 source tree (docs/build-torch.md); cargo test -- --ignored"]
fn real_torch_tree_2_6_0() {
    let src = std::env::var_os("ARCHSMITH_TORCH_SRC").expect(
        "set ARCHSMITH_TORCH_SRC to an unpacked PyTorch 2.6.0 source tree (docs/build-torch.md)",
    );
    let s = src.to_str().unwrap();
    let r = xtask(&[
        "build-torch",
        "--arch",
        "7.5,8.9,9.0",
        "--src",
        s,
        "--cuda",
        CUDA,
        "--dry-run",
        "--json",
        "--gpu",
        "T4",
        "--gpu",
        "L4",
        "--gpu",
        "A100",
        "--gpu",
        "H100",
        "--gpu",
        "RTX 5090",
    ]);
    let v = json(&r);
    assert_eq!(v["prepared"]["tree"]["front_end"], "setup-py");
    assert!(v["prepared"]["tree"]["version_text"]
        .as_str()
        .unwrap()
        .starts_with("2.6.0"));
    // The disk model's calibration is this tree's own count.
    assert_eq!(v["prepared"]["tree"]["sources"]["cxx"], 2215);
    assert_eq!(v["prepared"]["tree"]["sources"]["cuda"], 371);
    assert_eq!(check(&v, "torch vs CUDA")["status"], "fail");
    assert_eq!(check(&v, "submodules")["status"], "fail");
    let adds: Vec<String> = v["prepared"]["advice"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            format!(
                "{}: {} via {}",
                a["target"], a["source_build_adds"], a["via"]
            )
        })
        .collect();
    assert!(
        adds[0].contains("nothing for this GPU") && adds[0].contains("sm_75"),
        "{adds:?}"
    );
    assert!(
        adds[1].contains("native sm_89 SASS") && adds[1].contains("sm_86"),
        "{adds:?}"
    );
    assert!(
        adds[4].contains("the only way to run torch 2.6.0 there"),
        "{adds:?}"
    );
    assert_all_read(&v);
}

/// The knowledge base's nvcc options (what TORCH_NVCC_FLAGS gets per CUDA) against the real
/// tools' `--help`: present from their first CUDA on, absent before. CUDA 13.2 from PyPI always;
/// Debian's CUDA 11.8 where it is installed.
#[test]
fn nvcc_options_in_the_knowledge_base_match_the_real_tools() {
    let kb = archsmith::kb::kb();
    let mut toolchains = vec![archsmith::toolchain::ensure(&CUDA.parse().unwrap()).unwrap()];
    match archsmith::toolchain::ensure(&"11.8".parse().unwrap()) {
        Ok(tc) => toolchains.push(tc),
        Err(_) => eprintln!("CUDA 11.8 not installed: checked against 13.2 only"),
    }
    for tc in &toolchains {
        for row in &kb.nvcc_options {
            let tool = tc.bin_dir().join(&row.tool);
            let help = Cmd::new(&tool).arg("--help").output().unwrap();
            let text = format!("{}{}", help.stdout, help.stderr);
            let has = text.contains(&row.option);
            let should = row.first_cuda.major_minor() <= tc.cuda.major_minor();
            assert_eq!(
                has,
                should,
                "{} of CUDA {}: `{}` {} in --help, but the knowledge base says it arrived in {}",
                row.tool,
                tc.nvcc_version,
                row.option,
                if has { "is" } else { "is not" },
                row.first_cuda
            );
        }
        // And the plan passes exactly those rows' flags.
        let flags: Vec<String> = kb
            .nvcc_options(&tc.cuda)
            .iter()
            .flat_map(|r| r.flags.clone())
            .collect();
        assert!(!flags.is_empty());
    }
}

/// The scikit-build-core front end for real: scikit-build-core from PyPI builds the fixture with
/// `pip wheel --no-build-isolation -Cbuild-dir=build`, its metadata plugin reads
/// PYTORCH_BUILD_VERSION, and the verify step passes; `--stop-after configure` runs CMake alone.
#[test]
fn builds_the_scikit_build_fixture_through_its_front_end() {
    let (_src_scratch, src) = copy_fixture("torch-tree-scikit-build", "bt-skbuild");
    let scratch = src.parent().unwrap().to_path_buf();
    fake_submodules(&src);
    let py = build_python_with(
        &scratch,
        &[
            "pyyaml",
            "typing_extensions",
            "scikit-build-core>=1.0",
            "pip",
        ],
    );
    let out = scratch.join("out");
    let (s, p, o) = (
        src.to_str().unwrap(),
        py.to_str().unwrap(),
        out.to_str().unwrap(),
    );
    let common = [
        "--src",
        s,
        "--cuda",
        CUDA,
        "--python",
        p,
        "--set",
        "USE_CUDNN=0",
        "--set",
        "USE_NUMPY=0",
        "--out",
        o,
        "--json",
    ];
    let mut args = vec![
        "build-torch",
        "--arch",
        "7.5,8.9,9.0+PTX",
        "--stop-after",
        "configure",
    ];
    args.extend_from_slice(&common);
    let r = xtask(&args);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let cache = std::fs::read_to_string(src.join("build/CMakeCache.txt")).unwrap();
    assert!(
        cache.contains("TORCH_CUDA_ARCH_LIST:STRING=7.5;8.9;9.0+PTX"),
        "{cache}"
    );
    let mut args = vec!["build-torch", "--arch", "7.5,8.9,9.0+PTX"];
    args.extend_from_slice(&common);
    let r = xtask(&args);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let v = json(&r);
    let wheel = v["wheel"].as_str().unwrap();
    assert!(wheel.contains("torch-2.15.0+cu132-"), "{wheel}");
    assert_eq!(v["verify"]["ok"], true, "{}", v["verify"]);
    let audit = xtask(&[
        "verify",
        "binary",
        wheel,
        "--expect-arch",
        "7.5,8.9,9.0+PTX",
        "--strict",
    ]);
    assert_eq!(audit.code, 0, "{}", audit.stdout);
    // A front-end failure before CMake: its ERROR line is the first error.
    std::fs::write(
        src.join("pyproject.toml"),
        std::fs::read_to_string(src.join("pyproject.toml"))
            .unwrap()
            .replace("experimental = true", ""),
    )
    .unwrap();
    let mut args = vec!["build-torch", "--arch", "7.5"];
    args.extend_from_slice(&common);
    let r = xtask(&args);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("first error: experimental must be enabled"),
        "{}",
        r.stderr
    );
    let _ = std::fs::remove_dir_all(&scratch);
}

/// The late failure of the whole real build (step 797 of 2005: `mobile_bytecode_generated.h:12:
/// static assertion failed: Non-compatible flatbuffers version included`), caught by preflight:
/// the flatc-generated header against the flatbuffers the build compiles it with — the vendored
/// copy when the tree has one, else the system's (here a prefix on CMAKE_PREFIX_PATH, as a
/// Debian-stripped tree takes it from /usr/include).
#[test]
fn preflight_compares_a_generated_flatbuffers_header_with_the_library_used() {
    let (_src_scratch, src) = copy_fixture("torch-tree-setup-py", "bt-flatbuffers");
    let s = src.to_str().unwrap();
    let base_h = |v: (u32, u32, u32)| {
        format!(
            "#define FLATBUFFERS_VERSION_MAJOR {}\n#define FLATBUFFERS_VERSION_MINOR {}\n#define FLATBUFFERS_VERSION_REVISION {}\n",
            v.0, v.1, v.2
        )
    };
    let gen = src.join("torch/csrc/jit/serialization");
    std::fs::create_dir_all(&gen).unwrap();
    std::fs::write(
        gen.join("mobile_bytecode_generated.h"),
        "#include \"flatbuffers/flatbuffers.h\"\n\
         static_assert(FLATBUFFERS_VERSION_MAJOR == 23 &&\n\
         FLATBUFFERS_VERSION_MINOR == 3 &&\n\
         FLATBUFFERS_VERSION_REVISION == 3,\n\
         \"Non-compatible flatbuffers version included\");\n",
    )
    .unwrap();
    // A system flatbuffers of another release, and no vendored copy: fails, with the fix.
    let prefix = src.parent().unwrap().join("prefix");
    std::fs::create_dir_all(prefix.join("include/flatbuffers")).unwrap();
    std::fs::write(
        prefix.join("include/flatbuffers/base.h"),
        base_h((24, 3, 25)),
    )
    .unwrap();
    let set = format!("CMAKE_PREFIX_PATH={}", prefix.display());
    let v = dry_run(s, "9.0", &["--set", &set]);
    let c = check(&v, "generated sources");
    assert_eq!(c["status"], "fail", "{c}");
    let detail = c["detail"].as_str().unwrap();
    assert!(
        detail.contains("torch/csrc/jit/serialization/mobile_bytecode_generated.h was generated for flatbuffers 23.3.3, but the build compiles it against flatbuffers 24.3.25"),
        "{detail}"
    );
    let fix = c["fix"].as_str().unwrap();
    assert!(
        fix.contains("`cd torch/csrc/jit/serialization && flatc --cpp --gen-mutable --scoped-enums mobile_bytecode.fbs`"),
        "{fix}"
    );
    assert!(v["wheel"].is_null());
    // The vendored copy at the header's release comes first: passes.
    let vendored = src.join("third_party/flatbuffers/include/flatbuffers");
    std::fs::create_dir_all(&vendored).unwrap();
    std::fs::write(vendored.join("base.h"), base_h((23, 3, 3))).unwrap();
    let v = dry_run(s, "9.0", &["--set", &set]);
    let c = check(&v, "generated sources");
    assert_eq!(c["status"], "ok", "{c}");
    let _ = std::fs::remove_dir_all(src.parent().unwrap());
}

/// The fixture tree with four CUDA translation units (five ninja steps with the link).
fn four_unit_tree(test: &str) -> (support::Scratch, PathBuf) {
    let (scratch, src) = copy_fixture("torch-tree-setup-py", test);
    fake_submodules(&src);
    let kernel = std::fs::read_to_string(src.join("aten/kernel.cu")).unwrap();
    let mut units = vec!["aten/kernel.cu".to_string()];
    for k in 2..=4 {
        let name = format!("aten/kernel{k}.cu");
        let text = kernel
            .replace("fixture_axpy", &format!("fixture_axpy{k}"))
            .replace("fixture_launch", &format!("fixture_launch{k}"));
        std::fs::write(src.join(&name), text).unwrap();
        units.push(name);
    }
    let cmake = src.join("CMakeLists.txt");
    let text = std::fs::read_to_string(&cmake).unwrap().replace(
        "add_library(torch_cuda SHARED aten/kernel.cu)",
        &format!("add_library(torch_cuda SHARED {})", units.join(" ")),
    );
    std::fs::write(&cmake, text).unwrap();
    (scratch, src)
}

/// What a wheel holds, to compare two builds: its members, and the SASS each binary carries.
fn wheel_contents(wheel: &Path) -> (Vec<String>, Value) {
    let f = std::fs::File::open(wheel).unwrap();
    let mut names: Vec<String> = zip::ZipArchive::new(f)
        .unwrap()
        .file_names()
        .filter(|n| !n.contains(".dist-info/RECORD"))
        .map(str::to_string)
        .collect();
    names.sort();
    let audit = xtask(&["verify", "binary", wheel.to_str().unwrap(), "--json"]);
    let v: Value = serde_json::from_str(&audit.stdout).unwrap();
    let sass: Vec<Value> = v["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let member = f["path"].as_str().unwrap().rsplit('!').next().unwrap();
            serde_json::json!([member, f["sass"]])
        })
        .collect();
    (names, Value::Array(sass))
}

/// An interrupted build continues where ninja stopped: Ctrl-C after two of five steps, the same
/// command again builds only the rest (build-torch says it resumes), and the wheel holds what an
/// uninterrupted build's holds.
#[test]
fn an_interrupted_build_resumes_where_ninja_stopped() {
    use std::io::BufRead;
    use std::os::unix::process::CommandExt;
    let (_scratch, src) = four_unit_tree("bt-resume");
    let scratch = src.parent().unwrap().to_path_buf();
    let py = build_python(&scratch);
    let args = |src: &Path, out: &Path| fixture_build_args("9.0", src, &py, out);
    let out = scratch.join("out");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_xtask"));
    cmd.args(args(&src, &out))
        .env_remove("CUDAHOSTCXX")
        .env_remove("CXX")
        // Inherited by every process of the build, to find any left running.
        .env("ARCHSMITH_TEST_BUILD_MARK", &scratch)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .process_group(0);
    support::sigint_in_child(&mut cmd, libc::SIG_DFL);
    let mut child = cmd.spawn().unwrap();
    // Ctrl-C to the whole group, as a terminal sends it, once two steps are done; the rest of
    // the output read to its end.
    let mut seen = Vec::new();
    let mut sent = false;
    for line in std::io::BufReader::new(child.stderr.take().unwrap()).lines() {
        let line = line.unwrap();
        seen.push(line.clone());
        if !sent && line.contains("torch [2/5]") {
            let pgid = child.id();
            assert!(Command::new("kill")
                .args(["-s", "INT", "--", &format!("-{pgid}")])
                .status()
                .unwrap()
                .success());
            sent = true;
        }
    }
    assert!(!child.wait().unwrap().success(), "{seen:#?}");
    // Nothing of the build outlives archsmith: a compiler still dying (nvcc deletes its output
    // as it goes) would race with the resumed build below.
    let mark = format!("ARCHSMITH_TEST_BUILD_MARK={}", scratch.display());
    let left: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            std::fs::read(e.path().join("environ"))
                .is_ok_and(|env| env.split(|&b| b == 0).any(|v| v == mark.as_bytes()))
                && std::fs::read_to_string(e.path().join("stat"))
                    .is_ok_and(|s| !s.rsplit_once(") ").is_some_and(|(_, r)| r.starts_with('Z')))
        })
        .map(|e| std::fs::read_to_string(e.path().join("cmdline")).unwrap_or_default())
        .collect();
    assert!(
        left.is_empty(),
        "the build's processes outlived archsmith: {left:?}"
    );
    assert!(
        seen.iter().any(|l| l.contains("torch [2/5]")),
        "no step counted: {seen:#?}"
    );
    let wheels = |d: &Path| -> Vec<PathBuf> {
        std::fs::read_dir(d)
            .map(|r| {
                r.flatten()
                    .map(|e| e.path())
                    .filter(|p| p.extension().is_some_and(|x| x == "whl"))
                    .collect()
            })
            .unwrap_or_default()
    };
    assert!(wheels(&out).is_empty());
    // The same command again: resumes, and ninja has only the rest to do.
    let a: Vec<String> = args(&src, &out);
    let r = xtask(&a.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("archsmith: resuming in "), "{}", r.stderr);
    let totals: Vec<u32> = r
        .stderr
        .lines()
        .filter_map(|l| l.split("torch [").nth(1))
        .filter_map(|l| l.split(']').next()?.split('/').nth(1)?.parse().ok())
        .collect();
    assert!(
        !totals.is_empty() && totals.iter().all(|&m| m <= 3),
        "the resumed build ran more than the rest: {totals:?}\n{}",
        r.stderr
    );
    eprintln!("resumed: ninja's totals {totals:?} of 5 steps");
    for l in r.stderr.lines().filter(|l| l.contains("torch [")) {
        eprintln!("{l}");
    }
    let resumed = PathBuf::from(json(&r)["wheel"].as_str().unwrap());
    // An uninterrupted build of the same tree, elsewhere: the same wheel contents.
    let (_fresh_scratch, fresh) = four_unit_tree("bt-resume-fresh");
    let fresh_out = fresh.parent().unwrap().join("out");
    let a: Vec<String> = args(&fresh, &fresh_out);
    let r = xtask(&a.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!r.stderr.contains("resuming"), "{}", r.stderr);
    let whole = PathBuf::from(json(&r)["wheel"].as_str().unwrap());
    assert_eq!(
        resumed.file_name(),
        whole.file_name(),
        "the same wheel name"
    );
    assert_eq!(wheel_contents(&resumed), wheel_contents(&whole));
    let _ = std::fs::remove_dir_all(&scratch);
    let _ = std::fs::remove_dir_all(fresh.parent().unwrap());
}

/// `--only`: configure, then only the steps those targets need (a source file names the step
/// that compiles it); each step's output read by the binary reader against the plan (the CUDA
/// object carries exactly sm_75 and sm_89, the C++ object none), no wheel, and the whole build
/// estimated from the measured steps: the four CUDA units at the one measured unit's time. A
/// target the build does not have is refused (exit 2) naming it.
#[test]
fn a_target_slice_builds_only_those_steps_audits_each_and_estimates_the_whole() {
    let (_scratch, src) = four_unit_tree("bt-slice");
    // A C++ unit in the CUDA library too, as torch_cuda has.
    std::fs::write(
        src.join("aten/host.cpp"),
        "int fixture_host(int x) { return 2 * x; }\n",
    )
    .unwrap();
    let cmake = src.join("CMakeLists.txt");
    let text = std::fs::read_to_string(&cmake)
        .unwrap()
        .replace("aten/kernel4.cu)", "aten/kernel4.cu aten/host.cpp)");
    std::fs::write(&cmake, text).unwrap();
    let scratch = src.parent().unwrap().to_path_buf();
    let py = build_python(&scratch);
    let out = scratch.join("out");
    let mut args = fixture_build_args("7.5,8.9", &src, &py, &out);
    args.extend(["--only", "aten/kernel2.cu", "--only", "aten/host.cpp"].map(String::from));
    let r = xtask(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let v = json(&r);
    assert!(v["wheel"].is_null(), "a slice makes no wheel");
    let slice = &v["slice"];
    let steps = slice["steps"].as_array().unwrap();
    let outputs: Vec<&str> = steps
        .iter()
        .map(|s| s["output"].as_str().unwrap())
        .collect();
    let step = |suffix: &str| {
        steps
            .iter()
            .find(|s| s["output"].as_str().unwrap().ends_with(suffix))
            .unwrap_or_else(|| panic!("no step {suffix} in {outputs:?}"))
    };
    let cu = step("kernel2.cu.o");
    assert_eq!(cu["kind"], "CUDA");
    assert_eq!(cu["images"], serde_json::json!(["sm_75", "sm_89"]));
    assert_eq!(cu["verdict"], "exactly the plan");
    assert!(cu["seconds"].as_f64().unwrap() > 0.0);
    let cxx = step("host.cpp.o");
    assert_eq!(cxx["kind"], "C++");
    assert_eq!(cxx["verdict"], "no device code");
    for other in [
        "kernel.cu.o",
        "kernel3.cu.o",
        "kernel4.cu.o",
        "libtorch_cuda.so",
    ] {
        assert!(
            !outputs.iter().any(|o| o.ends_with(&format!("/{other}"))),
            "{other} was not asked for: {outputs:?}"
        );
    }
    assert_eq!(slice["ok"], true);
    // The slice's own trace: its two compiles, measured by the compile meter, and nothing else
    // (the configure's probes are not compiles).
    let trace: Value = serde_json::from_slice(
        &std::fs::read(slice["insight"]["trace"].as_str().expect("a slice trace")).unwrap(),
    )
    .unwrap();
    let mut jobs: Vec<(String, bool)> = trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X" && e["tid"] != 0)
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_string(),
                e["args"]["peak_rss_mib"].is_u64(),
            )
        })
        .collect();
    jobs.sort();
    assert_eq!(
        jobs,
        [
            ("host.cpp".to_string(), true),
            ("kernel2.cu".to_string(), true)
        ],
        "{trace}"
    );
    // The whole build: four CUDA units, one measured; the other three at its time.
    let e = &slice["estimate"];
    assert_eq!(e["steps"][0], 4);
    assert_eq!(e["measured"][0], 1);
    assert_eq!(e["steps"][1], 1);
    let typical = e["typical"][0].as_f64().unwrap();
    let cuda_cpu = e["cpu_seconds"][0].as_f64().unwrap();
    assert!((cuda_cpu - 4.0 * typical).abs() < 1e-6, "{e}");
    assert_eq!(e["hours_at"][1][0], 16);

    let mut args = fixture_build_args("7.5,8.9", &src, &py, &out);
    args.extend(["--only", "aten/nosuch.cu"].map(String::from));
    let r = xtask(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(r.code, 2, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("--only aten/nosuch.cu"), "{}", r.stderr);
    let _ = std::fs::remove_dir_all(&scratch);
}
