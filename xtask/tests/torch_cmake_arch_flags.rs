//! Side by side with torch's CMake arch parser: archsmith's emulation of CUDA_SELECT_NVCC_ARCH_FLAGS
//! must give the flags that the real `select_compute_arch.cmake` gives, run by the real cmake from
//! PyPI, or both reject. This is the parser torch's own build uses, and where it differs from
//! cpp_extension's (names without PTX, `f`, `X.Y(A.B)`) `archs` reports it. One release is the
//! installed torch 2.15.0; the others' files are read from their wheels on PyPI by range (one per
//! knowledge-base row, each ~1.5 MB of reads, kept under the download cache).

use archsmith::arch::torch_flags::{cmake_flags, TorchFlagsError};
use archsmith::paths::repo_root;
use archsmith::pypi::Pypi;
use archsmith::python::ensure_torch_env;
use archsmith::version::Version;
use std::path::Path;
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
    let (ok, err) = agree_with_real_cmake(&cmake, Path::new(&module), &"2.15.0".parse().unwrap());
    assert!(ok >= 15 && err >= 4, "{ok} accepted, {err} rejected");
}

/// One release per CMake row of the knowledge base before 2.14 (whose parsers differ: one-digit
/// majors, no `a`, no `f`, fewer names), each run by the real cmake on the whole corpus.
#[test]
fn archsmith_reads_lists_like_each_older_torch_cmake() {
    let env = ensure_torch_env(&"2.15.0".parse().unwrap()).expect("provision the torch 2.15.0 env");
    let cmake = env.root.join("bin/cmake");
    let pypi = Pypi::recorded(archsmith::pypi::repository_recordings());
    let files = pypi.files("torch").expect("PyPI's file list for torch");
    let dir = tempfile::tempdir().unwrap();
    const MEMBER: &str =
        "torch/share/cmake/Caffe2/Modules_CUDA_fix/upstream/FindCUDA/select_compute_arch.cmake";
    let mut rejected_by_old = 0;
    for release in [
        "1.13.1", "2.0.1", "2.3.1", "2.5.1", "2.6.0", "2.8.0", "2.13.0",
    ] {
        let torch: Version = release.parse().unwrap();
        let wheel = files
            .iter()
            .find(|f| {
                f.wheel_version() == Some(release)
                    && f.filename.contains("-cp310-")
                    && f.filename.ends_with("x86_64.whl")
                    && f.filename.contains("linux")
            })
            .unwrap_or_else(|| panic!("no cp310 Linux wheel of torch {release} on PyPI"));
        let text = pypi
            .members(wheel, &[MEMBER])
            .unwrap()
            .remove(0)
            .expect(MEMBER);
        let module = dir
            .path()
            .join(format!("select_compute_arch-{release}.cmake"));
        std::fs::write(&module, text).unwrap();
        let (ok, err) = agree_with_real_cmake(&cmake, &module, &torch);
        assert!(ok >= 8, "torch {release}: {ok} accepted, {err} rejected");
        if cmake_flags(&torch, "9.0a").is_err() {
            rejected_by_old += 1;
        }
    }
    // The releases before `a` was accepted (2.4) do reject 9.0a: the tables are not all one table.
    assert!(rejected_by_old >= 3, "{rejected_by_old}");
}

/// Runs the corpus through `module` with the real cmake and through archsmith's table for `torch`;
/// panics where they disagree. Returns how many lists both accepted and both rejected.
fn agree_with_real_cmake(cmake: &Path, module: &Path, torch: &Version) -> (usize, usize) {
    let script = repo_root().join("verify/probes/torch_cmake_arch_flags.cmake");
    let module = module.display();
    let (mut agree_ok, mut agree_err) = (0, 0);
    for spec in CORPUS {
        let out = Command::new(cmake)
            .arg(format!("-DTORCH_CMAKE_MODULE={module}"))
            .arg("-DCUDA_VERSION=13.2")
            .arg(format!("-DARCH_LIST={spec}"))
            .arg("-P")
            .arg(&script)
            .output()
            .expect("run cmake");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let ours = cmake_flags(torch, spec);
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
                panic!("torch {torch} {spec:?}: cmake accepts it ({real:?}) but archsmith says {e}")
            });
            assert_eq!(ours.flags, real, "torch {torch} {spec:?}");
            let readable = stdout
                .lines()
                .find_map(|l| l.strip_prefix("-- READABLE="))
                .unwrap_or_default();
            assert_eq!(ours.readable.join(" "), readable, "torch {torch} {spec:?}");
            agree_ok += 1;
        } else {
            match ours {
                Err(TorchFlagsError::CmakeUnknown { element, .. }) => {
                    // CMake wraps long messages; compare with whitespace collapsed.
                    let flat = stderr.split_whitespace().collect::<Vec<_>>().join(" ");
                    // 2.x: "Found Unknown … FLAGS: X"; 1.13: "Unknown … Name X in …".
                    let expected = [
                        format!("Found Unknown CUDA Architecture Name in CUDA_SELECT_NVCC_ARCH_FLAGS: {element} "),
                        format!("Unknown CUDA Architecture Name {element} in CUDA_SELECT_NVCC_ARCH_FLAGS"),
                    ];
                    assert!(
                        expected.iter().any(|e| flat.contains(e)),
                        "torch {torch} {spec:?}: {stderr}"
                    );
                }
                other => {
                    panic!("torch {torch} {spec:?}: cmake rejects it ({stderr}) but archsmith says {other:?}")
                }
            }
            agree_err += 1;
        }
    }
    (agree_ok, agree_err)
}
