//! Which torch a build or a port is for, declared once: `--torch`, `--cuda` and `--python`, as
//! build-ext and port-extension (and the benchmarks that run them) take them, flattened into each
//! command's arguments (`#[command(flatten)]`) and carried whole into the workflows' requests.

use crate::version::Version;
use std::path::PathBuf;

/// The torch env a command builds and verifies with, and the CUDA release it compiles with.
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct TargetEnv {
    /// The torch release to build for (default: the newest known, or --python's): archsmith
    /// makes an env of it; a port also applies its rule rows. With --python, a check that the
    /// env has it.
    #[arg(long, value_name = "VER", value_parser = crate::kb::user_input::torch_release)]
    pub torch: Option<Version>,
    /// The CUDA release to compile with (default: the one torch was built with; must share its
    /// major).
    #[arg(long, value_name = "VER", value_parser = crate::kb::user_input::cuda_release)]
    pub cuda: Option<Version>,
    /// A Python with torch installed (and torchvision, for the recipes' smoke tests) to build
    /// and verify with instead of archsmith's env: an air-gapped host's or a GPU image's.
    #[arg(long, value_name = "PATH", value_parser = crate::python::interpreter_arg)]
    pub python: Option<PathBuf>,
}
