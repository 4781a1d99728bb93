//! What every test suite shares: the mock model (`mock_model`), the tool
//! server (`tool_server`), the configuration builder (`config`) and real
//! MCP servers (`mcp_server`). A suite
//! includes this folder once (`#[path = "…/common/mod.rs"] mod common;`)
//! and uses the part it needs.

#![allow(dead_code)]

pub mod config;
pub mod mcp_server;
pub mod mock_model;
pub mod tool_server;
