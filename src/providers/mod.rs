//! Model providers behind one trait: a request in the canonical chat shape
//! goes in, a stream of [`ModelEvent`]s comes out.
//!
//! Providers translate wire formats and nothing else: they do not retry,
//! run tools or decide permissions (the orchestrator does). The `demo`
//! provider is deterministic and needs no network.

mod anthropic;
mod demo;
mod openai;
mod retry;
mod sse;
mod types;

use std::pin::Pin;

use async_trait::async_trait;
use futures::Stream;

pub use self::{anthropic::AnthropicProvider, demo::DemoProvider, openai::OpenAiProvider, types::*};

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

/// The providers of every configured model alias, built once at start-up.
pub struct Providers {
    by_alias: std::collections::HashMap<String, std::sync::Arc<dyn ModelProvider>>,
}

impl Providers {
    pub fn from_config(config: &crate::config::Config) -> Self {
        let by_alias = config
            .models
            .iter()
            .map(|(alias, model)| {
                let provider: std::sync::Arc<dyn ModelProvider> = match model.provider {
                    crate::config::ProviderKind::Demo => std::sync::Arc::new(DemoProvider::default()),
                    crate::config::ProviderKind::OpenAiCompatible => std::sync::Arc::new(OpenAiProvider::new(model)),
                    crate::config::ProviderKind::Anthropic => std::sync::Arc::new(AnthropicProvider::new(model)),
                };
                (alias.clone(), provider)
            })
            .collect();
        Self { by_alias }
    }

    pub fn get(&self, alias: &str) -> Option<std::sync::Arc<dyn ModelProvider>> {
        self.by_alias.get(alias).cloned()
    }
}
