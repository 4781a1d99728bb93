//! Request bodies of the Holmes routes, parsed as HolmesGPT's FastAPI
//! server validates them: a body that is not JSON, a field of the wrong
//! type or a missing required field is a 422 whose body lists the field as
//! pydantic does (`loc`, `msg`, `type`); unknown fields are ignored.

use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::error::{ApiError, FieldError};

/// Parses `body` as `T`, ignoring unknown fields (logged at debug).
pub fn parse<T: DeserializeOwned>(body: &[u8], route: &str) -> Result<T, ApiError> {
    let mut ignored = Vec::new();
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let mut note = |path: serde_ignored::Path<'_>| ignored.push(path.to_string());
    let unknown = serde_ignored::Deserializer::new(&mut deserializer, &mut note);
    let parsed: T = serde_path_to_error::deserialize(unknown).map_err(|e| {
        let loc = location(e.path());
        let inner = e.into_inner();
        match inner.classify() {
            serde_json::error::Category::Data => ApiError::invalid_field(field_error(loc, &inner)),
            _ => json_invalid(&inner),
        }
    })?;
    deserializer.end().map_err(|e| json_invalid(&e))?;
    if !ignored.is_empty() {
        tracing::debug!(fields = ?ignored, route, "ignored unknown request fields");
    }
    Ok(parsed)
}

/// FastAPI's answer to a body that is not JSON: `json_invalid` at the
/// byte offset where decoding failed.
fn json_invalid(error: &serde_json::Error) -> ApiError {
    let mut invalid = ApiError::invalid_field(FieldError {
        loc: vec![json!("body"), json!(error.column())],
        msg: "JSON decode error".into(),
        kind: "json_invalid".into(),
    });
    invalid.message = format!("the body is not valid JSON: {error}");
    invalid
}

/// `["body", "tool_decisions", 0, "approved"]` for serde's path.
fn location(path: &serde_path_to_error::Path) -> Vec<Value> {
    use serde_path_to_error::Segment;
    let mut loc = vec![json!("body")];
    for segment in path.iter() {
        match segment {
            Segment::Seq { index } => loc.push(json!(index)),
            Segment::Map { key } => loc.push(json!(key)),
            Segment::Enum { variant } => loc.push(json!(variant)),
            Segment::Unknown => {}
        }
    }
    loc
}

/// pydantic's `msg` and `type` for a serde data error.
fn field_error(mut loc: Vec<Value>, error: &serde_json::Error) -> FieldError {
    let text = error.to_string();
    let text = text.split(" at line ").next().unwrap_or(&text).to_string();
    if let Some(field) = text.strip_prefix("missing field `").and_then(|rest| rest.split('`').next()) {
        loc.push(json!(field));
        return FieldError { loc, msg: "Field required".into(), kind: "missing".into() };
    }
    let expected = text.rsplit(", expected ").next().unwrap_or_default();
    let (kind, what) = if !text.starts_with("invalid type") {
        ("value_error", None)
    } else if expected.contains("boolean") {
        ("bool_type", Some("a valid boolean"))
    } else if expected.contains("string") {
        ("string_type", Some("a valid string"))
    } else if ["integer", "u8", "u16", "u32", "u64", "i32", "i64", "usize"].iter().any(|t| expected.contains(t)) {
        ("int_type", Some("a valid integer"))
    } else if expected.contains("float") || expected.contains("f64") {
        ("float_type", Some("a valid number"))
    } else if expected.contains("sequence") {
        ("list_type", Some("a valid list"))
    } else if expected.contains("map") || expected.contains("struct") {
        ("dict_type", Some("a valid dictionary"))
    } else {
        ("value_error", None)
    };
    let msg = match what {
        Some(what) => format!("Input should be {what}"),
        None => text,
    };
    FieldError { loc, msg, kind: kind.into() }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[allow(dead_code)]
    #[derive(Debug, Deserialize)]
    struct Body {
        ask: String,
        #[serde(default)]
        stream: bool,
        #[serde(default)]
        decisions: Vec<Decision>,
    }

    #[allow(dead_code)]
    #[derive(Debug, Deserialize)]
    struct Decision {
        approved: bool,
    }

    fn refused(body: &str) -> FieldError {
        *parse::<Body>(body.as_bytes(), "test").unwrap_err().field.unwrap()
    }

    #[test]
    fn failures_are_listed_as_pydantic_lists_them() {
        let missing = refused(r#"{"stream": true}"#);
        assert_eq!(
            (missing.loc, missing.msg.as_str(), missing.kind.as_str()),
            (vec![json!("body"), json!("ask")], "Field required", "missing")
        );
        let wrong = refused(r#"{"ask": "x", "decisions": [{"approved": "yes"}]}"#);
        assert_eq!(wrong.loc, vec![json!("body"), json!("decisions"), json!(0), json!("approved")]);
        assert_eq!((wrong.msg.as_str(), wrong.kind.as_str()), ("Input should be a valid boolean", "bool_type"));
        assert_eq!(refused(r#"{"ask": 5}"#).kind, "string_type");
        assert_eq!(refused(r#"{"ask": "x", "decisions": {}}"#).kind, "list_type");
        let invalid = refused(r#"{"ask": "#);
        assert_eq!((invalid.kind.as_str(), &invalid.loc[0]), ("json_invalid", &json!("body")));
        assert_eq!(refused(r#"{"ask": "x"} trailing"#).kind, "json_invalid");
        assert!(parse::<Body>(br#"{"ask": "x", "unknown": 1}"#, "test").is_ok());
    }

    #[test]
    fn the_message_names_the_path() {
        let error = parse::<Body>(br#"{"ask": "x", "decisions": [{"approved": 1}]}"#, "test").unwrap_err();
        assert_eq!(error.message, "decisions[0].approved: Input should be a valid boolean");
    }
}
