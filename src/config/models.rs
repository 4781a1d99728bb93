//! Model aliases: what requests name, and the provider settings behind each.
//!
//! A configured key is an exact alias (any printable id without spaces:
//! `fast`, `openai/gpt-4o-mini`, `nvidia/nemotron-nano-9b-v2:free`) or a
//! pattern ending in `/*` (`openai/*`): a requested id `openai/X` that no
//! exact alias names is served by the pattern's provider with upstream
//! model id `X`. An exact alias wins; among patterns the longest prefix.

use std::{borrow::Cow, collections::BTreeMap, time::Duration};

use super::Secret;

/// The suffix that makes a configured key a pattern.
pub const PATTERN_SUFFIX: &str = "/*";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderKind {
    OpenAiCompatible,
    Anthropic,
    Demo,
}

#[derive(Debug, Clone)]
pub struct ModelConfig {
    /// The key it is configured under: an exact alias (`fast`,
    /// `openai/gpt-4o-mini`) or a pattern (`openai/*`). Metrics label calls
    /// with it, so a pattern's many ids are one label.
    pub alias: String,
    pub provider: ProviderKind,
    pub base_url: String,
    /// The host `base_url` names: its calls' `server.address` (parsed
    /// here once, not at every call).
    pub server_address: String,
    /// The provider's model id (what is sent upstream).
    pub model: String,
    pub api_key: Option<Secret>,
    pub context_window: u32,
    pub max_output_tokens: u32,
    pub resilience: Resilience,
    /// After a takeover, continue a step cut short from its last durable
    /// text (Anthropic prefill; `continue_final_message` on
    /// OpenAI-compatible servers that have it, such as vLLM) instead of
    /// generating it again.
    pub continue_partial: bool,
    /// Prices per million tokens, for `metadata.costs` (Holmes).
    pub prices: Option<Prices>,
    /// Speak HTTP/2 to a plain-HTTP `base_url` without asking first (prior
    /// knowledge: for model servers that speak h2c); `https` URLs
    /// negotiate HTTP/2 by ALPN anyway.
    pub http2: bool,
}

/// What a model's tokens cost, in dollars per million.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Prices {
    pub input_per_million: f64,
    pub output_per_million: f64,
}

impl Prices {
    /// The dollar cost of a call's tokens.
    pub fn cost(&self, input_tokens: u64, output_tokens: u64) -> f64 {
        (input_tokens as f64 * self.input_per_million + output_tokens as f64 * self.output_per_million) / 1e6
    }
}

/// How a provider guards each upstream call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resilience {
    /// TCP + TLS connect.
    pub connect_timeout: Duration,
    /// From sending the request to the first streamed event.
    pub first_byte_timeout: Duration,
    /// Longest silence between two streamed events.
    pub idle_timeout: Duration,
    /// Retries after the first attempt; only before the first event.
    pub max_retries: u32,
    /// First backoff; doubled per retry, with jitter. `Retry-After` wins
    /// when the upstream sends one.
    pub retry_base: Duration,
}

impl Default for Resilience {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(10),
            first_byte_timeout: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(60),
            max_retries: 2,
            retry_base: Duration::from_millis(250),
        }
    }
}

/// A model id as a request names it, resolved to its configuration.
#[derive(Debug, Clone)]
pub struct ResolvedModel<'a> {
    /// The configured key (alias or pattern): what tenants' `models` lists
    /// and provider keys are written against.
    pub key: &'a str,
    /// Its settings; for a pattern, with `model` set to the id's suffix.
    pub config: Cow<'a, ModelConfig>,
}

/// The prefix a pattern key matches (`openai/` for `openai/*`).
pub fn pattern_prefix(key: &str) -> Option<&str> {
    key.strip_suffix('*').filter(|prefix| prefix.ends_with('/') && !prefix[..prefix.len() - 1].contains('*'))
}

/// Resolves `id` against the configured models (see the module docs).
pub fn resolve<'a>(models: &'a BTreeMap<String, ModelConfig>, id: &str) -> Option<ResolvedModel<'a>> {
    let (key, config, suffix) = resolve_key(models, id)?;
    let config = match suffix {
        None => Cow::Borrowed(config),
        Some(suffix) => Cow::Owned(ModelConfig { model: suffix.to_string(), ..config.clone() }),
    };
    Some(ResolvedModel { key, config })
}

/// The entry of `map` that serves `id`: its key, its value and, for a
/// pattern, the suffix (the upstream model id). Any map keyed like
/// `[models]` resolves the same way.
pub fn resolve_key<'a, 'i, V>(map: &'a BTreeMap<String, V>, id: &'i str) -> Option<(&'a str, &'a V, Option<&'i str>)> {
    if pattern_prefix(id).is_some() {
        return None;
    }
    if let Some((key, value)) = map.get_key_value(id) {
        return Some((key, value, None));
    }
    map.iter()
        .filter_map(|(key, value)| {
            let suffix = id.strip_prefix(pattern_prefix(key)?)?;
            (!suffix.is_empty()).then_some((key.as_str(), value, Some(suffix)))
        })
        .max_by_key(|(key, _, _)| key.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(alias: &str, upstream: &str) -> ModelConfig {
        ModelConfig {
            alias: alias.into(),
            provider: ProviderKind::OpenAiCompatible,
            base_url: "http://x".into(),
            server_address: "x".into(),
            model: upstream.into(),
            api_key: None,
            context_window: 1000,
            max_output_tokens: 10,
            resilience: Resilience::default(),
            continue_partial: false,
            prices: None,
            http2: false,
        }
    }

    #[test]
    fn an_exact_alias_wins_over_a_pattern_and_the_longest_pattern_over_a_shorter_one() {
        let models: BTreeMap<String, ModelConfig> = [
            ("openai/*", ""),
            ("openai/gpt-4o-mini", "gpt-4o-mini-2024-07-18"),
            ("openai/o/*", ""),
            ("nvidia/nemotron-nano-9b-v2:free", "nemotron"),
        ]
        .into_iter()
        .map(|(k, m)| (k.to_string(), model(k, m)))
        .collect();
        let exact = resolve(&models, "openai/gpt-4o-mini").unwrap();
        assert_eq!((exact.key, exact.config.model.as_str()), ("openai/gpt-4o-mini", "gpt-4o-mini-2024-07-18"));
        let pattern = resolve(&models, "openai/gpt-5").unwrap();
        assert_eq!((pattern.key, pattern.config.model.as_str()), ("openai/*", "gpt-5"));
        assert_eq!(pattern.config.alias, "openai/*", "a pattern's calls share one metric label");
        let nested = resolve(&models, "openai/o/3").unwrap();
        assert_eq!((nested.key, nested.config.model.as_str()), ("openai/o/*", "3"));
        assert_eq!(resolve(&models, "nvidia/nemotron-nano-9b-v2:free").unwrap().config.model, "nemotron");
        assert!(resolve(&models, "openai/").is_none(), "a pattern needs a suffix");
        assert!(resolve(&models, "openai/*").is_none(), "a pattern is not a model id");
        assert!(resolve(&models, "anthropic/claude").is_none());
    }

    #[test]
    fn prices_are_per_million_tokens() {
        let prices = Prices { input_per_million: 0.15, output_per_million: 0.6 };
        assert!((prices.cost(1_000_000, 500_000) - 0.45).abs() < 1e-12);
    }
}
