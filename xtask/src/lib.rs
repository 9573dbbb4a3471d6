//! archsmith: build, port and verify PyTorch and its C++/CUDA extensions for exactly the GPU
//! architectures a team needs.
//!
//! The library holds all logic; `src/main.rs` is a thin CLI over [`commands`]. Modules are grouped
//! by layer, lowest first; a module imports from the layers above it in this file, and from its
//! own layer only along the edges its `// Same-layer uses:` line lists. `tests/layers.rs` fails
//! the test suite on any other import, on a listed edge no code uses, and when
//! docs/architecture.md's layer table differs from this file.

// Base: the vocabulary every layer shares.
pub mod cuda_arch;
pub mod version;

// Infrastructure: processes, files, caches, output and what the driver reports; no knowledge base.
pub mod build_insight;
pub mod build_output;
pub mod cache;
pub mod data;
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
// data → cache, data → paths, data → stamp, git_submodules → process, host → process,
// lint → output, process → interrupts, process → offline.

// Model: the knowledge base and the arch model planned with it.
pub mod arch;
pub mod kb;
// Same-layer uses: arch → kb.

// Readers: pure parsers and rewriters over bytes and text.
pub mod binary;
pub mod codemod;

// Environments: Python envs with torch, the one probe that describes them, downloads from PyPI
// and files read on PyPI without downloading them, CUDA toolkits, compiler caches.
pub mod compiler_cache;
pub mod downloads;
pub mod pypi;
pub mod python;
pub mod toolchain;
// Same-layer uses: compiler_cache → downloads, compiler_cache → python, compiler_cache → toolchain,
// downloads → python,
// toolchain → downloads, toolchain → python.

// Workflows: what the commands do, callable from tests and from each other along the edges listed.
pub mod audit_upgrade;
pub mod bench;
pub mod build_ext;
pub mod build_torch;
pub mod doctor;
pub mod kb_check;
pub mod kernels;
pub mod port_corpus;
pub mod port_extension;
pub mod verify;
// Same-layer uses: audit_upgrade → verify, bench → build_ext, bench → port_extension, bench → verify, build_ext → verify,
// build_torch → verify, port_extension → build_ext, port_extension → verify.

// CLI: one thin module per subcommand.
pub mod commands;
