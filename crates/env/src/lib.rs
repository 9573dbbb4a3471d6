//! archsmith-env: the environments a build runs in. Python envs with torch and the one probe that
//! describes them, downloads from PyPI and Debian's archive, files read on PyPI without
//! downloading them, CUDA toolkits, compiler caches.

// The crates below, under their module names (see archsmith-model).
pub use archsmith_binary::*;

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
