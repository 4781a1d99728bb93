//! The span fields a log line carries: the ids an operator searches by
//! (request, trace, tenant, session, replica, dialect, turn) and the
//! outcome's codes, not the OpenTelemetry attributes the spans hold for
//! the exporter (`otel.*`, `gen_ai.*`, `http.*`, `server.*`, `db.*`).
//!
//! The log layer formats a span's fields when the span is made, for every
//! span, whether a line is ever logged in it; a chat makes three spans of
//! a dozen fields each, so formatting only the ones a line shows is a
//! measurable share of a chat's cost (load-tests/RESULTS.md).

use std::fmt;

use tracing::field::{Field, Visit};
use tracing_subscriber::{
    field::RecordFields,
    fmt::{FormatFields, format::Writer},
};

/// Whether a span field is shown in log lines.
fn shown(name: &str) -> bool {
    const ATTRIBUTES: &[&str] = &["otel.", "gen_ai.", "http.request.", "http.route", "server.", "db."];
    !ATTRIBUTES.iter().any(|prefix| name.starts_with(prefix))
}

/// `name=value` (values in their `Debug` form), space-separated: the
/// default text layout, for the shown fields.
pub struct TextFields;

impl<'writer> FormatFields<'writer> for TextFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'writer>, fields: R) -> fmt::Result {
        let mut visitor = TextVisitor { writer, first: true, result: Ok(()) };
        fields.record(&mut visitor);
        visitor.result
    }
}

struct TextVisitor<'writer> {
    writer: Writer<'writer>,
    first: bool,
    result: fmt::Result,
}

impl Visit for TextVisitor<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if self.result.is_err() || !shown(field.name()) {
            return;
        }
        let separator = if std::mem::take(&mut self.first) { "" } else { " " };
        self.result = if field.name() == "message" {
            write!(self.writer, "{separator}{value:?}")
        } else {
            write!(self.writer, "{separator}{}={value:?}", field.name())
        };
    }
}

/// A JSON object of the shown fields, as `tracing_subscriber`'s JSON
/// layout reads a span's fields back.
pub struct JsonFields;

impl<'writer> FormatFields<'writer> for JsonFields {
    fn format_fields<R: RecordFields>(&self, mut writer: Writer<'writer>, fields: R) -> fmt::Result {
        let mut visitor = JsonVisitor(serde_json::Map::new());
        fields.record(&mut visitor);
        let object = serde_json::Value::Object(visitor.0);
        write!(writer, "{object}")
    }

    /// Fields recorded later (`Span::record`) merge into the object.
    fn add_fields(
        &self,
        current: &'writer mut tracing_subscriber::fmt::FormattedFields<Self>,
        fields: &tracing::span::Record<'_>,
    ) -> fmt::Result {
        let mut visitor = JsonVisitor(match serde_json::from_str(&current.fields) {
            Ok(serde_json::Value::Object(map)) => map,
            _ => serde_json::Map::new(),
        });
        fields.record(&mut visitor);
        current.fields = serde_json::Value::Object(visitor.0).to_string();
        Ok(())
    }
}

struct JsonVisitor(serde_json::Map<String, serde_json::Value>);

impl JsonVisitor {
    fn put(&mut self, field: &Field, value: serde_json::Value) {
        if shown(field.name()) {
            self.0.insert(field.name().to_string(), value);
        }
    }
}

impl Visit for JsonVisitor {
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, value.into());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, value.into());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, value.into());
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, value.into());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(field, format!("{value:?}").into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_codes_are_shown_and_exporter_attributes_are_not() {
        for name in ["request_id", "trace_id", "tenant", "session_id", "replica", "error.type", "outcome"] {
            assert!(shown(name), "{name}");
        }
        for name in ["otel.name", "gen_ai.request.model", "http.route", "http.request.method", "server.address"] {
            assert!(!shown(name), "{name}");
        }
        assert!(shown("http.response.status_code"));
    }
}
