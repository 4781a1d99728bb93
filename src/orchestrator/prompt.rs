//! The system prompt, built from named sections that requests may switch on
//! or off (Holmes `behavior_controls`), within what the `ENABLED_PROMPTS`
//! environment variable allows.
//!
//! Precedence (as in HolmesGPT): `ENABLED_PROMPTS` (a comma-separated list of
//! keys, or `none`) restricts; `behavior_controls` enables or disables within
//! that; by default every section is on except `ai_safety`. Unknown keys are
//! ignored with a warning.
//!
//! Also the section that carries a run's context (AG-UI's `context`), which
//! ends whichever system message the model gets.

use std::collections::BTreeMap;

use crate::domain::ContextEntry;

/// The first line of the context section.
pub const CONTEXT_HEADING: &str = "Context from the application:";

/// Every key Holmes defines. The user-prompt sections (`files`,
/// `todowrite_reminder`, `time_runbooks`) have no content here but are
/// accepted.
pub const SECTION_KEYS: &[&str] = &[
    "intro",
    "ask_user",
    "todowrite_instructions",
    "ai_safety",
    "toolset_instructions",
    "permission_errors",
    "general_instructions",
    "style_guide",
    "cluster_name",
    "system_prompt_additions",
    "files",
    "todowrite_reminder",
    "time_runbooks",
];

/// The system sections, in prompt order.
const SECTIONS: &[(&str, &str)] = &[
    ("intro", "You are an assistant reached through Switchboard. Answer the user's request accurately and concisely."),
    ("ask_user", "If the request is ambiguous, ask one short clarifying question instead of guessing."),
    ("todowrite_instructions", "For multi-step work, plan the steps before acting and keep to the plan."),
    ("ai_safety", "Refuse requests that would cause harm, and say why."),
    (
        "toolset_instructions",
        "Use the tools offered when they help. Call a tool with arguments that match its JSON schema.",
    ),
    (
        "permission_errors",
        "Some tool calls need permission. If one is denied, do not retry it unchanged: explain or choose another way.",
    ),
    ("general_instructions", "Base your answer on tool results and the conversation, not on assumptions."),
    ("style_guide", "Format answers in Markdown. Lead with the answer, then the details."),
];

/// Which sections are on by default.
fn default_on(key: &str) -> bool {
    key != "ai_safety"
}

/// Parses `ENABLED_PROMPTS`: `None` when unset (no restriction).
pub fn parse_enabled(value: Option<&str>) -> Option<Vec<String>> {
    let value = value?.trim();
    if value.eq_ignore_ascii_case("none") {
        return Some(Vec::new());
    }
    Some(value.split(',').map(|k| k.trim().to_string()).filter(|k| !k.is_empty()).collect())
}

/// The system prompt for these controls.
pub fn system_prompt(
    controls: &BTreeMap<String, bool>,
    enabled: Option<&[String]>,
    additional: Option<&str>,
) -> String {
    for key in controls.keys() {
        if !SECTION_KEYS.contains(&key.as_str()) {
            tracing::warn!(key, "unknown behavior_controls key ignored");
        }
    }
    let mut parts: Vec<&str> = SECTIONS
        .iter()
        .filter(|(key, _)| {
            let allowed = enabled.is_none_or(|list| list.iter().any(|k| k == key));
            allowed && controls.get(*key).copied().unwrap_or_else(|| default_on(key))
        })
        .map(|(_, text)| *text)
        .collect();
    if let Some(extra) = additional.filter(|s| !s.trim().is_empty()) {
        parts.push(extra);
    }
    parts.join("\n\n")
}

/// The context section for `entries` (`None` without any): the heading,
/// then `- <description>: <value>` per entry, in the client's order.
pub fn context_section(entries: &[ContextEntry]) -> Option<String> {
    if entries.is_empty() {
        return None;
    }
    let mut section = String::from(CONTEXT_HEADING);
    for entry in entries {
        section.push_str(&format!("\n- {}: {}", entry.description, entry.value));
    }
    Some(section)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_is_a_section_of_its_own_in_the_clients_order() {
        assert_eq!(context_section(&[]), None);
        let entries = [
            ContextEntry { description: "page".into(), value: "orders".into() },
            ContextEntry { description: "user".into(), value: "alice".into() },
        ];
        assert_eq!(context_section(&entries).unwrap(), "Context from the application:\n- page: orders\n- user: alice");
    }

    #[test]
    fn all_sections_but_safety_are_on_by_default() {
        let prompt = system_prompt(&BTreeMap::new(), None, Some("Be brief."));
        assert!(prompt.contains("Markdown"));
        assert!(!prompt.contains("Refuse requests"));
        assert!(prompt.ends_with("Be brief."));
    }

    #[test]
    fn controls_switch_sections_within_what_the_environment_allows() {
        let controls = BTreeMap::from([("style_guide".to_string(), false), ("ai_safety".to_string(), true)]);
        let prompt = system_prompt(&controls, None, None);
        assert!(!prompt.contains("Markdown"));
        assert!(prompt.contains("Refuse requests"));
        let enabled = parse_enabled(Some("intro,style_guide")).unwrap();
        let controls = BTreeMap::from([("ai_safety".to_string(), true)]);
        let prompt = system_prompt(&controls, Some(&enabled), None);
        assert!(prompt.contains("Markdown") && prompt.contains("Answer the user's"));
        assert!(!prompt.contains("Refuse requests"), "the environment restriction wins");
        assert_eq!(system_prompt(&BTreeMap::new(), parse_enabled(Some("none")).as_deref(), None), "");
    }
}
