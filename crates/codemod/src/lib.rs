//! archsmith-codemod: the codemod engine that ports extension sources (legacy ATen/THC, Python,
//! the stable ABI), with the rule catalogues it reads compiled in.

// The crates below, under their module names (see archsmith-model).
pub use archsmith_model::*;

// Readers: pure rewriters over text.
pub mod codemod;
