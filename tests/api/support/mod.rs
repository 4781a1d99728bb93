//! Test doubles shared by the integration tests: scripted upstreams and
//! servers, and raw SSE with golden transcripts.
pub mod mock_upstream;
pub mod raw_sse;
pub mod runner;
pub mod tool_server;
