//! archsmith-model: the knowledge base (every fact that changes with NVIDIA and PyTorch releases,
//! each row with its source) and the arch model planned with it.

// The crates below, under their module names: `crate::version::Version` reads the same in every
// crate, and the compiler resolves only what this crate depends on.
pub use archsmith_core::*;

// Model: the knowledge base and the arch model planned with it.
pub mod arch;
pub mod kb;
// Same-layer uses: arch → kb.
