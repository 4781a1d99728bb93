//! The REPL's behaviour through its public API: cells, scope, host calls,
//! replay, limits.

use std::time::Duration;

use super::*;
use crate::domain::rlm::ExecResult;

fn repl() -> Repl {
    Repl::start("the context".into(), Limits { cell_time: Duration::from_secs(2), ..Limits::default() }).unwrap()
}

/// Runs a cell, answering host calls with `answer`; returns the end and the
/// calls it made.
async fn run(
    repl: &Repl,
    code: &str,
    tape: Tape,
    live: bool,
    answer: impl Fn(&HostCall) -> HostResult,
) -> (CellEnd, Vec<HostCall>, Vec<String>) {
    let mut messages = repl.run(code, tape, live).unwrap();
    let (mut calls, mut printed) = (Vec::new(), Vec::new());
    loop {
        match tokio::time::timeout(Duration::from_secs(10), messages.recv()).await.unwrap().unwrap() {
            Message::Print { line, .. } => printed.push(line),
            Message::Call { call, reply, .. } => {
                let _ = reply.send(answer(&call));
                calls.push(call);
            }
            Message::Done(end) => return (end, calls, printed),
        }
    }
}

fn no_calls(call: &HostCall) -> HostResult {
    panic!("unexpected host call {call:?}")
}

#[tokio::test]
async fn scope_persists_across_cells_and_let_does_not() {
    let repl = repl();
    let (end, ..) = run(&repl, "scope.x = 41; let y = 1; console.log(context)", vec![], true, no_calls).await;
    assert_eq!(end.output.stdout, "the context");
    assert_eq!(end.output.error, None);
    let (end, ..) = run(&repl, "console.log(scope.x + 1, typeof y)", vec![], true, no_calls).await;
    assert_eq!(end.output.stdout, "42 undefined");
}

#[tokio::test]
async fn final_marks_the_cell_done_without_stopping_it() {
    let repl = repl();
    let (end, ..) = run(&repl, "FINAL(6 * 7); console.log('after')", vec![], true, no_calls).await;
    assert!(end.output.done);
    assert_eq!(end.output.answer.as_deref(), Some("42"));
    assert_eq!(end.output.stdout, "after");
}

#[tokio::test]
async fn errors_are_the_thrown_message() {
    let repl = repl();
    let (end, ..) = run(&repl, "console.log('a'); throw new Error('boom')", vec![], true, no_calls).await;
    assert_eq!(end.output.stdout, "a");
    assert_eq!(end.output.error.as_deref(), Some("boom"));
    let (end, ..) = run(&repl, "this is not javascript", vec![], true, no_calls).await;
    assert!(end.output.error.is_some());
}

#[tokio::test]
async fn host_calls_go_live_and_are_recorded_then_replay_from_the_tape() {
    let code = "const a = await llm_query('q', 'ctx'); const r = exec('echo hi'); \
                scope.t = Date.now(); console.log(a, r.stdout.trim(), r.exitCode)";
    let answer = |call: &HostCall| match call {
        HostCall::Query { prompt, context } => {
            assert_eq!((prompt.as_str(), context.as_deref()), ("q", Some("ctx")));
            HostResult::Query { result: Ok("answer".into()) }
        }
        HostCall::Exec { command, .. } => {
            assert_eq!(command, "echo hi");
            HostResult::Exec { result: Ok(ExecResult { stdout: "hi\n".into(), stderr: String::new(), exit_code: 0 }) }
        }
    };
    let (end, calls, printed) = run(&repl(), code, vec![], true, answer).await;
    assert_eq!(calls.len(), 2);
    assert_eq!(end.output.stdout, "answer hi 0");
    assert_eq!(printed, vec!["answer hi 0"]);
    assert_eq!(end.tape.len(), 3, "{:?}", end.tape);
    assert!(matches!(end.tape[2], HostResult::Time { .. }));

    // A fresh REPL replays the cell from its tape: no host call, no live
    // print, the same output and the same scope.
    let replica = repl();
    let (again, calls, printed) = run(&replica, code, end.tape.clone(), false, no_calls).await;
    assert!(calls.is_empty() && printed.is_empty());
    assert_eq!(again.output, CellOutput { duration_ms: again.output.duration_ms, ..end.output.clone() });
    assert_eq!(again.diverged, None);
    let (check, ..) = run(&replica, "console.log(scope.t)", vec![], true, no_calls).await;
    let HostResult::Time { ms } = end.tape[2] else { unreachable!() };
    assert_eq!(check.output.stdout, format!("{ms}"));
}

