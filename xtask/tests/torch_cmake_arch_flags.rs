//! Side by side with torch's CMake arch parser: archsmith's emulation of CUDA_SELECT_NVCC_ARCH_FLAGS
//! must give the flags that the real `select_compute_arch.cmake` from the torch 2.15.0 wheel gives,
//! run by the real cmake from PyPI, or both reject. This is the parser torch's own build uses, and
//! where it differs from cpp_extension's (names without PTX, `f`, `X.Y(A.B)`) `archs` reports it.

use archsmith::arch::torch_flags::{cmake_flags, TorchFlagsError};
use archsmith::kb::kb;
use archsmith::paths::repo_root;
use archsmith::python::ensure_torch_env;
use std::process::Command;

const CORPUS: &[&str] = &[
    "7.5",
    "7.5;8.9;9.0",
    "7.5 8.9\t9.0",
    "8.0;8.6+PTX",
    "9.0a",
    "9.0a+PTX",
    "10.0f",
    "12.0f+PTX",
    "8.6(8.0)",
    "8.6(8.0)+PTX",
    "Hopper",
    "Hopper+PTX",
    "Ampere",
    "Ampere+PTX",
    "Blackwell",
    "Blackwell+PTX",
    "Blackwell+Tegra",
    "Ampere+Tegra+PTX",
    "Rubin+PTX",
    "Turing;Ada;9.0",
    "9.0;9.0",
    "9.0 9.0+PTX",
    "7.5;;8.0",
    "hopper",
    "7.5,8.9",
    "sm_80",
    "10.0x",
    "8.60",
];

#[test]
fn archsmith_reads_lists_like_torch_2_15_cmake() {
    let env = ensure_torch_env(&"2.15.0".parse().unwrap()).expect("provision the torch 2.15.0 env");
    let site = Command::new(&env.python)
        .args([
            "-c",
            "import torch, os; print(os.path.dirname(torch.__file__))",
        ])
        .output()
        .unwrap();
    let torch_dir = String::from_utf8(site.stdout).unwrap().trim().to_string();
    let module = format!("{torch_dir}/share/cmake/Caffe2/Modules_CUDA_fix/upstream/FindCUDA/select_compute_arch.cmake");
    let cmake = env.root.join("bin/cmake");
    let script = repo_root().join("verify/probes/torch_cmake_arch_flags.cmake");
    let torch = "2.15.0".parse().unwrap();
    let (mut agree_ok, mut agree_err) = (0, 0);
    for spec in CORPUS {
        let out = Command::new(&cmake)
            .arg(format!("-DTORCH_CMAKE_MODULE={module}"))
            .arg("-DCUDA_VERSION=13.2")
            .arg(format!("-DARCH_LIST={spec}"))
            .arg("-P")
            .arg(&script)
            .output()
            .expect("run cmake");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let ours = cmake_flags(kb(), &torch, spec);
        if out.status.success() {
            let flags_line = stdout
                .lines()
                .find_map(|l| l.strip_prefix("-- FLAGS="))
                .unwrap_or_default();
            // CMake keeps `-gencode` and its value as separate list items.
            let real: Vec<String> = flags_line
                .split('|')
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
                .chunks(2)
                .map(|c| c.join(" "))
                .collect();
            let ours = ours.unwrap_or_else(|e| {
                panic!("{spec:?}: cmake accepts it ({real:?}) but archsmith says {e}")
            });
            assert_eq!(ours.flags, real, "{spec:?}");
            let readable = stdout
                .lines()
                .find_map(|l| l.strip_prefix("-- READABLE="))
                .unwrap_or_default();
            assert_eq!(ours.readable.join(" "), readable, "{spec:?}");
            agree_ok += 1;
        } else {
            match ours {
                Err(TorchFlagsError::CmakeUnknown { element, .. }) => {
                    // CMake wraps long messages; compare with whitespace collapsed.
                    let flat = stderr.split_whitespace().collect::<Vec<_>>().join(" ");
                    let expected = format!("Found Unknown CUDA Architecture Name in CUDA_SELECT_NVCC_ARCH_FLAGS: {element} ");
                    assert!(flat.contains(&expected), "{spec:?}: {stderr}");
                }
                other => {
                    panic!("{spec:?}: cmake rejects it ({stderr}) but archsmith says {other:?}")
                }
            }
            agree_err += 1;
        }
    }
    assert!(
        agree_ok >= 15 && agree_err >= 4,
        "{agree_ok} accepted, {agree_err} rejected"
    );
}
