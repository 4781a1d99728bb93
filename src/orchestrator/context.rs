//! Context-window limits: token estimates, tool-result truncation, and the
//! compaction threshold (the numbers HolmesGPT uses).
//!
//! Tokens are estimated at four characters each: no tokenizer is shipped for
//! every provider, and the thresholds leave room for the error.

use crate::{config::ModelConfig, providers::ChatMessage};

/// A tool result may take at most this share of the context window…
const TOOL_RESULT_SHARE_PCT: u64 = 15;
/// …and never more than this many tokens.
const TOOL_RESULT_MAX_TOKENS: u64 = 25_000;
/// Compaction starts when prompt plus reserved output passes this share.
pub const COMPACTION_THRESHOLD_PCT: u64 = 95;
pub const TRUNCATION_MARKER: &str = "[TRUNCATED]";

pub fn estimate_text(text: &str) -> u64 {
    (text.chars().count() as u64).div_ceil(4)
}

pub fn estimate(messages: &[ChatMessage]) -> u64 {
    messages
        .iter()
        .map(|m| {
            let content = m.content.as_deref().map_or(0, estimate_text);
            let calls: u64 = m.tool_calls.iter().map(|c| estimate_text(&c.name) + estimate_text(&c.arguments)).sum();
            // A few tokens of framing per message.
            4 + content + calls
        })
        .sum()
}

/// The most tokens one tool result may keep.
pub fn tool_result_limit(model: &ModelConfig) -> u64 {
    (u64::from(model.context_window) * TOOL_RESULT_SHARE_PCT / 100).min(TOOL_RESULT_MAX_TOKENS)
}

/// Cuts `output` to `limit` tokens, ending it with the marker. Returns the
/// kept text, and, when cut, the character index of the cut and the
/// original token count.
pub fn truncate(output: &str, limit: u64) -> (String, Option<(usize, u64)>) {
    let original = estimate_text(output);
    if original <= limit {
        return (output.to_string(), None);
    }
    let marker_tokens = estimate_text(TRUNCATION_MARKER) + 1;
    let keep_chars = (limit.saturating_sub(marker_tokens) * 4) as usize;
    let kept: String = output.chars().take(keep_chars).collect();
    (format!("{kept}\n{TRUNCATION_MARKER}"), Some((keep_chars, original)))
}

/// Whether the prompt plus the reserved output passes the threshold.
pub fn needs_compaction(prompt_tokens: u64, model: &ModelConfig) -> bool {
    prompt_tokens + u64::from(model.max_output_tokens)
        > u64::from(model.context_window) * COMPACTION_THRESHOLD_PCT / 100
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_results_are_kept_whole() {
        assert_eq!(truncate("hello", 10), ("hello".to_string(), None));
    }

    #[test]
    fn long_results_are_cut_with_the_marker_within_the_limit() {
        let long = "x".repeat(4_000); // ~1000 tokens
        let (kept, cut) = truncate(&long, 100);
        assert!(kept.ends_with(TRUNCATION_MARKER));
        assert!(estimate_text(&kept) <= 100);
        let (end, original) = cut.unwrap();
        assert_eq!(original, 1_000);
        assert_eq!(kept[..end].len(), end);
    }
}
