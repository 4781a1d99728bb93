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

impl TextVisitor<'_> {
    /// Writes the separator and `name=` of a shown field (the message has
    /// no name), or returns `false` for a field not shown.
    fn start(&mut self, field: &Field) -> bool {
        if self.result.is_err() || !shown(field.name()) {
            return false;
        }
        let separator = if std::mem::take(&mut self.first) { "" } else { " " };
        self.result = self.writer.write_str(separator);
        if field.name() != "message" {
            self.result = self
                .result
                .and_then(|()| self.writer.write_str(field.name()))
                .and_then(|()| self.writer.write_char('='));
        }
        self.result.is_ok()
    }
}

/// Whether `Debug` writes `text` as itself between quotes: printable ASCII
/// without a quote or a backslash (ids, names, codes — what spans carry).
fn plain(text: &str) -> bool {
    text.bytes().all(|b| (b' '..=b'~').contains(&b) && b != b'"' && b != b'\\')
}

/// The typed fields are written as their `Debug` form is, without going
/// through `core::fmt` for the common ones (a chat's spans carry a dozen
/// ids and numbers, formatted when each span is made).
impl Visit for TextVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if !plain(value) {
            return self.record_debug(field, &value);
        }
        if self.start(field) {
            self.result = self
                .writer
                .write_char('"')
                .and_then(|()| self.writer.write_str(value))
                .and_then(|()| self.writer.write_char('"'));
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        if self.start(field) {
            self.result = self.writer.write_str(itoa::Buffer::new().format(value));
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        if self.start(field) {
            self.result = self.writer.write_str(itoa::Buffer::new().format(value));
        }
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        if self.start(field) {
            self.result = self.writer.write_str(if value { "true" } else { "false" });
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if self.start(field) {
            self.result = write!(self.writer, "{value:?}");
        }
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

    /// The typed fields come out as `Debug` writes them.
    #[test]
    fn typed_fields_are_written_as_their_debug_form() {
        use tracing_subscriber::fmt::format::Writer;

        let texts = ["", "req-1f0c", "a b~", "quote \"x\"", "back\\slash", "tab\there", "é", "\u{7f}", "line\n"];
        for text in texts {
            let mut fast = String::new();
            let mut visitor = TextVisitor { writer: Writer::new(&mut fast), first: true, result: Ok(()) };
            visitor.record_str(&field("tenant"), text);
            assert_eq!(fast, format!("tenant={text:?}"), "{text:?}");
        }
        let mut fast = String::new();
        let mut visitor = TextVisitor { writer: Writer::new(&mut fast), first: true, result: Ok(()) };
        visitor.record_u64(&field("tenant"), u64::MAX);
        visitor.record_i64(&field("session_id"), i64::MIN);
        visitor.record_bool(&field("replica"), true);
        visitor.record_str(&field("otel.name"), "hidden");
        visitor.record_str(&field("message"), "done");
        assert_eq!(fast, format!("tenant={} session_id={} replica=true \"done\"", u64::MAX, i64::MIN));
    }

    /// A field of a callsite that has one of each name used above.
    fn field(name: &str) -> Field {
        struct Callsite;
        impl tracing::callsite::Callsite for Callsite {
            fn set_interest(&self, _: tracing::subscriber::Interest) {}
            fn metadata(&self) -> &tracing::Metadata<'_> {
                &METADATA
            }
        }
        static CALLSITE: Callsite = Callsite;
        static FIELDS: &[&str] = &["tenant", "session_id", "replica", "otel.name", "message"];
        static METADATA: tracing::Metadata<'static> = tracing::Metadata::new(
            "test",
            "test",
            tracing::Level::INFO,
            None,
            None,
            None,
            tracing::field::FieldSet::new(FIELDS, tracing::callsite::Identifier(&CALLSITE)),
            tracing::metadata::Kind::EVENT,
        );
        METADATA.fields().field(name).expect("a field of the test callsite")
    }

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
