//! All integration tests compile into this one binary (one link, shared
//! helpers). Each test spawns its own app(s) on port 0 with its own Redis key
//! prefix, so they run in parallel.

mod helpers;
mod sse;
mod support;

mod access;
mod ag_ui;
mod ai_sdk_clients;
mod ai_sdk_regenerate;
mod auth;
mod auth_keys;
mod clients;
mod config_cli;
mod cors;
mod credentials;
mod dialects;
mod docs_links;
mod first_turn;
mod fuzz;
mod h2c;
mod health;
mod holmes;
mod holmes_clients;
mod hostile_input;
mod isolation;
mod limits;
mod llm_gateway;
mod mcp;
mod metrics;
mod mock_upstream;
mod native_api;
mod orchestrator;
mod orchestrator_limits;
mod providers;
mod responses;
mod responses_kept;
mod restarts;
mod sandbox;
mod session_list;
mod sessions;
mod store_contract;
mod titles;
mod workspace_tools;
mod zot;
mod zot_bridge;
