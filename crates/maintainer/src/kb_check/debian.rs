//! `kb check --debian`: each `[[cuda_system_package]]` row archsmith installs from (`suite`,
//! `closure`, `torch_libraries`, `host_compiler`) read against its suite's signed index as it is today: the root
//! package is there with a version of the row's CUDA release, and every other package of the
//! closure is pinned by a parent's `Depends` to a version the index has. Nothing is downloaded
//! but the index (`InRelease` and each component's `Packages.xz`).

use crate::downloads::debian_archive::{self, Suite};
use crate::kb::KnowledgeBase;
use crate::output::{Exit, Table};
use serde::Serialize;

/// One row as the archive has it now.
#[derive(Debug, Serialize)]
pub struct RowCheck {
    pub cuda: String,
    pub suite: String,
    /// `nvidia-cuda-toolkit 12.4.131~12.4.1-2`, as the index resolves the closure now.
    pub packages: Vec<String>,
    pub host_compiler: Vec<String>,
    /// The libraries torch's own build links, as the closure with them resolves now.
    pub torch_libraries: Vec<String>,
    pub problems: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct DebianReport {
    pub rows: Vec<RowCheck>,
}

impl DebianReport {
    pub fn exit(&self) -> Exit {
        Exit::passed(self.rows.iter().all(|r| r.problems.is_empty()))
    }

    pub fn table(&self) -> String {
        let mut t = Table::new(["CUDA", "SUITE", "CLOSURE NOW", "VERDICT"]);
        for r in &self.rows {
            let verdict = match r.problems.first() {
                None => "ok".to_string(),
                Some(p) => format!("DIFFERS: {p}"),
            };
            t.row([
                r.cuda.clone(),
                r.suite.clone(),
                r.packages.first().cloned().unwrap_or_default(),
                verdict,
            ]);
            for p in r
                .packages
                .iter()
                .skip(1)
                .chain(&r.torch_libraries)
                .chain(&r.host_compiler)
            {
                t.row([
                    String::new(),
                    String::new(),
                    format!("  {p}"),
                    String::new(),
                ]);
            }
        }
        t.render()
    }
}

/// Reads every archive row of `kb` against its suite's signed index: with `live`, today's;
/// else the one kept when archsmith last read it (its signature and hashes checked again, so no
/// upload to the archive turns the verdict), today's where none is kept yet.
pub fn check_debian(kb: &KnowledgeBase, live: bool) -> DebianReport {
    let mut rows = Vec::new();
    for row in kb.debian_archive_toolkits() {
        let suite_name = row.suite.clone().unwrap_or_default();
        let mut check = RowCheck {
            cuda: row.cuda.to_string(),
            suite: suite_name.clone(),
            packages: Vec::new(),
            host_compiler: Vec::new(),
            torch_libraries: Vec::new(),
            problems: Vec::new(),
        };
        let index = Suite::new(&suite_name).and_then(|s| match live {
            false => s
                .index_kept(&row.components)
                .or_else(|_| s.index(&row.components, &mut |_| {})),
            true => s.index(&row.components, &mut |_| {}),
        });
        let index = match index {
            Ok(i) => i,
            Err(e) => {
                check.problems.push(format!("{e:#}"));
                rows.push(check);
                continue;
            }
        };
        let describe =
            |p: &debian_archive::Picked| format!("{} {}", p.record.name, p.record.version);
        match debian_archive::resolve(&index.records, &row.closure) {
            Ok(picked) => {
                check.packages = picked.iter().map(describe).collect();
                let root = &picked[0].record.version;
                let upstream = root.split(['~', '-']).next().unwrap_or_default();
                if !upstream.starts_with(&format!("{}.", row.cuda.major_minor())) {
                    check.problems.push(format!(
                        "{} is {root} now, not a CUDA {} release",
                        row.package, row.cuda
                    ));
                }
            }
            Err(e) => check.problems.push(format!("{e:#}")),
        }
        if !row.torch_libraries.is_empty() {
            let names = crate::toolchain::debian_packages::Closure::TorchBuild.packages(row);
            match debian_archive::resolve(&index.records, &names) {
                Ok(picked) => {
                    check.torch_libraries = picked
                        .iter()
                        .skip(row.closure.len())
                        .map(describe)
                        .collect()
                }
                Err(e) => check.problems.push(format!("torch libraries: {e:#}")),
            }
        }
        if !row.host_compiler.is_empty() {
            match debian_archive::resolve(&index.records, &row.host_compiler) {
                Ok(picked) => check.host_compiler = picked.iter().map(describe).collect(),
                Err(e) => check.problems.push(format!("host compiler: {e:#}")),
            }
        }
        rows.push(check);
    }
    DebianReport { rows }
}
