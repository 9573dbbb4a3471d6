//! archsmith-workflows: what the commands do, callable from tests and from each other along the
//! edges listed.

// The crates below, under their module names (see archsmith-model).
pub use archsmith_codemod::*;
pub use archsmith_verify::*;

// Data: archsmith's own files (patches/, kernels/, verify/, rules, hooks) wherever the binary runs.
pub mod data;

// Workflows: what the commands do, callable from tests and from each other along the edges listed.
pub mod audit_upgrade;
pub mod build_ext;
pub mod build_torch;
pub mod doctor;
pub mod kernels;
pub mod port_corpus;
pub mod port_extension;
// Same-layer uses: port_extension → build_ext.
