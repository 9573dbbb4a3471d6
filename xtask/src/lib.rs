//! archsmith: build, port and verify PyTorch and its C++/CUDA extensions for exactly the GPU
//! architectures a team needs.
//!
//! The workspace's crates (`crates/*`) hold all logic, one crate a layer, lowest first: core,
//! model, binary and codemod (the readers), env, verify (the checks), workflows, and maintainer
//! (benchmarks and `kb check`, behind the `maintainer` feature that `cargo xtask` turns on). This
//! crate is the CLI on top: `src/main.rs` is a thin `main` over [`commands`], and the library
//! re-exports every crate below under its module names (`archsmith::build_ext`, …), so tests and
//! the fuzz targets reach the whole library through one name. docs/architecture.md draws the map;
//! `tests/layers.rs` checks what the compiler cannot: the layers inside a crate, same-layer edges,
//! function lengths, rendering in one place.

// The crates below, under their module names.
#[cfg(feature = "maintainer")]
pub use archsmith_maintainer::*;
#[cfg(not(feature = "maintainer"))]
pub use archsmith_workflows::*;

// CLI: one thin module per subcommand.
pub mod commands;
