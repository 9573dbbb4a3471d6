//! Where a build's time and memory go. The compile wrapper every compile of a build passes
//! through (build-ext's arch guard; for CMake builds archsmith drives, the [`compile_meter`]
//! launcher) asks the [`memory_gate`] for room, measures the compile and appends a
//! [`compile_record`] (with nvcc's own phases per arch, [`nvcc_time`]); the build keeps the
//! measured peaks for the next one ([`peaks`]) and makes of the records a Chrome trace
//! ([`build_trace`]), an HTML timeline ([`timeline`]) and a summary with each arch's cost
//! ([`build_summary`]), each arch's cost kept for planning the
//! same source again ([`arch_cost_records`]).

pub mod arch_cost_records;
pub mod build_summary;
pub mod build_trace;
pub mod compile_meter;
pub mod compile_record;
pub mod memory_gate;
pub mod nvcc_time;
pub mod peaks;
pub mod timeline;
pub mod written;
