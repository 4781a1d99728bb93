//! Switchboard: a multi-tenant session relay gateway for LLM agent sessions.
//!
//! Module map, from the ground floor up (a module imports only from the
//! floors below it; `layering.rs` keeps it so, docs/architecture.md draws it):
//!
//! - [`domain`]    — what a session is: conversation, canonical events, typed codes, the
//!   `Session` and its transitions. Imports nothing else of the crate.
//! - [`config`]    — raw TOML → validated [`config::Config`]; env overrides; secrets; the
//!   registry of client dialects ([`config::Dialect`]: names, routes, error bodies).
//! - [`telemetry`] — logs, OpenTelemetry traces and Prometheus metrics.
//! - [`principal`] — who is calling: what the sessions service and the limits scope by.
//! - [`store`]     — persistence traits and their Redis and in-memory backends.
//! - [`sandbox`]   — runs one command in a workspace directory: bubblewrap (or none, for
//!   development), limits, timeout, output chunks, the kill of the process group.
//! - [`workspace`] — a session's files: materialised from the store on the replica that runs
//!   its turn, changes found and committed with the tool's result, seeds and templates.
//! - [`repl`]      — rlm mode's JavaScript REPL (QuickJS): cells, host calls on a tape, replay.
//! - [`providers`] — model providers behind one trait (demo, OpenAI-compatible, Anthropic).
//! - [`sessions`]  — the sessions service: commits, event hub, writer, ownership, takeover, drain.
//! - [`tools`]     — server-side tools (HTTP, built-in demo) and the default workspace tools
//!   (`bash`, `read`, `patch`) with the skills they can read.
//! - [`orchestrator`] — the agent loop: model steps, tools, permissions, relays, subagents; one-shot
//!   model calls outside sessions (`/summarize`).
//! - [`protocol`]  — one encoder per dialect over the domain's events.
//! - [`error`]     — the API error type and the one place errors become responses.
//! - [`cors`]      — browsers on other origins: the `CorsLayer` and per-tenant origins.
//! - [`auth`]      — a bearer JWT or an API key → a [`principal::Principal`]; deny by default.
//! - [`limits`]    — per-tenant request limits (local governor + global Redis); input bounds.
//! - [`state`]     — [`state::AppState`], what every handler can reach.
//! - [`api`]       — HTTP handlers, one folder or file per dialect; thin. The session console's
//!   embedded page (`api/console/`).
//! - [`server`]    — the accept loop: hyper with header read timeout, TCP_NODELAY, graceful close.
//! - [`app`]       — builds state, router and the one middleware stack; serve + shutdown.
//! - [`bridge`]    — `zot-rpc`: zot's stdio RPC relayed to a gateway, rejoining by seq.
//! - [`cli`]       — the command line: `serve`, `token`, `key`, `check-config`, `zot-rpc`.

pub mod api;
pub mod app;
pub mod auth;
pub mod bridge;
pub mod cli;
pub mod config;
pub mod cors;
pub mod domain;
pub mod error;
#[cfg(test)]
mod layering;
pub mod limits;
pub mod orchestrator;
pub mod principal;
pub mod protocol;
pub mod providers;
pub mod repl;
pub mod sandbox;
pub mod server;
pub mod sessions;
pub mod state;
pub mod store;
pub mod telemetry;
pub mod tools;
pub mod wake;
pub mod workspace;
