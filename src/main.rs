//! The `switchboard` binary: parse the command line and hand over to [`switchboard::cli`].

use clap::Parser;

/// jemalloc instead of the C library's allocator: under load glibc's malloc
/// and free took about a quarter of the gateway's CPU (the profile in
/// `load-tests/RESULTS.md`); with jemalloc the gateway spends 15 % less CPU
/// per token and the 1,000-stream tail of time to first token is 35-55 %
/// shorter, for 5-7 % more resident memory per open chat (mimalloc, also
/// measured there, saved less CPU and took 40 % more memory).
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    switchboard::cli::run(switchboard::cli::Cli::parse()).await
}
