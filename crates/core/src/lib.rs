//! archsmith-core: the vocabulary every layer shares (CUDA archs, versions) and the
//! infrastructure below the knowledge base: processes, files, caches, output and what the driver
//! reports. The lowest crate of the workspace: it depends on no other archsmith crate.
//!
//! Its modules are grouped by layer, lowest first; a module imports from the layers above it in
//! this file, and from its own layer only along the edges its `// Same-layer uses:` line lists
//! (`xtask/tests/layers.rs`). Between crates the compiler keeps the order: a crate names only
//! the crates it depends on.

// Base: the vocabulary every layer shares.
pub mod cuda_arch;
pub mod version;

// Infrastructure: processes, files, caches, output and what the driver reports; no knowledge base.
pub mod build_insight;
pub mod build_output;
pub mod cache;
pub mod git_submodules;
pub mod host;
pub mod http;
pub mod input_file;
pub mod interrupts;
pub mod lint;
pub mod offline;
pub mod output;
pub mod paths;
pub mod process;
pub mod stamp;
pub mod wheel;
// Same-layer uses: build_insight → build_output, build_insight → cache, build_insight → host,
// build_insight → input_file, build_insight → output, build_insight → paths, build_insight → process, build_insight → stamp,
// build_output → process,
// git_submodules → process, host → process,
// lint → output, process → interrupts, process → offline.
