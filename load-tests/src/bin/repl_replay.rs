//! rlm mode: what rebuilding a REPL by replay costs per cell, against the
//! same cells run live in the same process (the baseline).
//!
//! For each kind of cell, a session's worth of cells (`--cells`) is run live
//! on one REPL (host calls answered at once, in process: no model, no
//! command) and then replayed on a fresh REPL from the recorded tapes, as a
//! replica does after a takeover. Reported: per-cell wall time of the live
//! run and of the replay (p50/p99), and the time to start a REPL. No Redis,
//! no HTTP: the store's read of the cells is the session read every
//! takeover makes anyway, measured elsewhere.
//!
//! `cargo run --release -p switchboard-load --bin repl_replay`

use std::time::{Duration, Instant};

use clap::Parser;
use switchboard::{
    domain::rlm::{ExecResult, HostResult, Tape},
    repl::{HostCall, Limits, Message, Repl},
};
use switchboard_load::{
    machine::Context,
    stats::{Summary, millis},
};

#[derive(Parser)]
struct Args {
    /// Cells per session (each kind).
    #[arg(long, default_value_t = 50)]
    cells: usize,
    /// Sessions per kind (a fresh REPL each).
    #[arg(long, default_value_t = 20)]
    sessions: usize,
}

/// The kinds of cells measured: (name, code). `{i}` is the cell's index.
const KINDS: &[(&str, &str)] = &[
    ("print one line", "scope.n = (scope.n || 0) + 1; console.log('cell', scope.n)"),
    (
        "parse 100 KB of context",
        "const words = context.split(' '); scope.count = words.length; console.log(words.length, words[3])",
    ),
    (
        "3 host calls (llm_query, exec, random)",
        "const a = await llm_query('q' + Math.random()); const r = exec('ls'); console.log(a.length, r.exitCode)",
    ),
    ("loop 100k iterations", "let s = 0; for (let k = 0; k < 100000; k++) { s += k % 7 } scope.s = s; console.log(s)"),
];

async fn run(repl: &Repl, code: &str, tape: Tape, live: bool) -> (Tape, String, Duration) {
    let started = Instant::now();
    let mut messages = repl.run(code, tape, live).expect("the REPL runs");
    loop {
        match messages.recv().await.expect("the cell ends") {
            Message::Print { .. } => {}
            Message::Call { call, reply, .. } => {
                let result = match call {
                    HostCall::Query { .. } => HostResult::Query { result: Ok("an answer".into()) },
                    HostCall::Exec { .. } => HostResult::Exec {
                        result: Ok(ExecResult { stdout: "a\nb\n".into(), stderr: String::new(), exit_code: 0 }),
                    },
                };
                let _ = reply.send(result);
            }
            Message::Done(end) => {
                assert!(end.diverged.is_none() && end.output.error.is_none(), "{end:?}");
                return (end.tape, end.output.stdout, started.elapsed());
            }
        }
    }
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let mut context = Context::gather();
    let text: String = (0..20_000).map(|i| format!("w{i} ")).collect();
    println!("{} cells × {} sessions per kind\n", args.cells, args.sessions);
    println!("| cell | live p50 / p99 (ms) | replay p50 / p99 (ms) | replay ÷ live (p50) |");
    println!("|---|---:|---:|---:|");
    let mut starts = Vec::new();
    for (name, code) in KINDS {
        let (mut live, mut replay) = (Vec::new(), Vec::new());
        for _ in 0..args.sessions {
            let started = Instant::now();
            let first = Repl::start(text.clone(), Limits::default()).expect("a REPL");
            // Started: its thread has a runtime, a context and the globals,
            // and has run an empty cell.
            run(&first, "", Vec::new(), true).await;
            starts.push(millis(started.elapsed()));
            let mut recorded = Vec::new();
            for _ in 0..args.cells {
                let (tape, stdout, took) = run(&first, code, Vec::new(), true).await;
                live.push(millis(took));
                recorded.push((tape, stdout));
            }
            let second = Repl::start(text.clone(), Limits::default()).expect("a REPL");
            for (tape, stdout) in recorded {
                let (_, again, took) = run(&second, code, tape, false).await;
                assert_eq!(again, stdout, "a replay prints what the cell printed");
                replay.push(millis(took));
            }
        }
        let (live, replay) = (Summary::of(live).unwrap(), Summary::of(replay).unwrap());
        println!(
            "| {name} | {:.3} / {:.3} | {:.3} / {:.3} | {:.2} |",
            live.p50,
            live.p99,
            replay.p50,
            replay.p99,
            replay.p50 / live.p50
        );
    }
    let starts = Summary::of(starts).unwrap();
    println!(
        "\nREPL start (thread, runtime, context, globals, an empty cell): p50 {:.3} ms, p99 {:.3} ms",
        starts.p50, starts.p99
    );
    context.finish();
    let mut header = String::new();
    context.write_header(&mut header, "REPL replay", "(none: no Redis used)");
    println!("\n{header}");
}
