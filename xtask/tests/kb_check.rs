//! The knowledge base's nvcc facts against NVIDIA's real compiler wheels on PyPI: the same check
//! as `cargo xtask kb check`, run as regular tests.
//!
//! Measured on the 2-core dev machine with the wheels cached under archsmith's cache
//! (`ARCHSMITH_HOME`): about 2 s for the 12 nvcc 13.x releases and 4 s for the 24 CUDA 11/12
//! releases. A cold cache first downloads them: about 17 s / 0.5 GB and 33 s / 0.55 GB. Cheap
//! enough to run on every `cargo test`, like the real-torch tests that need PyPI too.

use archsmith::kb::kb;
use archsmith::kb_check::{check_versions, releases_to_check};
use archsmith::output::Exit;
use archsmith::version::Version;

fn check_all(filters: &[&str], at_least: usize) {
    let filters: Vec<Version> = filters.iter().map(|f| f.parse().unwrap()).collect();
    let versions =
        releases_to_check(&filters, &recorded()).expect("the compiler wheels' recorded pages");
    // Fewer releases than were on PyPI when this was written means the listing broke.
    assert!(
        versions.len() >= at_least,
        "only {} releases listed: {versions:?}",
        versions.len()
    );
    let report = check_versions(kb(), &versions, false);
    assert_eq!(report.exit(), Exit::Success, "\n{}", report.table());
    assert_eq!(report.checked.len(), versions.len());
}

/// nvcc itself (`--list-gpu-code`, `--help`) and `crt/host_config.h`, for 13.0.48 … 13.5.37.
#[test]
fn every_nvcc_13_wheel_on_pypi_agrees_with_the_knowledge_base() {
    check_all(&[], 12);
}

/// ptxas `--help` and `crt/host_config.h` from the nvcc-cu11/-cu12 wheels, 11.7.99 … 12.9.86.
#[test]
fn every_cuda_11_and_12_ptxas_wheel_on_pypi_agrees_with_the_knowledge_base() {
    check_all(&["11", "12"], 24);
}

/// The index pages the torch check reads, as recorded in the repository
/// (`xtask/data/pypi-recordings`): a verdict no upload to PyPI can turn (issue 61: torchaudio
/// 2.11.1's upload failed a landing, then a CDN node's older answer passed it again).
fn recorded() -> archsmith::pypi::Pypi {
    archsmith::pypi::Pypi::recorded(archsmith::pypi::repository_recordings())
}

/// Every `[[torch]]` row and both arch-list tables against torch's wheels (members read by range,
/// kept once read: a file's content never changes) and the torchvision/torchaudio metadata, with
/// the file lists as recorded: the same check as `kb check --torch`. About 20 s with the members
/// not yet kept.
#[test]
fn every_torch_row_agrees_with_its_wheels_as_recorded() {
    use archsmith::kb_check::torch::{check_torch, rows_to_check};
    let rows = rows_to_check(kb(), &[]).unwrap();
    assert!(rows.len() >= 31, "{} torch rows", rows.len());
    let report = check_torch(kb(), &recorded(), &rows, false, false).unwrap();
    assert_eq!(report.exit(), Exit::Success, "\n{}", report.table());
    assert_eq!(report.checked.len(), rows.len());
}

/// The same against today's index (`kb check --torch --live`), and the recordings against it:
/// what moved since they were made is listed (an upload is news, not a failure here).
#[test]
#[ignore = "live tier: reads today's PyPI index (cargo test -- --ignored live)"]
fn live_every_torch_row_agrees_with_todays_index() {
    use archsmith::kb_check::live_against_recorded;
    use archsmith::kb_check::torch::{check_torch, rows_to_check};
    let moved = live_against_recorded(&archsmith::pypi::repository_recordings(), false).unwrap();
    for (project, since, changes) in &moved {
        eprintln!("{project} since {since:?}: {} moved", changes.len());
    }
    let rows = rows_to_check(kb(), &[]).unwrap();
    let report = check_torch(kb(), &archsmith::pypi::Pypi::live(), &rows, false, false).unwrap();
    assert_eq!(report.exit(), Exit::Success, "\n{}", report.table());
}

