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
pub mod manylinux;
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

/// The projects whose index pages `kb check` reads, and `--record` keeps: torch and its
/// companions, each CUDA major's compiler wheel, and auditwheel (the manylinux policies).
pub fn recorded_projects(kb: &crate::kb::KnowledgeBase) -> Vec<String> {
    let mut out: Vec<String> = torch::PROJECTS.iter().map(|p| p.to_string()).collect();
    out.extend(kb.cuda_majors.iter().map(|m| m.compiler_wheel.clone()));
    out.push("auditwheel".to_string());
    out
}

/// One project's index page today against its recording: the project, the recording's date
/// (None: never recorded), and what moved since.
pub type SinceRecorded = (String, Option<String>, Vec<crate::pypi::Moved>);

/// What the index answers today beside what was recorded, per project of [`recorded_projects`]:
/// the recording's date and what moved since (`kb check --live`); with `record`, today's answers
/// replace the recordings that moved (`kb check --record`), a diff to review.
pub fn live_against_recorded(
    dir: &std::path::Path,
    record: bool,
) -> anyhow::Result<Vec<SinceRecorded>> {
    use crate::pypi::{moved, read_recording, write_recording, Pypi, Recording};
    let live = Pypi::live();
    let mut out = Vec::new();
    for project in recorded_projects(crate::kb::kb()) {
        let files = live.live_files(&project)?;
        let before = read_recording(dir, &project).ok();
        let since = before.as_ref().map(|r| r.read_at.clone());
        let changes = before
            .as_ref()
            .map_or_else(Vec::new, |r| moved(&r.files, &files));
        if record && (before.is_none() || !changes.is_empty()) {
            let secs = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64);
            let now = chrono::DateTime::from_timestamp(secs, 0)
                .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
                .unwrap_or_default();
            let rec = Recording {
                url: Pypi::page_url(&project),
                read_at: now,
                files,
            };
            write_recording(dir, &project, &rec)?;
        }
        out.push((project, since, changes));
    }
    Ok(out)
}
