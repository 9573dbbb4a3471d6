//! archsmith-binary: the binary reader. Zero-copy parsers over `&[u8]` for ELF files, CUDA
//! fatbins and cubins, and the wheels that carry them; typed errors, never a panic on input.

// The crates below, under their module names (see archsmith-model).
pub use archsmith_model::*;

// Readers: pure parsers over bytes.
pub mod binary;
