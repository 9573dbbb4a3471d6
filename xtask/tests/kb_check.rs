//! The knowledge base's nvcc facts against every real `nvidia-cuda-nvcc` 13.x wheel on PyPI: the
//! same check as `cargo xtask kb check`, run as a regular test.
//!
//! Measured on the 2-core dev machine: about 3 s with the wheels cached under archsmith's cache
//! (`ARCHSMITH_HOME`), about 17 s and 0.5 GB of downloads on a cold cache — cheap enough to run on
//! every `cargo test`, like the real-torch tests that also need PyPI.

use archsmith::commands::kb::{check_versions, list_pypi_versions, render, select_versions};
use archsmith::kb::kb;

#[test]
fn every_nvcc_13_wheel_on_pypi_agrees_with_the_knowledge_base() {
    let available =
        list_pypi_versions("nvidia-cuda-nvcc").expect("listing nvidia-cuda-nvcc releases on PyPI");
    let versions = select_versions(&available, &[]).expect("PyPI has nvcc 13.x releases");
    // 13.0.48 … 13.5.37 were on PyPI when this was written; fewer means the listing broke.
    assert!(
        versions.len() >= 12,
        "only {} nvcc 13.x releases listed: {versions:?}",
        versions.len()
    );
    let report = check_versions(kb(), &versions, false);
    assert_eq!(report.exit_code(), 0, "\n{}", render(&report));
    assert_eq!(report.checked.len(), versions.len());
}
