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
    let code = match archsmith::commands::run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            2
        }
    };
    std::process::exit(code);
}
