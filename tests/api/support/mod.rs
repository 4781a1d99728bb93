//! Test doubles shared by the integration tests: scripted upstreams and
//! servers, raw SSE with golden transcripts, and (shared with the fault and
//! browser suites) the configuration builder.
#[allow(dead_code)]
#[path = "../../common/mock_model.rs"]
pub mod mock_upstream;
pub mod raw_sse;
pub mod runner;
// (Each suite uses its part of the builder.)
#[allow(dead_code)]
#[path = "../../common/config.rs"]
pub mod test_config;
#[allow(dead_code)]
#[path = "../../common/tool_server.rs"]
pub mod tool_server;
