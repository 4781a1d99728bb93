//! The benchmark's model as a process of its own (see `mock.rs`), so its CPU
//! and memory are measured apart from the gateway's and the generator's.
//!
//! ```sh
//! mock_upstream [--listen 127.0.0.1:0]
//! ```
//! Prints `listening on ADDR` as its first line. Speaks HTTP/1.1 and h2c
//! (prior knowledge) on the same port.

use clap::Parser;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: String,
}

#[tokio::main]
async fn main() -> switchboard_load::Result<()> {
    let args = Args::parse();
    let listener = tokio::net::TcpListener::bind(&args.listen).await?;
    println!("listening on {}", listener.local_addr()?);
    switchboard_load::mock::serve(listener).await
}
