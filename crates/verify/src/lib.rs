//! archsmith-verify: the checks. `verify env`, `verify pins` and `verify binary`, and the load
//! check that says on which torch releases a binary loads.

// The crates below, under their module names (see archsmith-model).
pub use archsmith_env::*;

// Checks: what CI jobs assert, with or without a GPU.
pub mod verify;
