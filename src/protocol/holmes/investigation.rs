//! Seed 001's investigations: the sections an answer is asked for (the
//! request's `sections`, else HolmesGPT's defaults), the structured-output
//! schema that asks the model for them, and how an answer is read back
//! into `sections` and `analysis` — as HolmesGPT's server does: a JSON
//! object of the sections (fences and a doubly encoded string tolerated;
//! `analysis` is then the sections as Markdown, `\n# Title\ncontent\n` each),
//! else Markdown split on `# Title` headings (`analysis` is the text).

use serde_json::{Map, Value, json};

use crate::domain::Section;

/// HolmesGPT's default sections (`DEFAULT_SECTIONS`), in its order.
const DEFAULT_SECTIONS: [(&str, &str); 7] = [
    (
        "Alert Explanation",
        "1-2 sentences explaining the alert itself - note don't say \"The alert indicates a warning event related to \
         a Kubernetes pod doing blah\" rather just say \"The pod XYZ did blah\" because that is what the user \
         actually cares about",
    ),
    ("Key Findings", "What you checked and found"),
    (
        "Conclusions and Possible Root causes",
        "What conclusions can you reach based on the data you found? what are possible root causes (if you have \
         enough conviction to say) or what uncertainty remains. Don't say root cause but 'possible root causes'. Be \
         clear to distinguish between what you know for certain and what is a possible explanation",
    ),
    (
        "Next Steps",
        "What you would do next to troubleshoot this issue, any commands that could be run to fix it, or other ways \
         to solve it (prefer giving precise bash commands when possible)",
    ),
    (
        "Related logs",
        "Truncate and share the most relevant logs, especially if these explain the root cause. For example: \n\
         Logs from pod robusta-holmes:\n```\n<logs>```\n. Always embed the surroundding +/- 5 log lines to any \
         relevant logs. ",
    ),
    (
        "App or Infra?",
        "Explain whether the issue is more likely an infrastructure or an application level issue and why you \
         think that.",
    ),
    (
        "External links",
        "Provide links to external sources and a short sentence describing each link. For example provide links to \
         relevant runbooks, etc. This section is a markdown formatted string.",
    ),
];

/// The sections of an investigation: the request's, else the defaults.
pub fn sections_or_default(requested: Option<Vec<Section>>) -> Vec<Section> {
    match requested.filter(|s| !s.is_empty()) {
        Some(sections) => sections,
        None => DEFAULT_SECTIONS
            .iter()
            .map(|(title, description)| Section { title: title.to_string(), description: description.to_string() })
            .collect(),
    }
}

/// The structured output that asks for `sections` (HolmesGPT's
/// `get_output_format_for_investigation`): each a string or null.
pub fn response_format(sections: &[Section]) -> Value {
    let properties: Map<String, Value> = (sections.iter())
        .map(|s| (s.title.clone(), json!({"type": ["string", "null"], "description": s.description})))
        .collect();
    let required: Vec<&str> = sections.iter().map(|s| s.title.as_str()).collect();
    json!({
        "type": "json_schema",
        "json_schema": {
            "name": "InvestigationResult",
            "schema": {
                "$schema": "http://json-schema.org/draft-07/schema#",
                "type": "object",
                "required": required,
                "properties": properties,
                "additionalProperties": false,
            },
            "strict": false,
        },
    })
}

/// What the system prompt adds for an investigation: the sections to
/// answer with, as JSON.
pub fn instructions(sections: &[Section]) -> String {
    let mut text = String::from(
        "You are investigating an issue. Use the tools to find out what happened and why. Answer with a JSON \
         object only, no other text, with exactly these keys (null for a section with nothing relevant):\n",
    );
    for section in sections {
        text.push_str(&format!("- \"{}\": {}\n", section.title, section.description));
    }
    text
}

/// `sections` and `analysis` of an investigation's answer.
pub fn sections_of(answer: &str, sections: &[Section]) -> (Value, String) {
    if let Some(object) = json_object(answer) {
        // The asked sections in their order, then any the model added.
        let asked = sections.iter().map(|s| (s.title.clone(), section_text(object.get(&s.title))));
        let added = (object.iter())
            .filter(|(key, _)| !sections.iter().any(|s| s.title == **key))
            .map(|(key, value)| (key.clone(), section_text(Some(value))));
        let ordered: Vec<(String, Value)> = asked.chain(added).collect();
        let analysis = (ordered.iter())
            .filter_map(|(title, content)| content.as_str().map(|c| format!("\n# {title}\n{c}\n")))
            .collect();
        return (Value::Object(ordered.into_iter().collect()), analysis);
    }
    (Value::Object(markdown_sections(answer)), answer.to_string())
}

