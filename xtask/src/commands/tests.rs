//! The command tree as users meet it: descriptions, flags, examples.

use super::*;
use clap::CommandFactory;

/// The commands a user runs: the leaves of the tree, with their names from the top.
fn leaves(cmd: &clap::Command, path: Vec<String>, out: &mut Vec<(Vec<String>, clap::Command)>) {
    let subs: Vec<_> = cmd
        .get_subcommands()
        .filter(|s| s.get_name() != "help" && !s.is_hide_set())
        .collect();
    if subs.is_empty() {
        out.push((path, cmd.clone()));
        return;
    }
    for s in subs {
        let mut p = path.clone();
        p.push(s.get_name().to_string());
        leaves(s, p, out);
    }
}

/// Every argument of every command says what it is, and a long flag means one kind of value
/// everywhere (`--python` an interpreter, `--torch` a release, …).
#[test]
fn every_flag_is_described_and_means_one_thing() {
    let mut all = Vec::new();
    leaves(&Cli::command(), Vec::new(), &mut all);
    let mut kinds: std::collections::BTreeMap<String, (String, String)> = Default::default();
    let mut problems = Vec::new();
    for (path, cmd) in &all {
        let name = path.join(" ");
        if cmd.get_about().is_none() && !cmd.is_hide_set() {
            problems.push(format!("`{name}` has no description"));
        }
        for arg in cmd.get_arguments() {
            let id = arg.get_id().as_str();
            if matches!(id, "help" | "version") || arg.is_hide_set() {
                continue;
            }
            if arg.get_help().is_none() {
                problems.push(format!("`{name}`: `{id}` has no description"));
            }
            let (Some(long), Some(values)) = (arg.get_long(), arg.get_value_names()) else {
                continue;
            };
            // The first form is the kind; a command may accept more (`--src DIR|pypi:…`).
            let kind = values
                .iter()
                .map(|v| v.as_str().split('|').next().unwrap_or(""))
                .collect::<Vec<_>>()
                .join(" ");
            match kinds.get(long) {
                Some((k, first)) if *k != kind => problems.push(format!(
                    "--{long} is {kind} in `{name}` but {k} in `{first}`"
                )),
                Some(_) => {}
                None => {
                    kinds.insert(long.to_string(), (kind, name.clone()));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Every command shows one example in its help; the example parses as that very command, and
/// docs/commands.md (README's list of every command) shows it too.
#[test]
fn every_command_has_an_example_that_parses_and_is_in_the_command_list() {
    let listed =
        std::fs::read_to_string(crate::paths::repo_root().join("docs/commands.md")).unwrap();
    let mut all = Vec::new();
    leaves(&Cli::command(), Vec::new(), &mut all);
    assert!(all.len() >= 18, "{} commands", all.len());
    for (path, cmd) in all {
        let name = path.join(" ");
        let help = cmd
            .get_after_help()
            .map(|h| h.to_string())
            .unwrap_or_default();
        let example = help
            .strip_prefix("Example:\n  ")
            .unwrap_or_else(|| panic!("`{name}` has no example in its help"));
        assert!(!example.contains('\n'), "`{name}`: one example");
        let words = shlex::split(example).unwrap();
        assert_eq!(words[0], "archsmith", "{example}");
        let matches = Cli::command()
            .try_get_matches_from(&words)
            .unwrap_or_else(|e| panic!("`{example}` does not parse: {e}"));
        let mut parsed = Vec::new();
        let mut m = &matches;
        while let Some((sub, next)) = m.subcommand() {
            parsed.push(sub.to_string());
            m = next;
        }
        assert_eq!(parsed, path, "`{example}` runs another command");
        assert!(
            listed.contains(example),
            "docs/commands.md lacks the example `{example}`"
        );
    }
}
