//! Reading a running build's output, for every build archsmith drives (extensions, torch itself):
//! ninja's `[N/M]` steps as progress, and the first real error when it fails.

pub mod log;
pub mod progress;
pub mod step_weights;
