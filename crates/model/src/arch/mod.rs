//! The arch model: one exact representation of CUDA architectures shared by every command.
//!
//! * [`Arch`] is a compile target (`8.6`, `9.0a`, `10.0f`), [`Cc`] a device's compute capability.
//! * [`spec`] parses what users and torch write (`TORCH_CUDA_ARCH_LIST`) into a [`spec::Plan`].
//! * [`torch_flags`] reproduces torch's own parsers (cpp_extension's Python and the CMake module).
//! * [`compat`] holds the binary-compatibility rules ("does this image run on that GPU?").

pub mod advice;
pub mod compat;
pub mod spec;
pub mod torch_flags;

pub use crate::cuda_arch::{Arch, ArchParseError, Cc, Variant};
