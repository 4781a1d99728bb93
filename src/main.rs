//! The `switchboard` binary: parse the command line and hand over to [`switchboard::cli`].

use clap::Parser;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    switchboard::cli::run(switchboard::cli::Cli::parse()).await
}
