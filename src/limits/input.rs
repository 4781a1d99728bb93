//! Hostile input: bounds on what a client may send, checked before anything
//! is parsed into a request, so an oversized, deeply nested or trickled
//! request never reaches a handler, the store or a model.
//!
//! - [`headers`] — header count and total size (431), ahead of auth.
//! - [`body`] — the body is read here, with `server.body_read_timeout_secs`
//!   for the whole of it (408: a client trickling bytes cannot hold a task
//!   forever) and `server.max_body_bytes` (413); then its JSON shape is
//!   checked: nesting depth and string length, and that it is not a top-level
//!   array (400). Handlers get the buffered body back.
//!
//! The header read timeout itself is a connection setting (`server.rs`).

use axum::{
    body::{Body, Bytes},
    extract::{Request, State},
    http::header,
    middleware::Next,
    response::Response,
};
use http_body_util::{BodyExt as _, LengthLimitError, Limited};

use crate::{
    config::InputLimits,
    error::{ApiError, ErrorCode},
};

/// Refuses requests with more headers, or more header bytes, than allowed.
pub async fn headers(State(limits): State<InputLimits>, request: Request, next: Next) -> Result<Response, ApiError> {
    let headers = request.headers();
    if headers.len() > limits.max_header_count {
        return Err(ApiError::new(
            ErrorCode::HeadersTooLarge,
            format!("more than {} request headers", limits.max_header_count),
        ));
    }
    let bytes: usize = headers.iter().map(|(name, value)| name.as_str().len() + value.len()).sum();
    if bytes > limits.max_header_bytes {
        return Err(ApiError::new(
            ErrorCode::HeadersTooLarge,
            format!("request headers larger than {} bytes", limits.max_header_bytes),
        ));
    }
    Ok(next.run(request).await)
}

/// Reads the body within the deadline and size limit, checks its JSON
/// shape, and passes the request on with the buffered body.
pub async fn body(State(limits): State<InputLimits>, request: Request, next: Next) -> Result<Response, ApiError> {
    let (parts, body) = request.into_parts();
    let declared = parts.headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|len| len > limits.max_body_bytes as u64) {
        return Err(too_large(&limits));
    }
    let bytes = read(body, &limits).await?;
    check_json_shape(&bytes, &limits)?;
    Ok(next.run(Request::from_parts(parts, Body::from(bytes))).await)
}

async fn read(body: Body, limits: &InputLimits) -> Result<Bytes, ApiError> {
    let collect = Limited::new(body, limits.max_body_bytes).collect();
    match tokio::time::timeout(limits.body_read_timeout, collect).await {
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(e)) if e.is::<LengthLimitError>() => Err(too_large(limits)),
        Ok(Err(e)) => Err(ApiError::bad_request("the request body could not be read").with_detail(e)),
        Err(_) => Err(ApiError::new(
            ErrorCode::RequestTimeout,
            format!("the request body did not arrive within {} s", limits.body_read_timeout.as_secs()),
        )),
    }
}

fn too_large(limits: &InputLimits) -> ApiError {
    ApiError::new(
        ErrorCode::PayloadTooLarge,
        format!("the request body is larger than {} bytes", limits.max_body_bytes),
    )
}

/// Scans JSON text (without parsing it) for nesting deeper than
/// `max_json_depth` and strings longer than `max_json_string_bytes`. Bytes
/// that are not JSON pass: the handler's parser rejects them with a better
/// message.
fn check_json_shape(bytes: &[u8], limits: &InputLimits) -> Result<(), ApiError> {
    // Every endpoint takes an object. serde would also read a struct from an
    // array of its fields in order (`["hi"]` as `{"content": "hi"}`), a
    // second syntax no client is meant to use: refuse it here, once.
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') {
        return Err(ApiError::bad_request("the request body must be a JSON object, not an array"));
    }
    let mut depth: u32 = 0;
    let mut string_start: Option<usize> = None;
    let mut escaped = false;
    for (i, &byte) in bytes.iter().enumerate() {
        if let Some(start) = string_start {
            let closes = byte == b'"' && !escaped;
            // Bytes of the string so far, this one included unless it closes it.
            if !closes && i - start > limits.max_json_string_bytes {
                return Err(ApiError::bad_request(format!(
                    "a JSON string is longer than {} bytes",
                    limits.max_json_string_bytes
                )));
            }
            escaped = !escaped && byte == b'\\';
            if closes {
                string_start = None;
            }
            continue;
        }
        match byte {
            b'"' => string_start = Some(i),
            b'[' | b'{' => {
                depth += 1;
                if depth > limits.max_json_depth {
                    return Err(ApiError::bad_request(format!(
                        "JSON nested deeper than {} levels",
                        limits.max_json_depth
                    )));
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(depth: u32, string: usize) -> InputLimits {
        InputLimits { max_json_depth: depth, max_json_string_bytes: string, ..InputLimits::default() }
    }

    fn shape(text: &str, depth: u32, string: usize) -> Result<(), String> {
        check_json_shape(text.as_bytes(), &limits(depth, string)).map_err(|e| e.message)
    }

    #[test]
    fn depth_counts_arrays_and_objects_but_not_brackets_in_strings() {
        assert!(shape(r#"{"a":[{"b":1}]}"#, 3, 100).is_ok());
        assert!(shape(r#"{"a":[{"b":[1]}]}"#, 3, 100).unwrap_err().contains("deeper than 3"));
        assert!(shape(r#"{"a":"[[[[[[[[{{{{{"}"#, 1, 100).is_ok());
        // Siblings do not add up: depth goes back down on close.
        assert!(shape(r#"{"a":[[1],[2],[3],[4]]}"#, 3, 100).is_ok());
    }

    #[test]
    fn a_top_level_array_is_refused_and_other_values_go_to_the_parser() {
        assert!(shape(" \n [\"hi\"]", 8, 100).unwrap_err().contains("must be a JSON object"));
        for passes in ["", "{}", "\"hi\"", "5", "null"] {
            assert!(shape(passes, 8, 100).is_ok(), "{passes}");
        }
    }

    #[test]
    fn string_length_counts_keys_and_values_and_skips_escaped_quotes() {
        assert!(shape(r#"{"abcd":"efgh"}"#, 8, 4).is_ok());
        assert!(shape(r#"{"abcde":1}"#, 8, 4).unwrap_err().contains("longer than 4"));
        assert!(shape(r#"{"a":["abcde"]}"#, 8, 4).unwrap_err().contains("longer"));
        // `\"` does not end the string: the string is 6 bytes as sent.
        assert!(shape(r#"{"a":"ab\"cd"}"#, 8, 5).is_err());
        assert!(shape(r#"{"a":"ab\"c"}"#, 8, 5).is_ok());
        assert!(shape(r#"{"a":"abcd\""}"#, 8, 5).is_err());
        // An escaped backslash does not escape the closing quote: the nesting
        // after the string is seen.
        assert!(shape(r#"{"a":"a\\"}"#, 8, 3).is_ok());
        assert!(shape(r#"{"a":"a\\","b":[[1]]}"#, 2, 3).unwrap_err().contains("deeper"));
    }

    #[test]
    fn non_json_bytes_pass_to_the_parser() {
        assert!(check_json_shape(&[0xff, 0xfe, b'}', b'}', b'}'], &limits(1, 1)).is_ok());
    }
}
