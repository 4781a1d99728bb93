//! Test doubles shared by the integration tests: scripted upstreams and servers.
pub mod mock_upstream;
pub mod runner;
pub mod tool_server;
