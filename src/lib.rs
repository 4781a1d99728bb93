//! Switchboard: a multi-tenant session relay gateway for LLM agent sessions.
//!
//! Module map (what each owns):
//! - [`cli`]       — the command line: `serve`, `token`, `key`, `check-config`, `zot-rpc`.
//! - [`bridge`]    — `zot-rpc`: zot's stdio RPC relayed to a gateway, rejoining by seq.
//! - [`config`]    — raw TOML → validated [`config::Config`]; env overrides; secrets.
//! - [`app`]       — builds state, router and the one middleware stack; serve + shutdown.
//! - [`server`]    — the accept loop: hyper with header read timeout, TCP_NODELAY, graceful close.
//! - [`auth`]      — bearer JWT → [`auth::Principal`]; deny by default.
//! - [`cors`]      — browsers on other origins: the `CorsLayer` and per-tenant origins.
//! - [`error`]     — the API error type and the one place errors become responses.
//! - [`limits`]    — per-tenant request limits (local governor + global Redis); input bounds.
//! - [`domain`]    — what a session is: conversation, canonical events, typed codes, the
//!   `Session` and its transitions. Imports nothing from the modules below.
//! - [`api`]       — HTTP handlers, one file per dialect; thin. The session console's
//!   embedded page (`api/console/`).
//! - [`sessions`]  — the sessions service: commits, event hub, writer, ownership, takeover, drain.
//! - [`store`]     — persistence traits and their Redis and in-memory backends.
//! - [`protocol`]  — one encoder per dialect over the domain's events.
//! - [`orchestrator`] — the agent loop: model steps, tools, permissions, relays, subagents; one-shot
//!   model calls outside sessions (`/summarize`).
//! - [`tools`]     — server-side tools (HTTP, built-in demo) and the default workspace tools
//!   (`bash`, `read`, `patch`) with the skills they can read.
//! - [`sandbox`]   — runs one command in a workspace directory: bubblewrap (or none, for
//!   development), limits, timeout, output chunks, the kill of the process group.
//! - [`workspace`] — a session's files: materialised from the store on the replica that runs
//!   its turn, changes found and committed with the tool's result, seeds and templates.
//! - [`repl`]      — rlm mode's JavaScript REPL (QuickJS): cells, host calls on a tape, replay.
//! - [`providers`] — model providers behind one trait (demo, OpenAI-compatible, Anthropic).
//! - [`telemetry`] — logs, OpenTelemetry traces and Prometheus metrics.

pub mod api;
pub mod app;
pub mod auth;
pub mod bridge;
pub mod cli;
pub mod config;
pub mod cors;
pub mod domain;
pub mod error;
pub mod limits;
pub mod orchestrator;
pub mod protocol;
pub mod providers;
pub mod repl;
pub mod sandbox;
pub mod server;
pub mod sessions;
pub mod store;
pub mod telemetry;
pub mod tools;
pub mod workspace;
