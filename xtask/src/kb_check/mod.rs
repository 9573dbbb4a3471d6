//! `cargo xtask kb check`: the knowledge base's facts re-verified against the real artifacts.
//!
//! * [`nvcc`]: the compile targets and host-compiler limits, asked of nvcc (ptxas) from NVIDIA's
//!   PyPI wheels;
//! * [`torch`]: each torch release row and both arch-list tables, read from the torch wheels on
//!   PyPI by range (and their torchvision/torchaudio companions' metadata);
//! * [`gpus`]: the GPU rows and the chip table against the PCI ID Repository (Debian's pci.ids);
//! * [`debian`]: the CUDA toolkits archsmith installs from Debian's archive, against the suites'
//!   signed indexes.

pub mod debian;
pub mod gpus;
pub mod nvcc;
pub mod torch;

pub use nvcc::*;

use crate::output::Exit;
use serde::Serialize;

/// One fact as the real tool reports it and as the knowledge base has it.
#[derive(Debug, Serialize)]
pub struct Compared<T> {
    pub tool: T,
    pub kb: T,
    pub ok: bool,
}

impl<T: PartialEq> Compared<T> {
    pub fn new(tool: T, kb: T) -> Compared<T> {
        let ok = tool == kb;
        Compared { tool, kb, ok }
    }
}

/// A release that could not be checked, and why.
#[derive(Debug, Serialize)]
pub struct CheckFailure {
    pub version: String,
    pub error: String,
}

/// A check's exit: refused (2) when a release could not be fetched or read, else failed (1) when
/// a fact differs, else success.
fn exit(failures: &[CheckFailure], differs: bool) -> Exit {
    if !failures.is_empty() {
        Exit::Refused
    } else {
        Exit::passed(!differs)
    }
}
