use clap::{CommandFactory, FromArgMatches};

fn main() {
    // `cargo xtask …` in this repository, `archsmith …` where it is installed.
    let name = archsmith::output::program();
    // A CI script that asked for JSON gets a document on stdout, not an empty one: for a usage
    // error as for any other.
    let json = std::env::args().any(|a| a == "--json");
    let parsed = archsmith::commands::Cli::command()
        .name(name)
        .bin_name(name)
        .try_get_matches()
        .and_then(|m| archsmith::commands::Cli::from_arg_matches(&m));
    let cli = match parsed {
        Ok(c) => c,
        Err(e) => usage_error(e, json),
    };
    let code =
        match archsmith::paths::check_cache_dir().and_then(|()| archsmith::commands::run(cli)) {
            Ok(exit) => exit.code(),
            Err(e) => {
                archsmith::errln!("error: {e:#}");
                if json {
                    archsmith::output::print_error_document(&format!("{e:#}"));
                }
                2
            }
        };
    std::process::exit(code);
}

/// clap's own handling (help, version, usage errors with exit 2), with the error document on
/// stdout first under `--json`.
fn usage_error(e: clap::Error, json: bool) -> ! {
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
    if json && !shown {
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
        archsmith::output::print_error_document(&message);
    }
    e.exit()
}
