//! Checks of what was built or installed, as reports with a verdict and an exit code.
//!
//! * [`binary`]: which SASS and PTX files and wheels really carry, against a spec and GPUs.

pub mod binary_check;
pub mod checks;
pub mod env;
pub mod pins;
pub mod torch_wheel;
