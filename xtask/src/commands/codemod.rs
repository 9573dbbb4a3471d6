//! `cargo xtask codemod PATH… [--dry-run|--check] [--force] [--json]`: port legacy PyTorch
//! extension sources with the rule catalogue (see `crate::codemod`).
//!
//! Exit status: 0 done (or nothing to do); 1 with `--check` when a file would change or a review
//! item remains; 2 on errors (unreadable file, dirty git tree without `--force`, bad catalogue).

use crate::codemod::catalogue::RuleKind;
use crate::codemod::{self, Catalogue, Lang, Mode, Report};
use crate::output::{documents, emit, Exit};
use anyhow::Result;
use serde::Serialize;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct CodemodArgs {
    /// Files or directories (walked for .c .cc .cpp .cxx .h .hh .hpp .cu .cuh and .py).
    #[arg(required_unless_present = "list_rules", value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// List the catalogue's rules (id, kind, torch release where the old form broke) and exit.
    #[arg(long)]
    pub list_rules: bool,
    /// Print a unified diff of what would change; write nothing.
    #[arg(long, conflicts_with = "check")]
    pub dry_run: bool,
    /// Write nothing; exit 1 if a file would change or a review item remains.
    #[arg(long)]
    pub check: bool,
    /// Write the rewrites (as a linter's --fix: in a work tree with changes too), then print
    /// what is left for a person; exit 1 while a review item remains.
    #[arg(long, conflicts_with_all = ["check", "dry_run"])]
    pub fix: bool,
    /// Write even when the files have uncommitted changes or are not in a git work tree.
    #[arg(long)]
    pub force: bool,
    /// Rule catalogue to use instead of the built-in one.
    #[arg(long, value_name = "FILE")]
    pub rules: Option<PathBuf>,
    /// Then move the code onto torch's stable ABI (crates/codemod/rules/torch-stable.toml; pybind11
    /// bindings become operators): a binary that loads on every later torch; what it cannot
    /// express is a review item.
    #[arg(long)]
    pub stable_abi: bool,
    /// With --stable-abi: the operator namespace (torch.ops.NAME.*; default: the first path's
    /// directory name).
    #[arg(long, value_name = "NAME", requires = "stable_abi")]
    pub stable_namespace: Option<String>,
    /// The torch release to port to: which Python rows hold (default: the newest known).
    #[arg(long, value_name = "VER", value_parser = crate::kb::user_input::torch_release)]
    pub torch: Option<crate::version::Version>,
    #[command(flatten)]
    pub output: crate::output::JsonOutput,
    #[command(flatten)]
    pub findings: crate::lint::FindingsArgs,
}

pub fn run(args: &CodemodArgs) -> Result<Exit> {
    let selection = args.findings.selection();
    let namespace = args.stable_abi.then(|| {
        args.stable_namespace
            .clone()
            .unwrap_or_else(|| codemod::stable_bindings::namespace_of(args.paths.first()))
    });
    let mut cat = Catalogue::chosen(
        args.rules.as_deref(),
        args.torch.as_ref(),
        namespace.as_deref(),
        &selection,
    )?;
    if args.stable_abi && !args.list_rules {
        cat.to_mut().stable_schemas =
            crate::port_extension::signature_changes::stable_schemas(&cat.target_torch(), &|m| {
                crate::errln!("archsmith: {m}")
            });
    }
    if args.list_rules {
        return list_rules(&cat, args.output.json);
    }
    let apply = !args.dry_run && !args.check;
    let mode = if apply {
        Mode::Apply
    } else if args.check {
        Mode::Check
    } else {
        Mode::DryRun
    };
    let report = codemod::run_on_paths(&cat, &args.paths, mode, args.force || args.fix)?;
    let format = args
        .findings
        .format(args.output.json, args.check || args.fix);
    // The patch goes out as bytes, ahead of the table: byte-exact, so it applies to a file
    // that is not UTF-8.
    if args.dry_run && format == crate::lint::Format::Table {
        for d in report.files.iter().filter_map(|f| f.diff.as_ref()) {
            crate::output::write_stdout_bytes(&d.0);
        }
    }
    let table = |r: &Report| r.table(apply);
    let findings = |r: &Report| {
        // Once written, what is left is the review items.
        let diags = r.diagnostics(&cat, !apply);
        let summary = r
            .table(apply)
            .lines()
            .next()
            .unwrap_or_default()
            .to_string();
        (diags, cat.rule_docs(), summary)
    };
    crate::lint::emit(
        format,
        "codemod",
        documents::CODEMOD,
        &report,
        table,
        findings,
    )?;
    let left = report.review_items > 0 || (args.check && report.files_changed > 0);
    if (args.check || args.fix) && left {
        return Ok(Exit::Failed);
    }
    Ok(Exit::Success)
}

#[derive(Debug, Serialize)]
struct RuleRow<'a> {
    id: &'a str,
    kind: RuleKind,
    lang: Lang,
    broke_in: Option<String>,
    broke_with: Option<&'a str>,
    deprecated_in: Option<String>,
    replacement_since: Option<String>,
    why: &'a str,
}

fn list_rules(cat: &Catalogue, json: bool) -> Result<Exit> {
    let v = |v: &Option<crate::version::Version>| v.as_ref().map(ToString::to_string);
    let rows: Vec<RuleRow> = cat
        .rules
        .iter()
        .map(|r| RuleRow {
            id: &r.id,
            kind: r.kind,
            lang: r.lang,
            broke_in: v(&r.broke_in),
            broke_with: r.broke_with.as_deref(),
            deprecated_in: v(&r.deprecated_in),
            replacement_since: v(&r.replacement_since),
            why: &r.why,
        })
        .collect();
    #[derive(Serialize)]
    struct Rules<'a> {
        catalogue: &'a str,
        rules: Vec<RuleRow<'a>>,
    }
    let doc = Rules {
        catalogue: &cat.name,
        rules: rows,
    };
    emit(json, documents::CODEMOD_RULES, &doc, |_| cat.rules_table())?;
    Ok(Exit::Success)
}
