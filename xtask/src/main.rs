use clap::{CommandFactory, FromArgMatches};

fn main() {
    // `cargo xtask …` in this repository, `archsmith …` where it is installed.
    let name = archsmith::output::program();
    // A CI script that asked for JSON gets a document on stdout, not an empty one: for a usage
    // error as for any other.
    let json = std::env::args().any(|a| a == "--json");
    // `--format sarif` promises a SARIF log on stdout: on bad input too (CI uploads what it gets).
    let args: Vec<String> = std::env::args().collect();
    let sarif = args.iter().any(|a| a == "--format=sarif")
        || args
            .windows(2)
            .any(|w| w[0] == "--format" && w[1] == "sarif");
    let parsed = archsmith::commands::Cli::command()
        .name(name)
        .bin_name(name)
        .try_get_matches()
        .and_then(|m| archsmith::commands::Cli::from_arg_matches(&m));
    let cli = match parsed {
        Ok(c) => c,
        Err(e) => usage_error(e, json, sarif),
    };
    let code =
        match archsmith::paths::check_cache_dir().and_then(|()| archsmith::commands::run(cli)) {
            Ok(exit) => exit.code(),
            Err(e) => {
                archsmith::errln!("error: {e:#}");
                if json {
                    archsmith::output::print_error_document(&format!("{e:#}"));
                } else if sarif {
                    print_sarif_error(&format!("{e:#}"));
                }
                2
            }
        };
    std::process::exit(code);
}

fn print_sarif_error(message: &str) {
    let log = archsmith::lint::sarif_error(message);
    archsmith::outln!("{}", serde_json::to_string_pretty(&log).unwrap_or_default());
}

/// clap's own handling (help, version, usage errors with exit 2), with the error document on
/// stdout first under `--json` (a SARIF log under `--format sarif`).
fn usage_error(e: clap::Error, json: bool, sarif: bool) -> ! {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    // clap repeats a refused value whole; a 100 KB `--arch` is quoted bounded, as every other
    // error quotes input.
    if let Some(ContextValue::String(value)) = e.get(ContextKind::InvalidValue) {
        let bounded = archsmith::kb::user_input::echo(value);
        if bounded != *value {
            let text = e.render().to_string().replace(value.as_str(), &bounded);
            archsmith::errout!("{text}");
            if json {
                let first = text.lines().next().unwrap_or_default();
                archsmith::output::print_error_document(first.trim_start_matches("error: "));
            }
            std::process::exit(2);
        }
    }
    let shown = matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    );
    if (json || sarif) && !shown {
        let text = e.render().to_string();
        // clap's message without its usage and help lines, on one line.
        let message = text
            .lines()
            .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join(" ")
            .trim_start_matches("error: ")
            .to_string();
        if json {
            archsmith::output::print_error_document(&message);
        } else {
            print_sarif_error(&message);
        }
    }
    e.exit()
}
