//! Model providers behind one trait: a request in the canonical chat shape
//! goes in, a stream of [`ModelEvent`]s comes out.
//!
//! Providers translate wire formats and nothing else: they do not retry,
//! run tools or decide permissions (the orchestrator does). The `demo`
//! provider is deterministic and needs no network.

mod anthropic;
mod demo;
mod http1;
mod openai;
mod retry;
mod sse;
mod types;

use std::{collections::HashMap, pin::Pin, sync::Arc};

use async_trait::async_trait;
use futures::Stream;

use crate::config::{Config, ModelConfig, ProviderKind};

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

/// The providers of every configured model alias, built once at start-up:
/// one per alias with the model's own key, and one per tenant credential
/// (`tenants.credentials.<alias>`) with the tenant's key.
pub struct Providers {
    by_alias: HashMap<String, Arc<dyn ModelProvider>>,
    /// (tenant, alias) → a provider holding the tenant's own key.
    by_tenant: HashMap<(String, String), Arc<dyn ModelProvider>>,
}

impl Providers {
    pub fn from_config(config: &Config) -> Self {
        let by_alias = config.models.iter().map(|(alias, model)| (alias.clone(), build(model))).collect();
        let by_tenant = config
            .tenants
            .values()
            .flat_map(|tenant| {
                tenant.credentials.iter().filter_map(|(alias, key)| {
                    let model = ModelConfig { api_key: Some(key.clone()), ..config.models.get(alias)?.clone() };
                    Some(((tenant.id.clone(), alias.clone()), build(&model)))
                })
            })
            .collect();
        Self { by_alias, by_tenant }
    }

    /// The provider `tenant` calls the configured model `alias` (an alias or
    /// a pattern: see [`Config::model`]) through: its own key if it brought
    /// one, else the model's. A pattern's provider serves every id it
    /// matches: requests carry the upstream model id.
    pub fn get(&self, tenant: &str, alias: &str) -> Option<Arc<dyn ModelProvider>> {
        self.by_tenant.get(&(tenant.to_string(), alias.to_string())).or_else(|| self.by_alias.get(alias)).cloned()
    }
}

fn build(model: &ModelConfig) -> Arc<dyn ModelProvider> {
    match model.provider {
        ProviderKind::Demo => Arc::new(DemoProvider::default()),
        ProviderKind::OpenAiCompatible => Arc::new(OpenAiProvider::new(model)),
        ProviderKind::Anthropic => Arc::new(AnthropicProvider::new(model)),
    }
}
