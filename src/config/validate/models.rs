//! `[models.<alias>]`: an exact alias or a `prefix/*` pattern, its provider,
//! limits and prices; and model ids that name one (`default_model`).

use std::{collections::BTreeMap, time::Duration};

use super::api_key;
use crate::config::{
    ConfigErrors, EnvLookup, ModelConfig, PATTERN_SUFFIX, Prices, ProviderKind, Resilience, models::resolve,
    pattern_prefix, raw::RawModel,
};

const DEFAULT_CONTEXT_WINDOW: u32 = 128_000;
const DEFAULT_MAX_OUTPUT_TOKENS: u32 = 4_096;
/// Longest model id: ids travel in requests, sessions and logs.
const MAX_MODEL_ID_LEN: usize = 256;

/// A model id as requests send it: printable, no spaces (`openai/gpt-4o-mini`,
/// `nvidia/nemotron-nano-9b-v2:free`, `claude@2024`).
pub fn is_model_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_MODEL_ID_LEN
        && id.chars().all(|c| if c.is_ascii() { c.is_ascii_graphic() } else { !c.is_whitespace() && !c.is_control() })
}

/// `id` must name a configured model (an alias, or an id a pattern serves)
/// that `tenant_models`, when given, allows.
pub fn check_model_id(
    errors: &mut ConfigErrors,
    path: &str,
    id: &str,
    models: &BTreeMap<String, ModelConfig>,
    tenant_models: Option<&[String]>,
) {
    match resolve(models, id) {
        None => errors.push(path, format!("{id:?} is not a configured model alias, nor served by a pattern")),
        Some(resolved) if tenant_models.is_some_and(|list| !list.iter().any(|m| m == resolved.key)) => {
            errors.push(path, format!("{:?} is not in this tenant's models", resolved.key));
        }
        Some(_) => {}
    }
}

pub(super) fn validate_model(
    errors: &mut ConfigErrors,
    path: &str,
    alias: &str,
    raw: RawModel,
    env: EnvLookup<'_>,
) -> Option<ModelConfig> {
    let pattern = alias.ends_with(PATTERN_SUFFIX);
    if !is_model_id(alias) {
        errors.push(path, format!("{alias:?} is not a model id: 1-{MAX_MODEL_ID_LEN} printable characters, no spaces"));
    } else if alias.contains('*') && (!pattern || pattern_prefix(alias).is_none_or(|p| p.len() < 2)) {
        errors.push(path, "a pattern is `prefix/*`, with a prefix and no other `*`");
    }
    let provider = match raw.provider.as_deref() {
        Some("openai") | Some("openai-compatible") => ProviderKind::OpenAiCompatible,
        Some("anthropic") => ProviderKind::Anthropic,
        Some("demo") => ProviderKind::Demo,
        Some(other) => {
            errors.push(
                format!("{path}.provider"),
                format!("unknown provider {other:?}; expected openai-compatible, anthropic or demo"),
            );
            return None;
        }
        None => {
            errors.push(format!("{path}.provider"), "required");
            return None;
        }
    };
    let base_url = match (provider, raw.base_url) {
        (_, Some(url)) => {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                errors.push(format!("{path}.base_url"), "must be an http:// or https:// URL");
            }
            url.trim_end_matches('/').to_string()
        }
        (ProviderKind::OpenAiCompatible, None) => "https://api.openai.com/v1".to_string(),
        (ProviderKind::Anthropic, None) => "https://api.anthropic.com/v1".to_string(),
        (ProviderKind::Demo, None) => String::new(),
    };
    let model = match (provider, raw.model) {
        (_, Some(_)) if pattern => {
            errors.push(format!("{path}.model"), "a pattern takes the upstream model id from the requested id");
            String::new()
        }
        (ProviderKind::Demo, _) if pattern => {
            errors.push(format!("{path}.provider"), "the demo provider has one model; a pattern cannot use it");
            String::new()
        }
        (_, Some(m)) => m,
        (ProviderKind::Demo, None) => "demo".to_string(),
        (_, None) if pattern => String::new(),
        (_, None) => {
            errors.push(format!("{path}.model"), "required for this provider");
            String::new()
        }
    };
    let api_key = api_key(errors, path, raw.api_key_env, raw.api_key_file, env);
    if api_key.is_some() && provider == ProviderKind::Demo {
        errors.push(path, "the demo provider takes no API key");
    }
    let context_window = raw.context_window.unwrap_or(DEFAULT_CONTEXT_WINDOW);
    let max_output_tokens = raw.max_output_tokens.unwrap_or(DEFAULT_MAX_OUTPUT_TOKENS);
    if max_output_tokens >= context_window {
        errors.push(format!("{path}.max_output_tokens"), "must be smaller than context_window");
    }
    Some(ModelConfig {
        alias: alias.to_string(),
        provider,
        server_address: reqwest::Url::parse(&base_url)
            .ok()
            .and_then(|url| url.host_str().map(str::to_string))
            .unwrap_or_default(),
        base_url,
        model,
        api_key,
        context_window,
        max_output_tokens,
        resilience: {
            let d = Resilience::default();
            Resilience {
                connect_timeout: raw.connect_timeout_secs.map_or(d.connect_timeout, Duration::from_secs),
                first_byte_timeout: raw.first_byte_timeout_secs.map_or(d.first_byte_timeout, Duration::from_secs),
                idle_timeout: raw.idle_timeout_secs.map_or(d.idle_timeout, Duration::from_secs),
                max_retries: raw.max_retries.unwrap_or(d.max_retries),
                retry_base: raw.retry_base_ms.map_or(d.retry_base, Duration::from_millis),
            }
        },
        continue_partial: raw.continue_partial.unwrap_or(false),
        http2: raw.http2.unwrap_or(false),
        prices: raw.prices.and_then(|prices| {
            let mut price = |field: &str, value: Option<f64>| match value {
                Some(v) if v.is_finite() && v >= 0.0 => Some(v),
                Some(_) => {
                    errors.push(format!("{path}.prices.{field}"), "must be a number of dollars, 0 or more");
                    None
                }
                None => {
                    errors.push(format!("{path}.prices.{field}"), "required (dollars per million tokens)");
                    None
                }
            };
            let input = price("input_per_million", prices.input_per_million);
            let output = price("output_per_million", prices.output_per_million);
            Some(Prices { input_per_million: input?, output_per_million: output? })
        }),
    })
}
