//! archsmith: build, port and verify PyTorch and its C++/CUDA extensions for exactly the GPU
//! architectures a team needs.
//!
//! The library holds all logic; `src/main.rs` is a thin CLI over [`commands`].

pub mod arch;
pub mod binary;
pub mod build_ext;
pub mod codemod;
pub mod commands;
pub mod kb;
pub mod kernels;
pub mod output;
pub mod paths;
pub mod port;
pub mod process;
pub mod pyenv;
pub mod pypi;
pub mod toolchain;
pub mod version;
