//! Telemetry: logs, traces and Prometheus metrics.
//!
//! - **Logs** go to stdout: human-readable by default, JSON lines when
//!   `SWITCHBOARD_LOG_FORMAT=json`, each with the fields of the spans it is
//!   in (request id, tenant, session id, trace id; not the attributes spans
//!   carry for the exporter, `log_fields.rs`). The filter comes from
//!   `RUST_LOG` (default `info`). Log lines carry ids and codes, never
//!   tokens, keys or message text.
//! - **Traces** are exported over OTLP (HTTP/protobuf) when
//!   `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`)
//!   is set, with `OTEL_SERVICE_NAME` (default `switchboard`) and
//!   `OTEL_RESOURCE_ATTRIBUTES`; off otherwise. Only the gateway's own spans
//!   at `info` and above are exported, whatever `RUST_LOG` says. Span
//!   attribute names are in [`attributes`]; trace-context propagation and
//!   links in [`trace`].
//! - **`Server-Timing`** on non-stream answers splits the gateway's own
//!   time from upstream model and tool calls ([`timing`]).
//! - **Metrics** live in [`metrics::Metrics`], one registry per app instance
//!   (not a process-global recorder), so several replicas in one test process
//!   keep separate counts.

pub mod attributes;
mod log_fields;
pub mod metrics;
pub mod timing;
pub mod trace;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::{
    Resource,
    propagation::TraceContextPropagator,
    trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider},
};
use tracing_subscriber::{
    EnvFilter, Layer as _, filter::Targets, fmt, fmt::writer::BoxMakeWriter, prelude::*, registry::Registry,
};

/// What [`Telemetry::init`] sets up.
pub struct Settings {
    /// `RUST_LOG` syntax.
    pub log_filter: String,
    pub log_json: bool,
    /// Colours in text logs (only when stdout is a terminal).
    pub log_ansi: bool,
    pub log_writer: BoxMakeWriter,
    pub traces: Traces,
}

/// Where spans go.
pub enum Traces {
    Off,
    /// The `OTEL_EXPORTER_OTLP_*` variables name the collector.
    FromEnvironment,
    /// This URL, used as is (include `/v1/traces`), with batches sent after
    /// at most `delay` (tests).
    Endpoint {
        url: String,
        delay: std::time::Duration,
    },
}

impl Settings {
    /// `RUST_LOG`, `SWITCHBOARD_LOG_FORMAT` and the `OTEL_*` variables.
    pub fn from_env() -> Self {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let otlp = var("OTEL_EXPORTER_OTLP_ENDPOINT").or_else(|| var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")).is_some();
        let disabled = var("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"))
            || var("OTEL_TRACES_EXPORTER").is_some_and(|v| v.eq_ignore_ascii_case("none"));
        Self {
            log_filter: var("RUST_LOG").unwrap_or_else(|| "info".to_string()),
            log_json: var("SWITCHBOARD_LOG_FORMAT").is_some_and(|v| v.eq_ignore_ascii_case("json")),
            log_ansi: std::io::IsTerminal::is_terminal(&std::io::stdout()),
            log_writer: BoxMakeWriter::new(std::io::stdout),
            traces: if otlp && !disabled { Traces::FromEnvironment } else { Traces::Off },
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("cannot build the OTLP exporter: {0}")]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
    #[error("a global subscriber is already installed")]
    AlreadyInstalled,
}

/// The installed telemetry; [`Telemetry::shutdown`] flushes pending spans.
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Installs the process-wide subscriber: the log layer, and the trace
    /// layer when traces are on.
    pub fn init(settings: Settings) -> Result<Self, TelemetryError> {
        let provider = match &settings.traces {
            Traces::Off => None,
            traces => Some(tracer_provider(traces)?),
        };
        let filter = EnvFilter::try_new(&settings.log_filter).unwrap_or_else(|_| EnvFilter::new("info"));
        let logs = if settings.log_json {
            fmt::layer()
                .json()
                .flatten_event(true)
                .with_current_span(false)
                .with_span_list(true)
                .fmt_fields(log_fields::JsonFields)
                .with_writer(settings.log_writer)
                .boxed()
        } else {
            fmt::layer()
                .with_target(false)
                .with_ansi(settings.log_ansi)
                .fmt_fields(log_fields::TextFields)
                .with_writer(settings.log_writer)
                .boxed()
        };
        let installed = match provider.as_ref() {
            // Spans go out at INFO whatever the log level: each layer has
            // its own filter.
            Some(provider) => {
                let spans = tracing_opentelemetry::layer()
                    .with_tracer(provider.tracer("switchboard"))
                    .with_filter(Targets::new().with_target("switchboard", tracing::Level::INFO));
                Registry::default().with(logs.with_filter(filter)).with(spans).try_init()
            }
            // Logs alone: one filter for the whole subscriber, so a span's
            // enter and exit (each poll of an instrumented task, each
            // frame of a response) skip the per-layer filter's lookups.
            None => Registry::default().with(filter.and_then(logs)).try_init(),
        };
        installed.map_err(|_| TelemetryError::AlreadyInstalled)?;
        if provider.is_some() {
            opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
        }
        Ok(Self { provider })
    }

    pub fn traces_enabled(&self) -> bool {
        self.provider.is_some()
    }

    /// Exports every finished span now (blocks; call off the async workers).
    pub fn force_flush(&self) {
        if let Some(provider) = &self.provider
            && let Err(e) = provider.force_flush()
        {
            tracing::warn!(error = %e, "cannot flush spans");
        }
    }

    /// Flushes and stops the exporter (blocks).
    pub fn shutdown(self) {
        if let Some(provider) = self.provider
            && let Err(e) = provider.shutdown()
        {
            tracing::warn!(error = %e, "cannot flush spans at shutdown");
        }
    }
}

fn tracer_provider(traces: &Traces) -> Result<SdkTracerProvider, TelemetryError> {
    let builder = opentelemetry_otlp::SpanExporter::builder().with_http();
    let (exporter, delay) = match traces {
        Traces::Endpoint { url, delay } => (builder.with_endpoint(url.clone()).build()?, Some(*delay)),
        _ => (builder.build()?, None),
    };
    let mut batch = BatchConfigBuilder::default();
    if let Some(delay) = delay {
        batch = batch.with_scheduled_delay(delay);
    }
    let processor = BatchSpanProcessor::builder(exporter).with_batch_config(batch.build()).build();
    // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES are read by the
    // detectors of Resource::builder(); the default name is ours.
    let named = std::env::var_os("OTEL_SERVICE_NAME").is_some()
        || std::env::var("OTEL_RESOURCE_ATTRIBUTES").is_ok_and(|v| v.contains("service.name="));
    let resource = if named { Resource::builder() } else { Resource::builder().with_service_name("switchboard") };
    Ok(SdkTracerProvider::builder().with_span_processor(processor).with_resource(resource.build()).build())
}
