//! `patches/legacy-demo/src` end to end through the engine: it ports with no review items, a
//! second run changes nothing, and against the real torch 2.15.0 headers the unported C++
//! translation units fail to compile on the legacy APIs (g++ -fsyntax-only, C++20). The ported
//! tree, CUDA files included, is compiled by `build-ext` in port_extension.rs's legacy-demo test.

use archsmith::codemod::{self, Mode};
use archsmith::paths::repo_root;
use archsmith::process::Cmd;
use archsmith::python::ensure_torch_env;
use archsmith::version::Version;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dst = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &dst);
        } else {
            std::fs::copy(e.path(), dst).unwrap();
        }
    }
}

fn port(dir: &Path) -> codemod::Report {
    let files = codemod::discover(&[dir.to_path_buf()]).unwrap();
    codemod::run(codemod::builtin(), &files, Mode::Apply).unwrap()
}

#[test]
fn legacy_demo_ports_cleanly_and_the_unported_tree_fails_on_its_legacy_apis() {
    let src = repo_root().join("patches/legacy-demo/src");
    let tmp = tempfile::tempdir().unwrap();
    let unported = tmp.path().join("unported");
    let ported = tmp.path().join("ported");
    copy_tree(&src, &unported);
    copy_tree(&src, &ported);

    let report = port(&ported);
    assert_eq!(
        report.review_items,
        0,
        "{:#?}",
        report
            .files
            .iter()
            .flat_map(|f| &f.review)
            .collect::<Vec<_>>()
    );
    // Ten C++/CUDA files and setup.py, and the package's __init__.py for the Python rows.
    assert_eq!(report.files_scanned, 11);
    assert_eq!(report.files_changed, 7);
    let want: BTreeMap<&str, usize> = [
        ("add-include", 3),
        ("at-check", 13),
        ("at-error", 2),
        ("data-ptr", 16),
        ("dispatch-type", 3),
        ("launch-stream", 2),
        ("setup-gpu-gate", 1),
        ("setup-std-cxx", 2),
        ("thc-atomics-header", 1),
        ("thc-ceil-div", 5),
        ("thc-cuda-check", 4),
        ("thc-cuda-free", 1),
        ("thc-cuda-malloc", 1),
        ("thc-device-utils-header", 2),
        ("thc-header", 2),
        ("thc-state-lazy-init", 1),
        ("type-is-cuda", 10),
    ]
    .into_iter()
    .collect();
    let got: BTreeMap<&str, usize> = report
        .rewrites
        .iter()
        .map(|(k, v)| (k.as_str(), *v))
        .collect();
    assert_eq!(got, want);
    // Idempotent: the ported tree is a fixed point.
    let again = port(&ported);
    assert_eq!(again.files_changed, 0);
    assert_eq!(again.total_rewrites(), 0);
    // Nothing legacy is left in code (comments may still mention it).
    let nms = std::fs::read_to_string(ported.join("legacy_demo/csrc/cuda/nms.cu")).unwrap();
    for gone in [
        "THCState *state",
        "THCudaMalloc(state, boxes_num",
        "<<<blocks, threads>>>",
        "THC/THC.h",
    ] {
        assert!(!nms.contains(gone), "{gone} left in nms.cu:\n{nms}");
    }
    assert!(nms.contains("// THCudaCheck(THCudaMalloc(state, (void**) &mask_dev,"));

    let env = ensure_torch_env(&"2.15.0".parse::<Version>().unwrap()).expect("torch 2.15.0 env");
    let incs = env
        .python_cmd()
        .args([
            "-c",
            "import sysconfig; from torch.utils.cpp_extension import include_paths; \
             print('\\n'.join(include_paths() + [sysconfig.get_paths()['include']]))",
        ])
        .read()
        .expect("torch include paths");
    let incs: Vec<PathBuf> = incs.lines().map(PathBuf::from).collect();

    let syntax_check = |root: &Path, tu: &str| {
        let csrc = root.join("legacy_demo/csrc");
        let mut cmd = Cmd::new("g++")
            .args(["-std=c++20", "-fsyntax-only", "-DTORCH_EXTENSION_NAME=_C"])
            .args(["-DTORCH_API_INCLUDE_EXTENSION_H"])
            .arg(format!("-I{}", csrc.display()));
        for i in &incs {
            cmd = cmd.arg(format!("-I{}", i.display()));
        }
        cmd.arg(csrc.join(tu)).output().unwrap()
    };
    // Two at a time: each parses all of torch/extension.h (~20-30 s). The ported translation
    // units compile for real in port_extension.rs's legacy-demo build (torch's own flags, all
    // three archs), so here only the unported ones are compiled: that they fail, and on what.
    let jobs: Vec<(&Path, &str)> = vec![
        (&unported, "cpu/nms_cpu.cpp"),
        (&unported, "cpu/ROIAlign_cpu.cpp"),
    ];
    let results: Vec<_> = jobs
        .chunks(2)
        .flat_map(|pair| {
            std::thread::scope(|s| {
                let hs: Vec<_> = pair
                    .iter()
                    .map(|&(root, tu)| s.spawn(move || (root, tu, syntax_check(root, tu))))
                    .collect();
                hs.into_iter()
                    .map(|h| h.join().unwrap())
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    for (root, tu, out) in &results {
        assert_eq!(*root, unported.as_path());
        assert!(!out.success(), "unported {tu} compiled against torch 2.15");
        assert!(
            out.stderr.contains("AT_CHECK"),
            "unported {tu} failed, but not on AT_CHECK:\n{}",
            out.stderr
        );
    }
    // The 2.6 break is also visible: dispatching on DeprecatedTypeProperties.
    let nms_unported = &results[0].2.stderr;
    assert!(
        nms_unported.contains("DeprecatedTypeProperties"),
        "{nms_unported}"
    );
}
