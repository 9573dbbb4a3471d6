//! Fuzzes the wheel reader: the zip directory, member data offsets, stored and deflated members
//! (the ELF-magic check before inflating, the declared-size limits, the CRC check) and the audit
//! of what comes out. Bytes are written to one `.whl` file per process and read back through
//! `audit_paths`, as `verify binary` does. Any panic, hang or unbounded allocation is a bug.
#![no_main]

use archsmith::binary::input::{audit_paths, Options};
use libfuzzer_sys::fuzz_target;
use std::path::PathBuf;
use std::sync::OnceLock;

fn wheel_path() -> &'static PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        std::env::temp_dir().join(format!("fuzz-{}-1.0-py3-none-any.whl", std::process::id()))
    })
}

fuzz_target!(|data: &[u8]| {
    let p = wheel_path();
    if std::fs::write(p, data).is_err() {
        return;
    }
    // Kernel names are read for a CC no container carries, so that path is fuzzed too.
    let opts = Options {
        extract: None,
        threads: 1,
        kernels_for: vec![archsmith::cuda_arch::Cc { major: 7, minor: 5 }],
        unpacked: Vec::new(),
    };
    std::hint::black_box(audit_paths(&[p.clone()], &opts));
});