/// Wrong rows planted in a copy of the knowledge base are each found, by name, and nothing else is.
#[test]
fn planted_errors_in_torch_rows_and_tables_are_found() {
    use archsmith::kb::{KnowledgeBase, KB_PATH};
    use archsmith::kb_check::torch::{check_torch, rows_to_check};
    let text = std::fs::read_to_string(archsmith::paths::repo_root().join(KB_PATH)).unwrap();
    let replace_in = |text: &str, anchor: &str, old: &str, new: &str| -> String {
        let at = text.find(anchor).unwrap_or_else(|| panic!("no {anchor:?}"));
        let rel = text[at..]
            .find(old)
            .unwrap_or_else(|| panic!("no {old:?} after {anchor:?}"));
        format!(
            "{}{new}{}",
            &text[..at + rel],
            &text[at + rel + old.len()..]
        )
    };
    // The issue's own example (torch 2.11.0 without its torchaudio), a Python range, and torch
    // 2.6's CMake parser given 2.9's `f`.
    let planted = replace_in(
        &text,
        "version = \"2.11.0\"",
        "torchaudio = [\"2.11.0\", \"2.11.1\"]",
        "torchaudio = []",
    );
    let planted = replace_in(
        &planted,
        "version = \"2.6.0\"",
        "python_max = \"3.13\"",
        "python_max = \"3.12\"",
    );
    let planted = replace_in(
        &planted,
        "[[torch_cmake_arch_list]]\nfrom = \"2.6\"",
        "number = '^([0-9]+\\.[0-9]a?",
        "number = '^([0-9]+\\.[0-9][af]?",
    );
    assert_ne!(planted, text);
    let kb = KnowledgeBase::parse(&planted).expect("the planted copy still loads");
    let filters: Vec<archsmith::version::Version> = ["2.5.1", "2.6.0", "2.11.0"]
        .iter()
        .map(|v| v.parse().unwrap())
        .collect();
    let rows = rows_to_check(&kb, &filters).unwrap();
    let report = check_torch(&kb, &recorded(), &rows, false, false).unwrap();
    assert_eq!(report.exit(), Exit::Failed, "\n{}", report.table());
    let differences: Vec<(String, Vec<&str>)> = report
        .checked
        .iter()
        .map(|c| (c.version.clone(), c.differences()))
        .collect();
    assert_eq!(
        differences,
        [
            ("2.5.1".to_string(), vec![]),
            (
                "2.6.0".to_string(),
                vec!["python_max", "torch_cmake_arch_list"]
            ),
            ("2.11.0".to_string(), vec!["torchaudio"]),
        ],
        "\n{}",
        report.table()
    );
    let table = report.table();
    assert!(
        table.contains("python_max: PyPI has 3.13; the knowledge base has 3.12"),
        "{table}"
    );
}

/// `kb check --gpus` against Debian's real pci.ids package: every CUDA-era NVIDIA GPU in it
/// resolves to a compute capability through its chip, and every `[[gpu]]` row the file names has
/// the CC of its chip. A row given a wrong CC, and a chip row given a wrong CC, are caught.
#[test]
fn gpu_rows_and_chips_agree_with_debians_pci_ids() {
    use archsmith::kb::{KnowledgeBase, KB_PATH};
    use archsmith::kb_check::gpus::{check_gpus, pci_ids_file};
    let file = pci_ids_file(None).unwrap();
    let report = check_gpus(kb(), &file).unwrap();
    assert!(report.cuda_era_gpus > 800, "{}", report.table());
    assert_eq!(
        report.cuda_era_resolved,
        report.cuda_era_gpus,
        "{}",
        report.table()
    );
    assert!(report.rows_found >= 40, "{}", report.table());
    assert!(report.rows_differ.is_empty(), "{}", report.table());
    assert_eq!(report.exit(), Exit::Success);

    let text = std::fs::read_to_string(archsmith::paths::repo_root().join(KB_PATH)).unwrap();
    let planted = text
        .replacen(
            "name = \"Tesla T4\"\naliases = [\"T4\"]\ncc = \"7.5\"",
            "name = \"Tesla T4\"\naliases = [\"T4\"]\ncc = \"8.0\"",
            1,
        )
        .replacen(
            "chip = \"GA100\"\ncc = \"8.0\"",
            "chip = \"GA100\"\ncc = \"8.6\"",
            1,
        );
    assert_ne!(planted, text, "the planted rows were not found");
    let wrong = KnowledgeBase::parse(&planted).unwrap();
    let report = check_gpus(&wrong, &file).unwrap();
    let rows: Vec<&str> = report.rows_differ.iter().map(|d| d.row.as_str()).collect();
    assert!(rows.contains(&"Tesla T4"), "{}", report.table());
    // The A100 rows now disagree with their (wrongly mapped) chip.
    assert!(
        rows.iter().any(|r| r.starts_with("A100")),
        "{}",
        report.table()
    );
    assert_eq!(report.exit(), Exit::Failed);
}

