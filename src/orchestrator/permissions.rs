//! Who may run which tool call: the tenant's policy (the tool's configured
//! `permission`), narrowed by the request's rules (llm-gateway's
//! `allowlist` / `allowOnce` / `deny`) and widened only by decisions the
//! client itself took during the session (`always: true`).
//!
//! The order:
//! 1. a request `deny` naming the call → deny;
//! 2. tenant policy `deny` → deny (no request rule can undo it);
//! 3. a session rule from an `always` decision matches → allow;
//! 4. an `allowOnce` rule matches → allow (and the rule is used up);
//! 5. an `allowlist` rule matches → allow;
//! 6. the request sent an `allowlist` and nothing matched → ask;
//! 7. otherwise the tenant policy: allow or ask.

use serde_json::Value;

use crate::{
    config::Permission,
    domain::{PermissionRules, ToolRule},
};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    Ask,
    Deny(String),
}

/// Decides one call. `rules` is mutable because an `allowOnce` rule is
/// consumed by the call it allows.
pub fn decide(
    policy: Permission,
    tool: &str,
    call_id: &str,
    arguments: &Value,
    rules: &mut PermissionRules,
    session_allow: &[ToolRule],
) -> Verdict {
    if let Some(rule) = rules.deny.iter().find(|d| d.tool_call_id == call_id) {
        return Verdict::Deny(rule.reason.clone().unwrap_or_else(|| "denied by the client".into()));
    }
    if policy == Permission::Deny {
        return Verdict::Deny(format!("the tool {tool} is not permitted for this tenant"));
    }
    if session_allow.iter().any(|rule| matches(rule, tool, arguments)) {
        return Verdict::Allow;
    }
    if let Some(i) = rules.allow_once.iter().position(|rule| matches(rule, tool, arguments)) {
        rules.allow_once.remove(i);
        return Verdict::Allow;
    }
    match &rules.allowlist {
        Some(list) if list.iter().any(|rule| matches(rule, tool, arguments)) => Verdict::Allow,
        Some(_) => Verdict::Ask,
        None => match policy {
            Permission::Allow => Verdict::Allow,
            _ => Verdict::Ask,
        },
    }
}

/// A rule matches a call of its tool whose arguments match every pattern.
pub fn matches(rule: &ToolRule, tool: &str, arguments: &Value) -> bool {
    rule.tool == tool
        && rule.params.iter().all(|(param, pattern)| {
            let Some(value) = arguments.get(param) else { return false };
            let text = match value {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            glob::Pattern::new(pattern).is_ok_and(|p| p.matches(&text))
        })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::domain::DenyRule;

    fn rule(tool: &str, params: &[(&str, &str)]) -> ToolRule {
        ToolRule { tool: tool.into(), params: params.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect() }
    }

    #[test]
    fn the_tenant_policy_decides_when_the_request_says_nothing() {
        let mut rules = PermissionRules::default();
        let args = json!({});
        assert_eq!(decide(Permission::Allow, "t", "c", &args, &mut rules, &[]), Verdict::Allow);
        assert_eq!(decide(Permission::Ask, "t", "c", &args, &mut rules, &[]), Verdict::Ask);
        assert!(matches!(decide(Permission::Deny, "t", "c", &args, &mut rules, &[]), Verdict::Deny(_)));
    }

    #[test]
    fn a_request_rule_cannot_allow_what_the_tenant_denies() {
        let mut rules = PermissionRules { allowlist: Some(vec![rule("rm", &[])]), ..Default::default() };
        rules.allow_once.push(rule("rm", &[]));
        let verdict = decide(Permission::Deny, "rm", "c", &json!({}), &mut rules, &[rule("rm", &[])]);
        assert!(matches!(verdict, Verdict::Deny(_)));
    }

    #[test]
    fn an_allowlist_narrows_allowed_tools_to_asking() {
        let mut rules = PermissionRules { allowlist: Some(vec![rule("ls", &[])]), ..Default::default() };
        assert_eq!(decide(Permission::Allow, "cat", "c", &json!({}), &mut rules, &[]), Verdict::Ask);
        assert_eq!(decide(Permission::Ask, "ls", "c", &json!({}), &mut rules, &[]), Verdict::Allow);
    }

    #[test]
    fn argument_globs_must_all_match() {
        let mut rules =
            PermissionRules { allowlist: Some(vec![rule("bash", &[("command", "ls *")])]), ..Default::default() };
        let ls = json!({"command": "ls -la"});
        let rm = json!({"command": "rm -rf /"});
        assert_eq!(decide(Permission::Ask, "bash", "c", &ls, &mut rules, &[]), Verdict::Allow);
        assert_eq!(decide(Permission::Ask, "bash", "c", &rm, &mut rules, &[]), Verdict::Ask);
    }

    #[test]
    fn allow_once_is_used_up_and_deny_names_a_call() {
        let mut rules = PermissionRules { allow_once: vec![rule("t", &[])], ..Default::default() };
        rules.deny.push(DenyRule { tool_call_id: "bad".into(), reason: Some("no".into()) });
        assert_eq!(decide(Permission::Ask, "t", "c1", &json!({}), &mut rules, &[]), Verdict::Allow);
        assert_eq!(decide(Permission::Ask, "t", "c2", &json!({}), &mut rules, &[]), Verdict::Ask);
        assert_eq!(decide(Permission::Allow, "t", "bad", &json!({}), &mut rules, &[]), Verdict::Deny("no".into()));
    }

    #[test]
    fn always_allows_the_first_word_of_each_argument() {
        let always = ToolRule::always("bash", &json!({"command": "ls -la /tmp"}));
        assert!(matches(&always, "bash", &json!({"command": "ls /etc"})));
        assert!(!matches(&always, "bash", &json!({"command": "rm -rf /"})));
        assert!(!matches(&always, "other", &json!({"command": "ls"})));
    }
}
