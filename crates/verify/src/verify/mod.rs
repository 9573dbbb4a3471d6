//! Checks of what was built or installed, as reports with a verdict and an exit code.
//!
//! * [`binary_check`]: which SASS and PTX files and wheels really carry, against a spec and GPUs.
//! * [`load_check`]: whether they load into a Python env with torch (libraries, symbol versions,
//!   symbols, the C++ ABI, the CPython tag), read from the ELF files.

pub mod binary_check;
pub mod checks;
pub mod env;
pub mod library_paths;
pub mod load_check;
pub mod pins;
pub mod torch_wheel;
