//! The fault-injection harness: real processes a test can break.
//!
//! | module | owns |
//! |---|---|
//! | `ports` | reserving a free loopback port for a child process |
//! | `process` | signals to children (`kill -STOP/-CONT/-TERM`), log tails |
//! | `lb` | `FirstLive`: a TCP load balancer sending each connection to the first replica that accepts it |
//! | `resp_proxy` | `HidingProxy`: a proxy to Redis whose `PUBSUB NUMSUB` sees no subscription |
//! | `store` | the store itself, opened on a test's own Redis or cluster |
//! | `redis` | `OwnRedis`: a redis-server of the test's own: freeze, thaw, kill, restart |
//! | `config` | the replica's configuration (with `test_config`, the builder all suites share); tokens its tenant accepts |
//! | `replica` | `Replica`: the `switchboard` binary as a child: kill -9, SIGTERM, restart |
//! | `mock_model` | the suites' one mock model (`tests/common/`): OpenAI and Anthropic streams, queued or computed replies |
//! | `upstream` | `DetUpstream`: the mock model answering a pure function of the request (and its scripts) |
//! | `tools` | `ToolServer` (shared with the API suite, `tests/common/`): records every tool call (ids, `Idempotency-Key`), slow on demand |
//! | `checks` | the acceptance checks of one turn, collected as failures rather than panics |
//! | `client` | `Follower`: a rejoining client (native API or llm-gateway); starting a turn on any replica |
//! | `transcript` | what a follower saw, and the checks on it (gapless, final text) |
//! | `sse` | the SSE parser the follower reads frames with |
//! | `cluster` | `Cluster`: Redis, upstream, tools and N replicas for one test |

pub mod checks;
pub mod client;
pub mod cluster;
pub mod config;
pub mod lb;
pub mod ports;
pub mod process;
pub mod redis;
pub mod redis_cluster;
pub mod replica;
pub mod resp_proxy;
pub mod sse;
pub mod store;
pub mod tls;
pub mod transcript;
pub mod upstream;

#[path = "../../common/mod.rs"]
mod common;
#[allow(unused_imports)] // the browser suite uses a part
pub use common::{config as test_config, mcp_server, mock_model, tool_server as tools};
