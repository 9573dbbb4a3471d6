//! The verdict lines every verification prints: a named check with ok / FAIL / skipped and why,
//! as a table for people, JSON for machines and JUnit XML for CI systems.

use crate::output::Table;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Fail,
    Skipped,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Item {
    pub name: String,
    pub status: Status,
    pub detail: String,
}

pub fn item(name: impl Into<String>, status: Status, detail: impl Into<String>) -> Item {
    Item {
        name: name.into(),
        status,
        detail: detail.into(),
    }
}

pub fn all_ok(items: &[Item]) -> bool {
    items.iter().all(|i| i.status != Status::Fail)
}

pub fn table(items: &[Item]) -> String {
    let mut t = Table::new(["CHECK", "STATUS", "DETAIL"]);
    for i in items {
        let s = match i.status {
            Status::Ok => "ok",
            Status::Fail => "FAIL",
            Status::Skipped => "skipped",
        };
        t.row([i.name.clone(), s.to_string(), i.detail.clone()]);
    }
    t.render()
}

/// One JUnit test suite named `suite`, a test case per item: failures carry the detail as their
/// message, skipped items are skipped.
pub fn junit(suite: &str, items: &[Item]) -> anyhow::Result<String> {
    use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};
    let mut ts = TestSuite::new(suite);
    for i in items {
        let status = match i.status {
            Status::Ok => TestCaseStatus::success(),
            Status::Fail => {
                let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
                s.set_message(i.detail.clone());
                s
            }
            Status::Skipped => {
                let mut s = TestCaseStatus::skipped();
                s.set_message(i.detail.clone());
                s
            }
        };
        let mut tc = TestCase::new(i.name.clone(), status);
        tc.set_classname(suite);
        if i.status == Status::Ok {
            tc.set_system_out(i.detail.clone());
        }
        ts.add_test_case(tc);
    }
    let mut report = Report::new("archsmith");
    report.add_test_suite(ts);
    Ok(report.to_string()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn junit_has_a_case_per_item_with_failures_and_skips() {
        let items = [
            item("torch", Status::Ok, "2.15.0"),
            item("arch flags", Status::Fail, "planned sm_89 <missing> & more"),
            item("gpu smoke", Status::Skipped, "no GPU"),
        ];
        let xml = junit("verify env", &items).unwrap();
        assert!(
            xml.contains(r#"tests="3""#)
                && xml.contains(r#"failures="1""#)
                && xml.contains(r#"skipped="1""#),
            "{xml}"
        );
        assert!(
            xml.contains("planned sm_89 &lt;missing&gt; &amp; more"),
            "{xml}"
        );
        assert!(!all_ok(&items));
    }
}
