use clap::Parser;

fn main() {
    let cli = archsmith::commands::Cli::parse();
    let code = match archsmith::commands::run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            2
        }
    };
    std::process::exit(code);
}
