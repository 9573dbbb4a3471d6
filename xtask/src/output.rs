//! Output for people and machines: every command prints either a short aligned table or, with
//! `--json`, one JSON document on stdout.

use serde::Serialize;

/// A plain-text table whose columns are padded to their widest cell.
#[derive(Debug, Default)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new<S: Into<String>>(header: impl IntoIterator<Item = S>) -> Table {
        Table {
            header: header.into_iter().map(Into::into).collect(),
            rows: Vec::new(),
        }
    }

    /// A table without a header line (key/value listings).
    pub fn headerless() -> Table {
        Table::default()
    }

    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) {
        self.rows.push(cells.into_iter().map(Into::into).collect());
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    pub fn render(&self) -> String {
        let ncols = std::iter::once(&self.header)
            .chain(&self.rows)
            .map(Vec::len)
            .max()
            .unwrap_or(0);
        let mut widths = vec![0usize; ncols];
        for r in std::iter::once(&self.header).chain(&self.rows) {
            for (i, c) in r.iter().enumerate() {
                widths[i] = widths[i].max(c.chars().count());
            }
        }
        let mut out = String::new();
        for r in std::iter::once(&self.header)
            .chain(&self.rows)
            .filter(|r| !r.is_empty())
        {
            let mut line = String::new();
            for (i, c) in r.iter().enumerate() {
                line.push_str(c);
                if i + 1 < r.len() {
                    line.push_str(&" ".repeat(widths[i] - c.chars().count() + 2));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// Prints a command's report: JSON for machines with `--json`, the rendered table otherwise.
pub fn emit<T: Serialize>(
    json: bool,
    report: &T,
    render: impl FnOnce(&T) -> String,
) -> anyhow::Result<()> {
    if json {
        print_json(report)
    } else {
        print!("{}", render(report));
        Ok(())
    }
}

/// Prints `value` as pretty JSON.
pub fn print_json<T: Serialize>(value: &T) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligns_columns_by_display_width() {
        let mut t = Table::new(["GPU", "CC", "runs"]);
        t.row(["RTX 5090", "12.0", "no"]);
        t.row(["L4", "8.9", "yes"]);
        assert_eq!(
            t.render(),
            "GPU       CC    runs\nRTX 5090  12.0  no\nL4        8.9   yes\n"
        );
    }
}
