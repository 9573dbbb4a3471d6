//! `bench codemod`: how `codemod --check` grows with a file's size ([`crate::bench::codemod_scaling`]).

use crate::bench::codemod_scaling::{codemod_scaling, CodemodScalingReport};
use crate::output::{documents, emit, Exit, Table};
use anyhow::Result;
use clap::Args;

#[derive(Debug, Args)]
pub struct CodemodArgs {
    /// The sizes to time, in lines of one legacy check each (ascending).
    #[arg(long, value_delimiter = ',', default_value = "5000,10000,20000,40000")]
    pub lines: Vec<usize>,
    /// Timed runs of each size; the fastest is reported.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    #[command(flatten)]
    pub output: crate::output::JsonOutput,
}

pub fn codemod(args: CodemodArgs) -> Result<Exit> {
    let mut lines = args.lines.clone();
    lines.sort_unstable();
    lines.dedup();
    emit(
        args.output.json,
        documents::BENCH_CODEMOD,
        &codemod_scaling(&lines, args.runs)?,
        render,
    )?;
    Ok(Exit::Success)
}

fn render(r: &CodemodScalingReport) -> String {
    let mut t = Table::new(["lines", "rewrites", "codemod --check", "growth vs linear"]);
    for s in &r.sizes {
        t.row([
            s.lines.to_string(),
            s.rewrites.to_string(),
            format!("{:.2} s", s.fastest_s),
            s.growth_vs_linear
                .map_or("-".to_string(), |g| format!("{g:.2}x")),
        ]);
    }
    format!(
        "{}fastest of {} runs each; growth 1.00x is linear, 2.00x per doubling is quadratic\n",
        t.render(),
        r.runs
    )
}