#[tokio::test]
async fn a_replay_that_calls_past_its_tape_diverges() {
    let (end, calls, _) = run(&repl(), "Math.random(); exec('x')", vec![], false, no_calls).await;
    assert!(calls.is_empty());
    assert!(end.diverged.is_some(), "{end:?}");
}

#[tokio::test]
async fn a_partial_tape_replays_then_goes_live() {
    let recorded = vec![HostResult::Query { result: Ok("first".into()) }];
    let answer = |_: &HostCall| HostResult::Query { result: Ok("second".into()) };
    let (end, calls, printed) =
        run(&repl(), "console.log('quiet'); console.log(llm_query('a'), llm_query('b'))", recorded, true, answer).await;
    assert_eq!(calls.len(), 1, "only the call past the tape is made");
    assert_eq!(end.output.stdout, "quiet\nfirst second");
    assert_eq!(printed, vec!["first second"], "lines of the replayed part are not printed again");
}

#[tokio::test]
async fn host_errors_throw_in_javascript() {
    let answer = |_: &HostCall| HostResult::Exec { result: Err("exec denied: no".into()) };
    let (end, ..) =
        run(&repl(), "try { exec('rm -rf /') } catch (e) { console.log(e.message) }", vec![], true, answer).await;
    assert_eq!(end.output.stdout, "exec denied: no");
}

#[tokio::test]
async fn a_runaway_cell_is_stopped_and_the_repl_goes_on() {
    let repl = repl();
    let (end, ..) = run(&repl, "scope.k = 1; while (true) {}", vec![], true, no_calls).await;
    assert!(end.output.error.as_deref().unwrap().contains("CPU time"), "{end:?}");
    let (end, ..) = run(&repl, "console.log(scope.k)", vec![], true, no_calls).await;
    assert_eq!(end.output.stdout, "1");
}

#[tokio::test]
async fn memory_is_limited() {
    let repl = Repl::start(String::new(), Limits { memory_bytes: 16 << 20, ..Limits::default() }).unwrap();
    let (end, ..) =
        run(&repl, "const a = []; while (true) a.push(new Array(100000).fill(1))", vec![], true, no_calls).await;
    assert!(end.output.error.as_deref().unwrap().contains("out of memory"), "{end:?}");
}

#[tokio::test]
async fn javascript_reaches_nothing_of_the_host() {
    let code = "console.log(typeof require, typeof process, typeof std, typeof os, typeof fetch, typeof setTimeout)";
    let (end, ..) = run(&repl(), code, vec![], true, no_calls).await;
    assert_eq!(end.output.stdout, "undefined undefined undefined undefined undefined undefined");
}

#[tokio::test]
async fn stdout_is_cut_at_the_limit() {
    let (end, ..) = run(&repl(), "console.log('x'.repeat(5000))", vec![], true, no_calls).await;
    assert!(end.output.truncated);
    assert_eq!(end.output.stdout, format!("{}\n...[truncated]", "x".repeat(4000)));
}

#[test]
fn a_reply_has_exactly_one_cell() {
    assert_eq!(extract("Let me look.\n```js\nconsole.log(1)\n```\n").unwrap(), "console.log(1)\n");
    assert_eq!(extract("```javascript\nx\n```").unwrap(), "x\n");
    assert!(extract("no code").unwrap_err().contains("no code block"));
    assert!(extract("```js\na\n```\n```js\nb\n```").unwrap_err().contains("multiple code blocks"));
    assert!(extract("```python\nprint(1)\n```").unwrap_err().contains("no code block"));
}
