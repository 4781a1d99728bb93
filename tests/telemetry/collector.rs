//! An in-process OTLP/HTTP receiver (`POST /v1/traces`, protobuf) and the
//! process-wide telemetry pointed at it, installed once for the binary. The
//! receiver runs on a thread and runtime of its own, so it outlives each
//! test's runtime. Tests tell their spans apart by trace id: each sends its
//! own `traceparent`.

use std::{
    sync::{Arc, Mutex, OnceLock},
    time::Duration,
};

use axum::{
    Router,
    body::Bytes,
    extract::{DefaultBodyLimit, State},
    http::StatusCode,
    routing::post,
};
use opentelemetry_proto::tonic::{
    collector::trace::v1::ExportTraceServiceRequest,
    common::v1::{AnyValue, any_value::Value as Attr},
    trace::v1::Span,
};
use prost::Message as _;
use switchboard::telemetry::{Settings, Telemetry, Traces};
use tokio::sync::watch;
use tracing_subscriber::fmt::writer::BoxMakeWriter;

pub struct Collector {
    spans: Arc<Mutex<Vec<Span>>>,
    /// How many spans have arrived; waiters wake on each export.
    arrived: watch::Receiver<usize>,
    logs: Arc<Mutex<Vec<u8>>>,
    telemetry: Telemetry,
}

static COLLECTOR: OnceLock<Collector> = OnceLock::new();

/// The receiver, started (and the telemetry installed) on first use.
pub fn collector() -> &'static Collector {
    COLLECTOR.get_or_init(|| {
        let spans: Arc<Mutex<Vec<Span>>> = Arc::default();
        let (count_tx, arrived) = watch::channel(0usize);
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let state = (spans.clone(), Arc::new(count_tx));
        std::thread::Builder::new()
            .name("otlp-receiver".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
                runtime.block_on(async move {
                    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                    addr_tx.send(listener.local_addr().unwrap()).unwrap();
                    let app = Router::new()
                        .route("/v1/traces", post(receive))
                        .layer(DefaultBodyLimit::max(64 << 20))
                        .with_state(state);
                    axum::serve(listener, app).await.unwrap();
                });
            })
            .unwrap();
        let addr = addr_rx.recv().unwrap();
        let logs: Arc<Mutex<Vec<u8>>> = Arc::default();
        let sink = logs.clone();
        let telemetry = Telemetry::init(Settings {
            log_filter: "info".into(),
            log_json: true,
            log_ansi: false,
            log_writer: BoxMakeWriter::new(move || LogBuffer(sink.clone())),
            traces: Traces::Endpoint { url: format!("http://{addr}/v1/traces"), delay: Duration::from_millis(50) },
        })
        .expect("the first telemetry in this process");
        Collector { spans, arrived, logs, telemetry }
    })
}

type ReceiverState = (Arc<Mutex<Vec<Span>>>, Arc<watch::Sender<usize>>);

async fn receive(State((spans, count)): State<ReceiverState>, body: Bytes) -> StatusCode {
    let Ok(request) = ExportTraceServiceRequest::decode(body) else { return StatusCode::BAD_REQUEST };
    let received: Vec<Span> =
        request.resource_spans.into_iter().flat_map(|r| r.scope_spans).flat_map(|s| s.spans).collect();
    let n = received.len();
    spans.lock().unwrap().extend(received);
    count.send_modify(|c| *c += n);
    StatusCode::OK
}

impl Collector {
    /// The spans of trace `trace_id` (hex) once `done` holds for them; the
    /// timeout only bounds a failing test.
    pub async fn spans_of(&'static self, trace_id: &str, done: impl Fn(&[Span]) -> bool) -> Vec<Span> {
        let mut arrived = self.arrived.clone();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        loop {
            // Spans end up in the batch as they close; send what is there.
            tokio::task::spawn_blocking(|| self.telemetry.force_flush()).await.unwrap();
            let spans: Vec<Span> =
                self.spans.lock().unwrap().iter().filter(|s| hex(&s.trace_id) == trace_id).cloned().collect();
            if done(&spans) {
                return spans;
            }
            let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
            assert!(tokio::time::Instant::now() < deadline, "spans of {trace_id} incomplete: {names:?}");
            let _ = tokio::time::timeout_at(deadline, arrived.changed()).await;
        }
    }

    /// Every log line written so far.
    pub fn logs(&self) -> String {
        String::from_utf8_lossy(&self.logs.lock().unwrap()).into_owned()
    }
}

struct LogBuffer(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogBuffer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A fresh `(trace id, parent span id)` pair, as hex.
pub fn new_trace() -> (String, String) {
    let trace = uuid::Uuid::new_v4().simple().to_string();
    let span = uuid::Uuid::new_v4().simple().to_string()[..16].to_string();
    (trace, span)
}

pub fn named<'a>(spans: &'a [Span], name: &str) -> Vec<&'a Span> {
    let mut found: Vec<&Span> = spans.iter().filter(|s| s.name == name).collect();
    found.sort_by_key(|s| s.start_time_unix_nano);
    found
}

pub fn attr<'a>(span: &'a Span, key: &str) -> Option<&'a Attr> {
    span.attributes.iter().find(|kv| kv.key == key)?.value.as_ref()?.value.as_ref()
}

pub fn string(span: &Span, key: &str) -> Option<String> {
    match attr(span, key)? {
        Attr::StringValue(v) => Some(v.clone()),
        _ => None,
    }
}

pub fn int(span: &Span, key: &str) -> Option<i64> {
    match attr(span, key)? {
        Attr::IntValue(v) => Some(*v),
        _ => None,
    }
}

pub fn strings(span: &Span, key: &str) -> Option<Vec<String>> {
    match attr(span, key)? {
        Attr::ArrayValue(array) => array
            .values
            .iter()
            .map(|AnyValue { value }| match value {
                Some(Attr::StringValue(v)) => Some(v.clone()),
                _ => None,
            })
            .collect(),
        _ => None,
    }
}
