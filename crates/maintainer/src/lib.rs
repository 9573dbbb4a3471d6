//! archsmith-maintainer: the workflows only archsmith's maintainers run: benchmarks against the
//! tools a user would otherwise use, and the knowledge base checked against the real artifacts.
//! Users' builds (`cargo install`, the Python wheel) leave this crate out; `cargo xtask` turns it
//! on (the `maintainer` feature).

// The crates below, under their module names (see archsmith-model).
pub use archsmith_workflows::*;

// Maintainer: benchmarks and the knowledge base's check.
pub mod bench;
pub mod kb_check;
