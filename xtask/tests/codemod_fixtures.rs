//! Golden tests: every case under `tests/fixtures/codemod/` is ported through the same path as
//! `cargo xtask codemod` and must equal `expected/` byte for byte, report exactly `review.txt`,
//! and be a fixed point (a second run changes nothing). `UPDATE_EXPECT=1` rewrites the goldens.

use archsmith::codemod::{self, Mode};
use std::path::{Path, PathBuf};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/codemod")
}

fn files_under(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p.strip_prefix(root).unwrap().to_path_buf());
            }
        }
    }
    out.sort();
    out
}

fn copy_tree(from: &Path, to: &Path) {
    for rel in files_under(from) {
        let dst = to.join(&rel);
        std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
        std::fs::copy(from.join(&rel), dst).unwrap();
    }
}

#[test]
fn fixtures_port_to_their_goldens_and_are_idempotent() {
    let update = std::env::var_os("UPDATE_EXPECT").is_some();
    let mut cases: Vec<PathBuf> = std::fs::read_dir(fixtures())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("input").is_dir())
        .collect();
    cases.sort();
    assert!(cases.len() >= 3, "fixture cases: {cases:?}");
    let mut failures = Vec::new();
    for case in &cases {
        let name = case.file_name().unwrap().to_string_lossy().into_owned();
        let tmp = tempfile::tempdir().unwrap();
        copy_tree(&case.join("input"), tmp.path());
        let files = codemod::discover(&[tmp.path().to_path_buf()]).unwrap();
        let report = codemod::run(codemod::builtin(), &files, Mode::Apply).unwrap();
        assert!(report.total_rewrites() > 0, "{name}: nothing rewritten");
        let mut review = String::new();
        for f in &report.files {
            let rel = f.path.strip_prefix(tmp.path()).unwrap();
            for r in &f.review {
                review.push_str(&format!("{}:{}: {}\n", rel.display(), r.line, r.rule));
            }
        }
        if update {
            let _ = std::fs::remove_dir_all(case.join("expected"));
            copy_tree(tmp.path(), &case.join("expected"));
            std::fs::write(case.join("review.txt"), &review).unwrap();
        }
        let expected = case.join("expected");
        if files_under(&expected) != files_under(tmp.path()) {
            failures.push(format!("{name}: file sets differ"));
        }
        for rel in files_under(&expected) {
            let want = std::fs::read(expected.join(&rel)).unwrap();
            let got = std::fs::read(tmp.path().join(&rel)).unwrap_or_default();
            if want != got {
                failures.push(format!(
                    "{name}/{}:\n{}",
                    rel.display(),
                    codemod::unified_diff(&rel, &want, &got)
                ));
            }
        }
        let want_review = std::fs::read_to_string(case.join("review.txt")).unwrap_or_default();
        if want_review != review {
            failures.push(format!(
                "{name}: review items\n--- want\n{want_review}--- got\n{review}"
            ));
        }
        // Idempotence: the output is a fixed point of the whole catalogue.
        let again = codemod::run(codemod::builtin(), &files, Mode::Apply).unwrap();
        if again.files_changed != 0 || again.total_rewrites() != 0 {
            failures.push(format!("{name}: second run changed {:?}", again.rewrites));
        }
        if again.review_items != report.review_items {
            failures.push(format!("{name}: second run reports different review items"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
