//! `cargo xtask audit upgrade --from A --to B [PATH]`: thin CLI over [`crate::audit_upgrade`].

use crate::audit_upgrade::{audit, AuditReport, AuditRequest};
use crate::output::{documents, Exit};
use crate::version::Version;
use anyhow::Result;
use clap::{Args, Subcommand};
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct AuditArgs {
    #[command(subcommand)]
    pub what: AuditCommand,
}

#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Torch APIs a project uses that the upgrade removes, deprecates or changes (Python, by syntax
    /// tree), and C++/CUDA sources the port catalogue would change. Exit 1 on a finding.
    #[command(after_help = "Example:\n  archsmith audit upgrade --from 2.3.1 --to 2.6.0 .")]
    Upgrade(UpgradeArgs),
}

#[derive(Debug, Args)]
pub struct UpgradeArgs {
    /// The torch release the project runs on now.
    #[arg(long, value_name = "VER", value_parser = crate::kb::user_input::audited_torch_release)]
    pub from: Version,
    /// The torch release it moves to.
    #[arg(long, value_name = "VER", value_parser = crate::kb::user_input::audited_torch_release)]
    pub to: Version,
    /// The project: directories or files (default: the current directory).
    #[arg(default_value = ".")]
    pub paths: Vec<PathBuf>,
    /// More API changes, in the format of crates/codemod/rules/torch-python.toml (repeatable).
    #[arg(long = "changes", value_name = "FILE")]
    pub changes: Vec<PathBuf>,
    /// Also read this env's installed compiled packages against the target torch: which would
    /// not load after the upgrade (undefined symbols, C++ ABI, CUDA major), before it happens.
    #[arg(long, value_name = "PYTHON")]
    pub installed: Option<PathBuf>,
    /// With --installed: an env that has the target torch (default: archsmith provisions one).
    #[arg(long, value_name = "PYTHON", requires = "installed")]
    pub to_python: Option<PathBuf>,
    #[command(flatten)]
    pub output: crate::output::JsonOutput,
    #[command(flatten)]
    pub findings: crate::lint::FindingsArgs,
}

pub fn run(args: AuditArgs) -> Result<Exit> {
    match args.what {
        AuditCommand::Upgrade(u) => {
            let request = AuditRequest {
                from: u.from,
                to: u.to,
                paths: u.paths,
                changes: u.changes,
                installed: u.installed,
                to_python: u.to_python,
                selection: u.findings.selection(),
            };
            let report = audit(&request)?;
            let format = u.findings.format(u.output.json, true);
            let doc = documents::AUDIT_UPGRADE;
            let (table, findings) = (AuditReport::table, AuditReport::diagnostics);
            crate::lint::emit(format, "audit upgrade", doc, &report, table, findings)?;
            Ok(Exit::passed(report.is_clean()))
        }
    }
}
