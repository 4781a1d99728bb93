//! Telemetry acceptance tests. They run in their own binary because they
//! install the process-wide tracing subscriber — an OTLP exporter pointed at
//! an in-process receiver, and JSON logs written to a buffer — which the API
//! tests must not share. The API tests' helpers and test doubles are reused.

// The shared helpers are used here only in part.
#![allow(dead_code)]

// (Its test macros too: the multi-replica tests are the API binary's.)
#[allow(unused_macros, unused_imports)]
#[path = "../api/helpers.rs"]
mod helpers;
#[path = "../api/sse.rs"]
mod sse;
#[path = "../api/support/mod.rs"]
mod support;

mod collector;
mod logs;
mod traces;