/// Issue 50: archsmith carries the NVIDIA part of a current pci.ids. Against Debian sid's package
/// it lacks nothing; a newer file with a device the copy lacks makes the check fail and name it.
#[test]
fn the_carried_pci_ids_is_current_and_a_newer_file_is_caught() {
    use archsmith::kb::pci_ids::{file_version, CARRIED};
    use archsmith::kb_check::gpus::{check_gpus, pci_ids_file};
    let file = pci_ids_file(None).unwrap();
    let report = check_gpus(kb(), &file).unwrap();
    assert!(report.carried_lacks.is_empty(), "{}", report.table());
    assert!(report.file_version.as_deref() <= file_version(CARRIED));

    let dir = tempfile::tempdir().unwrap();
    let newer = dir.path().join("pci.ids");
    let text = CARRIED.replacen("# Version: 2026.10.24", "# Version: 2099.01.01", 1)
        + "\tfff0  GB202 [GeForce RTX 9090]\n";
    std::fs::write(&newer, text).unwrap();
    let report = check_gpus(kb(), &newer).unwrap();
    assert_eq!(report.carried_lacks, ["fff0 GB202 [GeForce RTX 9090]"]);
    assert!(report.table().contains("STALE"), "{}", report.table());
    assert_eq!(report.exit(), Exit::Failed);
}

/// The CUDA toolkits archsmith installs from Debian's archive, against the suites' signed indexes
/// as last read and verified (kept in the cache; `kb check --debian --live` reads today's): 12.4's closure from trixie and 11.8's (with its g++-11 host compiler) from bookworm
/// resolve, each root a release of its row. A row that names a CUDA release the package is not,
/// and a closure with a package no other depends on, are caught.
#[test]
fn debian_archive_rows_resolve_against_the_signed_indexes() {
    use archsmith::kb::{KnowledgeBase, KB_PATH};
    use archsmith::kb_check::debian::check_debian;
    let report = check_debian(kb(), false);
    assert_eq!(report.exit(), Exit::Success, "{}", report.table());
    let roots: Vec<(&str, &str)> = report
        .rows
        .iter()
        .map(|r| (r.cuda.as_str(), r.packages[0].as_str()))
        .collect();
    assert!(
        roots
            .iter()
            .any(|(c, p)| *c == "11.8" && p.starts_with("nvidia-cuda-toolkit 11.8.")),
        "{roots:?}"
    );
    assert!(
        roots
            .iter()
            .any(|(c, p)| *c == "12.4" && p.starts_with("nvidia-cuda-toolkit 12.4.")),
        "{roots:?}"
    );
    let bookworm = report.rows.iter().find(|r| r.suite == "bookworm").unwrap();
    assert!(
        bookworm.host_compiler[0].starts_with("g++-11 "),
        "{bookworm:?}"
    );

    let text = std::fs::read_to_string(archsmith::paths::repo_root().join(KB_PATH)).unwrap();
    let planted = text
        .replacen("cuda = \"12.4\"\ninstall", "cuda = \"12.6\"\ninstall", 1)
        .replacen(
            "\"libcudart11.0\", ",
            "\"libcudart11.0\", \"nvidia-cuda-gdb\", ",
            1,
        );
    assert_ne!(planted, text, "the planted rows were not found");
    let wrong = KnowledgeBase::parse(&planted).unwrap();
    let report = check_debian(&wrong, false);
    let problems: Vec<&String> = report.rows.iter().flat_map(|r| &r.problems).collect();
    assert!(
        problems
            .iter()
            .any(|p| p.contains("not a CUDA 12.6 release")),
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p.contains("depends on nvidia-cuda-gdb")),
        "{problems:?}"
    );
    assert_eq!(report.exit(), Exit::Failed);
}
