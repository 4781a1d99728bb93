//! Test doubles shared by the integration tests: scripted upstreams and
//! servers, raw SSE with golden transcripts, and (shared with the fault and
//! browser suites, `tests/common/`) the mock model, the tool server and the
//! configuration builder.

pub mod raw_sse;
pub mod runner;

#[path = "../../common/mod.rs"]
mod common;
#[allow(unused_imports)] // the telemetry suite uses a part
pub use common::{config as test_config, mcp_server, mock_model as mock_upstream, tool_server};
