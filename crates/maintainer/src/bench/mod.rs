//! Benchmarks: archsmith against the tool a user would otherwise use, both sides in one run on the
//! same machine (`cargo xtask bench …`).
//!
//! * [`audit`]: `verify binary` on a whole wheel vs `unzip` + `cuobjdump --list-elf` per .so.
//! * [`codemod_scaling`]: how `codemod --check` grows with a generated file's size.
//! * [`jit_hook_startup`]: what the load() hook's `.pth` costs a Python start where it is inert.
//! * [`build_ext_vs_pip`]: `build-ext` vs plain `pip wheel --no-build-isolation`, clean and no-op.
//! * [`jit_prebuild_pool`]: a JIT tree's triggers prebuilt in one pool of job slots vs one at a
//!   time.
//! * [`memory_limit`]: `build-ext` vs plain `pip wheel` with `MAX_JOBS` = cores, each in a memory
//!   cgroup with the same limit: killed or finished, and each one's peak.
//! * [`load_check_vs_python`]: the load check's verdicts vs importing each module in a fresh
//!   interpreter: agreement and time.
//! * [`manylinux_vs_auditwheel`]: a wheel's platform tag vs `auditwheel show`.
//! * [`stable_port_matrix`]: one stable-ABI build vs the ordinary build of each torch it covers.

pub mod abi_checkers;
pub mod audit;
pub mod build_ext_vs_pip;
pub mod codemod_scaling;
pub mod jit_hook_startup;
pub mod jit_prebuild_pool;
pub mod load_check_vs_python;
pub mod manylinux_vs_auditwheel;
pub mod memory_limit;
pub mod stable_port_matrix;
pub mod torch_range_vs_imports;

/// The 1-minute load average: other work on the machine makes timings noisy.
pub fn load_1min() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|t| t.split_whitespace().next().and_then(|x| x.parse().ok()))
        .unwrap_or(f64::NAN)
}

/// CPU seconds (user + system) of this process and of every child it has waited for (their
/// waited-for descendants included): a build's work is the difference across it (archsmith's side
/// runs partly in this process: the audit, the unpacking).
pub fn cpu_s() -> f64 {
    let cpu = |children| crate::process::rusage(children).map_or(f64::NAN, |(s, _)| s);
    cpu(false) + cpu(true)
}

/// The fastest of some samples (the run least disturbed by other work).
pub fn min(v: &[f64]) -> f64 {
    v.iter().cloned().fold(f64::INFINITY, f64::min)
}

/// The slowest of some samples.
pub fn max(v: &[f64]) -> f64 {
    v.iter().cloned().fold(0.0, f64::max)
}
