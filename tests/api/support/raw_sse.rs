//! Raw SSE responses and golden transcripts, shared by the dialect tests.
//!
//! Golden transcripts (`tests/api/golden/*`) hold the raw bytes of a
//! scripted conversation, with session ids, relay ids and timestamps
//! replaced by placeholders. After a deliberate change of a wire format,
//! regenerate them with `UPDATE_GOLDEN=1 cargo test --test api golden`, and
//! review the diff by hand against docs/protocols.md (see docs/sources.md,
//! "Reviewing a golden transcript") before
//! checking it in.

use std::{collections::BTreeSet, path::PathBuf};

use serde_json::Value;

use crate::{
    helpers::TestApp,
    sse::{Frame, STEP_TIMEOUT},
};

/// A response's SSE read as raw text, for golden transcripts; frames are
/// parsed from it for assertions.
pub struct RawSse {
    response: reqwest::Response,
    bytes: Vec<u8>,
}

impl RawSse {
    pub fn new(response: reqwest::Response) -> Self {
        assert!(response.status().is_success(), "expected a stream, got {}", response.status());
        Self { response, bytes: Vec::new() }
    }

    /// Reads one more chunk; `false` when the stream ended.
    async fn read(&mut self) -> bool {
        let chunk = tokio::time::timeout(STEP_TIMEOUT, self.response.chunk()).await.expect("a chunk in time");
        match chunk.expect("the stream reads cleanly") {
            Some(bytes) => {
                self.bytes.extend_from_slice(&bytes);
                true
            }
            None => false,
        }
    }

    /// Reads until a whole frame of type `event` has arrived, and returns it.
    pub async fn until_event(&mut self, event: &str) -> Frame {
        loop {
            if let Some(frame) = self.frames().into_iter().find(|f| f.event == event) {
                return frame;
            }
            assert!(self.read().await, "the stream ended before a {event} frame: {}", self.text());
        }
    }

    /// Reads until `done` holds for the frames read so far; returns them.
    pub async fn until(&mut self, done: impl Fn(&[Frame]) -> bool) -> Vec<Frame> {
        loop {
            let frames = self.frames();
            if done(&frames) {
                return frames;
            }
            assert!(self.read().await, "the stream ended first: {}", self.text());
        }
    }

    /// Reads to the end of the stream; returns all the text read.
    pub async fn rest(&mut self) -> String {
        while self.read().await {}
        self.text()
    }

    pub fn text(&self) -> String {
        String::from_utf8(self.bytes.clone()).expect("UTF-8 SSE")
    }

    /// The complete frames read so far (comments skipped).
    pub fn frames(&self) -> Vec<Frame> {
        let text = self.text();
        let mut frames = Vec::new();
        let mut blocks: Vec<&str> = text.split("\n\n").collect();
        blocks.pop(); // incomplete (or empty) tail
        for block in blocks {
            let (mut id, mut event, mut data) = (None, String::from("message"), String::new());
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("id: ").or_else(|| line.strip_prefix("id:")) {
                    id = v.parse().ok();
                } else if let Some(v) = line.strip_prefix("event: ").or_else(|| line.strip_prefix("event:")) {
                    event = v.to_string();
                } else if let Some(v) = line.strip_prefix("data: ").or_else(|| line.strip_prefix("data:")) {
                    data.push_str(v);
                }
            }
            if !data.is_empty() {
                let data = serde_json::from_str(&data).unwrap_or(Value::String(data));
                frames.push(Frame { id, event, data });
            }
        }
        frames
    }
}

/// Replaces run-specific values with placeholders: the given strings, every
/// `"ts":<digits>`, `"timestamp":<digits>` (AG-UI's) and `"durationMs":<digits>`
/// (rlm cells'), and every
/// `"time":"<string>"`. Heartbeat comments are dropped.
pub fn normalise(text: &str, replacements: &[(&str, &str)]) -> String {
    let mut out = text.replace("\r\n", "\n");
    for (from, to) in replacements {
        out = out.replace(from, to);
    }
    let mut timeless = String::with_capacity(out.len());
    let mut rest = out.as_str();
    while let Some(at) = rest.find("\"time\":\"") {
        let (head, tail) = rest.split_at(at + "\"time\":\"".len());
        timeless.push_str(head);
        timeless.push_str("<time>");
        rest = &tail[tail.find('"').unwrap_or(tail.len())..];
    }
    timeless.push_str(rest);
    let masked = mask_numbers(&mask_numbers(&mask_numbers(&timeless, "ts"), "timestamp"), "durationMs");
    masked.lines().filter(|l| !l.starts_with(':')).map(|l| format!("{l}\n")).collect()
}

/// Every `"<key>":<digits>` of `text` as `"<key>":"<<key>>"`.
fn mask_numbers(text: &str, key: &str) -> String {
    let field = format!("\"{key}\":");
    let mut masked = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(&field) {
        let (head, tail) = rest.split_at(at + field.len());
        masked.push_str(head);
        let digits = tail.chars().take_while(char::is_ascii_digit).count();
        if digits > 0 {
            masked.push_str(&format!("\"<{key}>\""));
        }
        rest = &tail[digits..];
    }
    masked.push_str(rest);
    masked
}

/// Compares `actual` with `tests/api/golden/<name>`, or writes it there
/// when `UPDATE_GOLDEN` is set.
pub fn assert_golden(name: &str, actual: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/api/golden").join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; run with UPDATE_GOLDEN=1 to create it", path.display()));
    if let Some((n, (want, got))) =
        expected.lines().zip(actual.lines()).enumerate().find(|(_, (want, got))| want != got)
    {
        panic!("{name} differs at line {}:\n  expected: {want}\n  actual:   {got}\nwhole actual:\n{actual}", n + 1);
    }
    assert_eq!(expected, actual, "{name} differs in length; whole actual:\n{actual}");
}

/// Every store key of `app`'s prefix (heartbeats aside).
pub async fn store_keys(app: &TestApp) -> BTreeSet<String> {
    crate::helpers::store_snapshot(app).await.into_keys().collect()
}
