//! Benchmarks: archsmith against the tool a user would otherwise use, both sides in one run on the
//! same machine (`cargo xtask bench …`).
//!
//! * [`audit`]: `verify binary` on a whole wheel vs `unzip` + `cuobjdump --list-elf` per .so.
//! * [`codemod_scaling`]: how `codemod --check` grows with a generated file's size.
//! * [`jit_hook_startup`]: what the load() hook's `.pth` costs a Python start where it is inert.
//! * [`build_ext`]: `build-ext` vs plain `pip wheel --no-build-isolation`, clean and no-op.
//! * [`load_check_vs_python`]: the load check's verdicts vs importing each module in a fresh
//!   interpreter: agreement and time.

pub mod audit;
pub mod build_ext_vs_pip;
pub mod codemod_scaling;
pub mod jit_hook_startup;
pub mod load_check_vs_python;
