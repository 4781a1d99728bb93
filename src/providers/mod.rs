//! Model providers behind one trait: a request in the canonical chat shape
//! goes in, a stream of [`ModelEvent`]s comes out.
//!
//! Providers translate wire formats and nothing else: they do not retry,
//! run tools or decide permissions (the orchestrator does). The `demo`
//! provider is deterministic and needs no network.

mod demo;
mod types;

use std::pin::Pin;

use async_trait::async_trait;
use futures::Stream;

pub use self::{demo::DemoProvider, types::*};

pub type ModelStream = Pin<Box<dyn Stream<Item = Result<ModelEvent, ProviderError>> + Send>>;

#[async_trait]
pub trait ModelProvider: Send + Sync {
    /// `openai`, `anthropic`, `demo`: the `gen_ai.provider.name` of its spans.
    fn name(&self) -> &'static str;

    /// Starts a streamed completion. Errors before the first event (refused
    /// connection, HTTP status) come back here, so callers can answer with a
    /// real status code; errors after it arrive in the stream.
    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, ProviderError>;
}

#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum ProviderError {
    #[error("upstream answered HTTP {status}")]
    Http { status: u16, retry_after: Option<u64>, message: String },
    #[error("upstream rate limit")]
    RateLimited { retry_after: Option<u64> },
    #[error("upstream timed out ({0})")]
    Timeout(&'static str),
    #[error("upstream connection lost: {0}")]
    Disconnected(String),
    #[error("upstream sent something unexpected: {0}")]
    Protocol(String),
}
