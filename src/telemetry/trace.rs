//! W3C trace context: taken from incoming requests, sent on every upstream
//! model and tool request, and kept with the session (as a `traceparent`
//! string) so work on another replica links back to the session's trace.
//!
//! Everything here is a no-op when tracing is off: spans then have no
//! OpenTelemetry context, and nothing is injected or linked.

use opentelemetry::{
    global,
    trace::{SpanContext, TraceContextExt as _, TraceFlags, TraceId, TraceState},
};
use opentelemetry_http::{HeaderExtractor, HeaderInjector};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// Makes `span` a child of the trace context in `headers` (`traceparent`,
/// `tracestate`), if there is a valid one.
pub fn continue_from(span: &tracing::Span, headers: &axum::http::HeaderMap) {
    let parent = global::get_text_map_propagator(|propagator| propagator.extract(&HeaderExtractor(headers)));
    if parent.span().span_context().is_valid() {
        let _ = span.set_parent(parent);
    }
}

/// Adds the current span's trace context to outgoing `headers`.
pub fn inject_current(headers: &mut axum::http::HeaderMap) {
    let context = tracing::Span::current().context();
    if context.span().span_context().is_valid() {
        global::get_text_map_propagator(|propagator| propagator.inject_context(&context, &mut HeaderInjector(headers)));
    }
}

/// The `traceparent` of `span`, to store with a session.
pub fn traceparent(span: &tracing::Span) -> Option<String> {
    let context = span.context();
    let span_context = context.span().span_context().clone();
    span_context.is_valid().then(|| {
        format!("00-{}-{}-{:02x}", span_context.trace_id(), span_context.span_id(), span_context.trace_flags().to_u8())
    })
}

/// The trace id of `span` as hex, for log lines.
pub fn trace_id(span: &tracing::Span) -> Option<String> {
    let context = span.context();
    let id = context.span().span_context().trace_id();
    (id != TraceId::INVALID).then(|| id.to_string())
}

/// Links `span` to the span a stored `traceparent` names, unless that span is
/// in the same trace already.
pub fn link_to(span: &tracing::Span, traceparent: &str) {
    let Some(linked) = parse_traceparent(traceparent) else { return };
    let own = span.context().span().span_context().trace_id();
    if own != linked.trace_id() {
        span.add_link(linked);
    }
}

/// `00-<32 hex trace id>-<16 hex span id>-<2 hex flags>`.
fn parse_traceparent(value: &str) -> Option<SpanContext> {
    let mut parts = value.split('-');
    let (version, trace, span, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if version != "00" || parts.next().is_some() || trace.len() != 32 || span.len() != 16 || flags.len() != 2 {
        return None;
    }
    let trace_id = TraceId::from_hex(trace).ok()?;
    let span_id = opentelemetry::trace::SpanId::from_hex(span).ok()?;
    let flags = TraceFlags::new(u8::from_str_radix(flags, 16).ok()?);
    let context = SpanContext::new(trace_id, span_id, flags, true, TraceState::default());
    context.is_valid().then_some(context)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparents_parse_and_bad_ones_are_ignored() {
        let context = parse_traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01").unwrap();
        assert_eq!(context.trace_id().to_string(), "0af7651916cd43dd8448eb211c80319c");
        assert_eq!(context.span_id().to_string(), "b7ad6b7169203331");
        assert!(context.is_sampled() && context.is_remote());
        for bad in [
            "",
            "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-x",
            "00-zzf7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        ] {
            assert!(parse_traceparent(bad).is_none(), "{bad}");
        }
    }
}
