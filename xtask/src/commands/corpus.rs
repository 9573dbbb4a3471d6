//! `cargo xtask corpus [NAME…]`: re-run the regression corpus of real ports and builds
//! ([`crate::port_corpus`]) and compare each outcome with the recorded one. Exit 0 when every
//! package run did as recorded, 1 when one changed or could not run, 2 on bad input.

use crate::output::{documents, emit, Exit};
use crate::port_corpus::{self, Manifest, Run};
use anyhow::{Context, Result};
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct CorpusArgs {
    /// The packages to run, by name (default: every one in the manifest).
    #[arg(value_name = "NAME")]
    pub names: Vec<String>,
    /// The manifest (default: xtask/data/port-corpus.toml).
    #[arg(long, value_name = "FILE")]
    pub manifest: Option<PathBuf>,
    /// A directory of git checkouts, one per repository (`DIR/DCNv2`), at the recorded commits;
    /// without it a git package inside a tree is skipped (and shown as skipped).
    #[arg(long, value_name = "DIR")]
    pub checkouts: Option<PathBuf>,
    /// Write each run's outcome into the manifest as the one expected (review the diff).
    #[arg(long)]
    pub record: bool,
    /// List the packages and their recorded outcomes; run nothing.
    #[arg(long)]
    pub list: bool,
    #[command(flatten)]
    pub output: crate::output::JsonOutput,
}

pub fn run(args: &CorpusArgs) -> Result<Exit> {
    let path = args
        .manifest
        .clone()
        .unwrap_or_else(port_corpus::default_manifest);
    let mut manifest = Manifest::read(&path)?;
    if args.list {
        let entries = manifest.select(&args.names)?;
        let doc = serde_json::json!({ "manifest": path, "packages": entries });
        emit(args.output.json, documents::CORPUS, &doc, |_| {
            port_corpus::list_table(&entries)
        })?;
        return Ok(Exit::Success);
    }
    // Names, not entries: `--record` writes into the manifest while these are run.
    let selected: Vec<String> = manifest
        .select(&args.names)?
        .iter()
        .map(|e| e.name.clone())
        .collect();
    let program = std::env::current_exe().context("finding archsmith's own binary")?;
    let logs = crate::paths::cache_dir().join("corpus-logs");
    let mut runs: Vec<Run> = Vec::new();
    for (i, name) in selected.iter().enumerate() {
        let entry = manifest
            .packages
            .iter()
            .find(|e| &e.name == name)
            .context("a selected package is in the manifest")?;
        crate::errln!(
            "corpus: [{}/{}] {} ({}; last run {})",
            i + 1,
            selected.len(),
            entry.name,
            entry.source,
            entry
                .seconds
                .map_or("never recorded".into(), |s| format!("{s:.0} s"))
        );
        let run = port_corpus::run(entry, &program, args.checkouts.as_deref(), &logs)?;
        crate::errln!(
            "corpus: {} {} in {:.0} s",
            run.name,
            run.verdict,
            run.seconds
        );
        runs.push(run);
    }
    if args.record {
        record(&mut manifest, &runs);
        let previous = crate::input_file::read_text(&path, "the corpus manifest")?;
        crate::cache::store(&path, manifest.to_toml(&previous)?.as_bytes())?;
        crate::errln!(
            "corpus: recorded into {} (review `git diff`)",
            path.display()
        );
    }
    let worst = runs
        .iter()
        .map(|r| match r.verdict {
            "same" | "skipped" => Exit::Success,
            "new" if args.record => Exit::Success,
            _ => Exit::Failed,
        })
        .fold(Exit::Success, Exit::worst);
    let doc = serde_json::json!({ "manifest": path, "runs": runs });
    emit(args.output.json, documents::CORPUS, &doc, |_| {
        port_corpus::runs_table(&runs)
    })?;
    Ok(worst)
}

/// Each run that printed an outcome becomes its package's expected one, dated today.
fn record(manifest: &mut Manifest, runs: &[Run]) {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let today: String = crate::build_insight::compile_record::utc_date(secs)
        .chars()
        .take(10)
        .collect();
    for run in runs {
        let (Some(outcome), Some(entry)) = (
            &run.outcome,
            manifest.packages.iter_mut().find(|e| e.name == run.name),
        ) else {
            continue;
        };
        entry.expect = Some(outcome.clone());
        entry.recorded = Some(today.clone());
        entry.seconds = Some(run.seconds.round());
    }
}