/// The answer as a JSON object: bare, in a ``` fence, or a JSON string
/// that holds one.
fn json_object(answer: &str) -> Option<Map<String, Value>> {
    let trimmed = answer.trim();
    let unfenced = trimmed
        .strip_prefix("```json")
        .or_else(|| trimmed.strip_prefix("```"))
        .and_then(|rest| rest.trim_end().strip_suffix("```"))
        .unwrap_or(trimmed)
        .trim();
    match serde_json::from_str::<Value>(unfenced).ok()? {
        Value::Object(object) => Some(object),
        Value::String(inner) => json_object(&inner),
        _ => None,
    }
}

/// A section's value as text: a string; a list joined by blank lines
/// (empty: null); anything else as JSON; null stays null.
fn section_text(value: Option<&Value>) -> Value {
    match value {
        None | Some(Value::Null) => Value::Null,
        Some(Value::String(s)) => json!(s),
        Some(Value::Array(items)) if items.is_empty() => Value::Null,
        Some(Value::Array(items)) => {
            let parts: Vec<String> =
                items.iter().map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string)).collect();
            json!(parts.join("\n\n"))
        }
        Some(other) => json!(other.to_string()),
    }
}

/// Markdown split on `# Title` lines.
fn markdown_sections(answer: &str) -> Map<String, Value> {
    let mut out = Map::new();
    let mut current: Option<(String, Vec<&str>)> = None;
    for line in answer.lines() {
        if let Some(title) = line.strip_prefix("# ") {
            if let Some((title, body)) = current.take() {
                out.insert(title, json!(body.join("\n").trim()));
            }
            current = Some((title.trim().to_string(), Vec::new()));
        } else if let Some((_, body)) = &mut current {
            body.push(line);
        }
    }
    if let Some((title, body)) = current {
        out.insert(title, json!(body.join("\n").trim()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two() -> Vec<Section> {
        vec![
            Section { title: "Key Findings".into(), description: "what".into() },
            Section { title: "Next Steps".into(), description: "then".into() },
        ]
    }

    #[test]
    fn a_json_answer_fills_the_sections_and_the_analysis_is_their_markdown() {
        let answer = "```json\n{\"Key Findings\": \"OOMKilled\", \"Next Steps\": [\"raise limits\", \"profile\"]}\n```";
        let (sections, analysis) = sections_of(answer, &two());
        assert_eq!(sections, json!({"Key Findings": "OOMKilled", "Next Steps": "raise limits\n\nprofile"}));
        assert_eq!(analysis, "\n# Key Findings\nOOMKilled\n\n# Next Steps\nraise limits\n\nprofile\n");
        let encoded = serde_json::to_string(&json!({"Key Findings": null, "Next Steps": []}).to_string()).unwrap();
        let (sections, analysis) = sections_of(&encoded, &two());
        assert_eq!(sections, json!({"Key Findings": null, "Next Steps": null}));
        assert_eq!(analysis, "");
    }

    #[test]
    fn a_markdown_answer_is_split_on_headings_and_kept_as_the_analysis() {
        let answer = "# Key Findings\nThe pod ran out of memory.\n\n# Next Steps\nRaise the limit.";
        let (sections, analysis) = sections_of(answer, &two());
        assert_eq!(sections, json!({"Key Findings": "The pod ran out of memory.", "Next Steps": "Raise the limit."}));
        assert_eq!(analysis, answer);
    }

    #[test]
    fn the_schema_asks_for_every_section_as_a_string_or_null_and_defaults_are_holmes() {
        let format = response_format(&two());
        let schema = &format["json_schema"]["schema"];
        assert_eq!(schema["required"], json!(["Key Findings", "Next Steps"]));
        assert_eq!(schema["properties"]["Next Steps"]["type"], json!(["string", "null"]));
        assert_eq!(format["json_schema"]["name"], "InvestigationResult");
        let defaults = sections_or_default(None);
        assert_eq!(defaults.len(), 7);
        assert_eq!(defaults[0].title, "Alert Explanation");
    }
}
