use clap::{CommandFactory, FromArgMatches};

fn main() {
    // `cargo xtask …` in this repository, `archsmith …` where it is installed.
    let name = archsmith::commands::bin_name();
    let matches = archsmith::commands::Cli::command()
        .name(name)
        .bin_name(name)
        .get_matches();
    let cli = match archsmith::commands::Cli::from_arg_matches(&matches) {
        Ok(c) => c,
        Err(e) => e.exit(),
    };
    let json = std::env::args().any(|a| a == "--json");
    let code = match archsmith::paths::check_cache_dir()
        .and_then(|()| archsmith::commands::run(cli))
    {
        Ok(exit) => exit.code(),
        Err(e) => {
            eprintln!("error: {e:#}");
            // A CI script that asked for JSON gets a document on stdout, not an empty one.
            if json {
                let _ = archsmith::output::print_json(
                    archsmith::output::documents::ERROR,
                    &serde_json::json!({ "error": { "message": format!("{e:#}"), "exit_code": 2 } }),
                );
            }
            2
        }
    };
    std::process::exit(code);
}
