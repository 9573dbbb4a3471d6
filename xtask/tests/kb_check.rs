//! The knowledge base's nvcc facts against NVIDIA's real compiler wheels on PyPI: the same check
//! as `cargo xtask kb check`, run as regular tests.
//!
//! Measured on the 2-core dev machine with the wheels cached under archsmith's cache
//! (`ARCHSMITH_HOME`): about 2 s for the 12 nvcc 13.x releases and 4 s for the 24 CUDA 11/12
//! releases. A cold cache first downloads them: about 17 s / 0.5 GB and 33 s / 0.55 GB. Cheap
//! enough to run on every `cargo test`, like the real-torch tests that need PyPI too.

use archsmith::kb::kb;
use archsmith::kb_check::{check_versions, releases_to_check};
use archsmith::version::Version;

fn check_all(filters: &[&str], at_least: usize) {
    let filters: Vec<Version> = filters.iter().map(|f| f.parse().unwrap()).collect();
    let versions = releases_to_check(&filters).expect("listing the compiler wheels on PyPI");
    // Fewer releases than were on PyPI when this was written means the listing broke.
    assert!(
        versions.len() >= at_least,
        "only {} releases listed: {versions:?}",
        versions.len()
    );
    let report = check_versions(kb(), &versions, false);
    assert_eq!(report.exit_code(), 0, "\n{}", report.table());
    assert_eq!(report.checked.len(), versions.len());
}

/// nvcc itself (`--list-gpu-code`, `--help`) and `crt/host_config.h`, for 13.0.48 … 13.5.37.
#[test]
fn every_nvcc_13_wheel_on_pypi_agrees_with_the_knowledge_base() {
    check_all(&[], 12);
}

/// ptxas `--help` and `crt/host_config.h` from the nvcc-cu11/-cu12 wheels, 11.7.99 … 12.9.86.
#[test]
fn every_cuda_11_and_12_ptxas_wheel_on_pypi_agrees_with_the_knowledge_base() {
    check_all(&["11", "12"], 24);
}
