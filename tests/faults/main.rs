//! Fault-injection tests: real `switchboard` processes, each test with a
//! Redis of its own, killed, drained, frozen and restarted under running
//! turns, checked from the client's side (a gapless log, the complete
//! answer) and the tools' side (which calls ran, with which keys).
//!
//! Tests run in parallel: nothing is shared between them (ports, Redis,
//! temporary directories, key prefixes). `FAULT_TRIALS` sets the number of
//! kill -9 trials, `FAULT_SEED` pins their schedule, and `FAULT_RUST_LOG` is
//! the replicas' `RUST_LOG`.

// Not every test uses every method of the harness.
mod cluster_failover;
mod cluster_subscription;
mod coding_chat;
mod fast_takeover;
#[allow(dead_code)]
mod harness;
mod held_turn;
mod kill9_trials;
mod mcp_takeover;
// The browser suite's nginx, with the deployed configuration.
#[allow(dead_code)]
#[path = "../browser/nginx.rs"]
mod nginx;
mod redis_outage;
mod redis_tls;
mod responses_takeover;
mod rolling_restart;
mod store_error;
