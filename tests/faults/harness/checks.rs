//! The acceptance checks of one turn, from the client's and the tool
//! server's side. Each returns the failures it found as sentences instead of
//! panicking, so a test with many trials or sessions reports all of them.

use std::collections::BTreeMap;

use super::{tools::ToolCallRecord, transcript::Transcript, upstream::expected_answer};

/// What a turn must look like in the end.
pub struct Expect {
    /// The log is checked from here (the session's `last_seq` before the turn).
    pub cursor: u64,
    /// The answer is `w1 … w{words}`.
    pub words: u32,
}

/// How strictly the `Idempotency-Key` header is checked.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Keys {
    /// Every tool request carries `<session_id>:<tool_call_id>`.
    Required,
    /// A key that is there must be `<session_id>:<tool_call_id>` (the
    /// current binary sends none).
    IfPresent,
}

/// The turn ended `final`, its log is gapless, and the answer is complete.
pub fn turn(t: &Transcript, expect: &Expect) -> Vec<String> {
    let mut failures = Vec::new();
    if !t.finished {
        failures.push(format!(
            "the turn of {} did not end within the follower's deadline ({} log events seen; connections: {})",
            t.session_id,
            t.seqs().len(),
            t.describe_connections()
        ));
    }
    match t.turn_end_reason() {
        Some(reason) if reason == "final" => {}
        other => {
            let errors: Vec<String> = t.of_kind("error").map(|e| e.data.to_string()).collect();
            failures.push(format!("turn_ended reason is {other:?}, not \"final\" (error events: {errors:?})"));
        }
    }
    // A turn's stream starts at its `turn_started`: an event between the
    // cursor and it (the previous turn's title, committed after that turn's
    // follow ended at its `turn_ended`) is no turn's to stream. Every event
    // from `turn_started` on must come once, in order.
    let start = match t.log_events().next() {
        Some(first) if first.kind == "turn_started" => first.seq.map_or(expect.cursor, |s| (s - 1).max(expect.cursor)),
        _ => expect.cursor,
    };
    if let Err(e) = t.check_gapless_from(start) {
        failures.push(e);
    }
    let expected = expected_answer(expect.words);
    let text = t.final_text();
    if text.streamed != expected {
        failures.push(format!("the streamed answer is {:?}, expected {expected:?}", text.streamed));
    }
    if text.completed.as_deref() != Some(expected.as_str()) {
        failures.push(format!("the last message_completed.content is {:?}, expected {expected:?}", text.completed));
    }
    failures
}

/// Every tool that ran (per the tool server) is in the log with a
/// `tool_call` and a `tool_result`; a tool in `at_most_once` ran at most once
/// per call id; every run carried the expected `Idempotency-Key`, the same
/// as the call's first run.
pub fn tools(t: &Transcript, runs: &[ToolCallRecord], at_most_once: &[&str], keys: Keys) -> Vec<String> {
    let mut failures = Vec::new();
    let (calls, results) = (t.tool_call_ids("tool_call"), t.tool_call_ids("tool_result"));
    let mut by_id: BTreeMap<&str, Vec<&ToolCallRecord>> = BTreeMap::new();
    for run in runs {
        by_id.entry(run.tool_call_id.as_str()).or_default().push(run);
    }
    for (id, runs) in &by_id {
        let tool = &runs[0].tool;
        if !calls.iter().any(|c| c == id) {
            failures.push(format!("{tool} {id} ran but has no tool_call event in the log"));
        }
        if !results.iter().any(|c| c == id) {
            failures.push(format!("{tool} {id} ran but has no tool_result event in the log"));
        }
        if at_most_once.contains(&tool.as_str()) && runs.len() > 1 {
            failures.push(format!("{tool} (retry_on_takeover = false) ran {} times for {id}", runs.len()));
        }
        let expected = format!("{}:{id}", runs[0].session_id);
        for (n, run) in runs.iter().enumerate() {
            let key = run.idempotency_key.as_deref();
            let wrong = match (keys, key) {
                (Keys::Required, None) => true,
                (_, Some(key)) => key != expected,
                (Keys::IfPresent, None) => false,
            };
            if wrong {
                failures.push(format!(
                    "run {} of {tool} {id} carried Idempotency-Key {key:?}, expected {expected:?}{}",
                    n + 1,
                    if n > 0 {
                        format!(" (the first run carried {:?})", runs[0].idempotency_key)
                    } else {
                        String::new()
                    }
                ));
            }
        }
    }
    failures
}

/// How many times each tool ran, as `lookup×2 charge×1`.
pub fn run_counts(runs: &[ToolCallRecord]) -> String {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for run in runs {
        *counts.entry(run.tool.as_str()).or_default() += 1;
    }
    counts.iter().map(|(tool, n)| format!("{tool}×{n}")).collect::<Vec<_>>().join(" ")
}
