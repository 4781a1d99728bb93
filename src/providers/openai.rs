//! OpenAI-compatible Chat Completions streaming (being written).

use async_trait::async_trait;

use super::{ModelProvider, ModelRequest, ModelStream, ProviderError};
use crate::config::ModelConfig;

pub struct OpenAiProvider {}

impl OpenAiProvider {
    pub fn new(_model: &ModelConfig) -> Self {
        Self {}
    }
}

#[async_trait]
impl ModelProvider for OpenAiProvider {
    fn name(&self) -> &'static str {
        "openai"
    }
    async fn stream(&self, _request: ModelRequest) -> Result<ModelStream, ProviderError> {
        Err(ProviderError::Protocol("not implemented yet".into()))
    }
}
