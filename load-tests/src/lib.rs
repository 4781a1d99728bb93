//! Load benchmarks for switchboard. Run by hand (see `README.md`), never in
//! CI; results with their command lines live in `RESULTS.md`.
//!
//! The library holds what a benchmark binary needs: replicas of the real app
//! run in-process ([`cluster`]) with a turn runner that streams tokens as fast
//! as asked ([`runner`]), an SSE reader ([`sse`]), Redis introspection and
//! cleanup ([`redis_admin`]), facts about the machine ([`machine`]), the measured phases ([`raw`], [`turns`],
//! [`fanout`]), and statistics and Markdown helpers ([`stats`]); for the
//! scenarios against the gateway binary: the mock model ([`mock`]), the
//! processes ([`procs`]), chats as clients see them ([`streams`], [`load`],
//! [`sustain`], [`native`]).

pub mod cluster;
pub mod fanout;
pub mod load;
pub mod machine;
pub mod mock;
pub mod native;
pub mod procs;
pub mod raw;
pub mod redis_admin;
pub mod runner;
pub mod sse;
pub mod stats;
pub mod streams;
pub mod sustain;
pub mod turns;

/// Errors are reported, never handled: a message is all a benchmark needs.
pub type Error = Box<dyn std::error::Error + Send + Sync>;
pub type Result<T> = std::result::Result<T, Error>;

/// How a benchmark ends: its Markdown report on stdout and success, or its
/// error on stderr and failure.
pub fn exit(name: &str, report: Result<String>) -> std::process::ExitCode {
    match report {
        Ok(report) => {
            print!("{report}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{name}: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
