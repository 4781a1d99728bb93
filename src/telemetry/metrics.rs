//! Prometheus metrics for one app instance, rendered by `GET /metrics`.
//!
//! Labels are low-cardinality only: route templates, methods, status codes,
//! tenant ids and error codes; never session or user ids.

use std::time::Duration;

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{
        counter::Counter,
        family::Family,
        gauge::Gauge,
        histogram::{Histogram, exponential_buckets},
    },
    registry::Registry,
};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HttpLabels {
    /// The matched route template (`/v1/sessions/{id}`), or `unmatched`.
    pub route: String,
    pub method: String,
    pub status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    pub route: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RateLimitLabels {
    pub tenant: String,
    /// `allowed`, `limited_local`, `limited_global`, `store_error_refused`,
    /// `store_error_allowed`, `limited_sessions`, `limited_tokens`.
    pub outcome: String,
}

/// Labels of model-call metrics: the alias requests name, and the provider.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ModelLabels {
    pub model: String,
    pub provider: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ModelCallLabels {
    pub model: String,
    pub provider: String,
    /// `ok`, `error`, `cancelled`.
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TokenLabels {
    pub tenant: String,
    pub model: String,
    /// `input` or `output`.
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ToolLabels {
    /// `server`, `frontend` or `agent`: never the tool's name, which a
    /// request may choose.
    pub kind: String,
    /// `success`, `error` or `denied`.
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RelayLabels {
    /// `requested`, `approved`, `denied`, `timed_out`.
    pub event: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DialectLabels {
    pub dialect: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StoreLabels {
    /// The store trait method (`state.load`, `log.append`, …).
    pub op: &'static str,
    /// `ok` or the error code (`unavailable`, `not_leaseholder`, `corrupt`).
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct IndexLabels {
    /// `lost` (a hint a node did not take), `repaired` (written again from
    /// its session's state), `dropped` (the repair queue was full).
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DeathHintLabels {
    /// `dead` (an instance found dead by its liveness subscription: its
    /// sessions are taken over before its lease lapses) or `wrong` (one so
    /// found subscribed again afterwards: it lived, and what was taken
    /// from it ran a step again).
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HeldLabels {
    /// `held` (a notice to a turn's streams that the store holds its
    /// writes) or `gave_up` (held for `store.hold_max_secs`: the turn
    /// stopped, its streams failed).
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CorsLabels {
    /// `preflight` or `request` (an origin no list names), `tenant` (an
    /// origin only another tenant lists, used with this tenant's credential).
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct McpLabels {
    /// The `[[mcp_servers]]` name.
    pub server: String,
    /// Calls: `ok`, `tool_error` (the server answered `isError`),
    /// `timeout`, `unreachable`, `refused` (a JSON-RPC error). Tool list
    /// fetches: `ok` or the same failures.
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct McpServerLabels {
    pub server: String,
}

pub struct Metrics {
    registry: Registry,
    pub rate_limits: Family<RateLimitLabels, Counter>,
    pub http_requests: Family<HttpLabels, Counter>,
    pub http_duration: Family<RouteLabels, Histogram>,
    /// Turns running on this replica.
    pub active_sessions: Gauge,
    /// Event streams open to clients on this replica, by dialect.
    pub open_streams: Family<DialectLabels, Gauge>,
    pub time_to_first_token: Family<ModelLabels, Histogram>,
    pub model_call_duration: Family<ModelCallLabels, Histogram>,
    pub tokens: Family<TokenLabels, Counter>,
    pub tool_calls: Family<ToolLabels, Counter>,
    pub relays: Family<RelayLabels, Counter>,
    pub resumes: Family<DialectLabels, Counter>,
    /// Sessions this replica took over from a dead one.
    pub takeovers: Counter,
    /// Instances found dead by the death hint, and hints found wrong.
    pub death_hints: Family<DeathHintLabels, Counter>,
    /// Turns whose writes the store held: notices sent, turns given up.
    pub held_turns: Family<HeldLabels, Counter>,
    pub store_duration: Family<StoreLabels, Histogram>,
    /// Index entries lost on a cluster, repaired, dropped.
    pub store_index_entries: Family<IndexLabels, Counter>,
    /// Cross-origin requests whose origin CORS does not allow.
    pub cors_refused: Family<CorsLabels, Counter>,
    pub mcp_calls: Family<McpLabels, Counter>,
    pub mcp_call_duration: Family<McpServerLabels, Histogram>,
    pub mcp_lists: Family<McpLabels, Counter>,
}

/// A histogram family whose buckets are `start`, `start * 2`, … (`count` of them).
macro_rules! histograms {
    ($start:expr, $count:expr) => {
        Family::new_with_constructor((|| Histogram::new(exponential_buckets($start, 2.0, $count))) as fn() -> Histogram)
    };
}

impl Metrics {
    pub fn new() -> Self {
        let mut r = Registry::with_prefix("switchboard");
        let http_requests = Family::<HttpLabels, Counter>::default();
        r.register("http_requests", "HTTP requests answered, by route and status", http_requests.clone());
        // 1 ms .. ~33 s; streams are measured to their first byte.
        let http_duration = histograms!(0.001, 16);
        r.register("http_request_duration_seconds", "Time until the response head was sent", http_duration.clone());
        let rate_limits = Family::<RateLimitLabels, Counter>::default();
        r.register("rate_limit_decisions", "Rate-limit decisions by tenant and outcome", rate_limits.clone());
        let active_sessions = Gauge::default();
        r.register("active_sessions", "Turns running on this replica", active_sessions.clone());
        let open_streams = Family::<DialectLabels, Gauge>::default();
        r.register("open_streams", "Event streams open to clients on this replica", open_streams.clone());
        let time_to_first_token = histograms!(0.005, 14);
        r.register(
            "time_to_first_token_seconds",
            "From sending a model request to its first streamed token",
            time_to_first_token.clone(),
        );
        let model_call_duration = histograms!(0.01, 14);
        r.register("model_call_duration_seconds", "Model calls, start to end of stream", model_call_duration.clone());
        let tokens = Family::<TokenLabels, Counter>::default();
        r.register("model_tokens", "Model tokens by tenant, model and kind (input, output)", tokens.clone());
        let tool_calls = Family::<ToolLabels, Counter>::default();
        r.register("tool_calls", "Tool call results by kind and outcome", tool_calls.clone());
        let relays = Family::<RelayLabels, Counter>::default();
        r.register("relays", "Permission relays requested, approved, denied and timed out", relays.clone());
        let resumes = Family::<DialectLabels, Counter>::default();
        r.register("resumes", "Paused turns resumed by a client", resumes.clone());
        let takeovers = Counter::default();
        r.register("takeovers", "Sessions taken over from a replica that died or handed them off", takeovers.clone());
        let death_hints = Family::<DeathHintLabels, Counter>::default();
        r.register(
            "death_hints",
            "Replicas found dead by their liveness subscription (dead), and such findings proved wrong (wrong)",
            death_hints.clone(),
        );
        let held_turns = Family::<HeldLabels, Counter>::default();
        r.register(
            "held_turn_notices",
            "Notices to a turn's streams that the store holds its writes (held), and turns stopped for it (gave_up)",
            held_turns.clone(),
        );
        let store_duration = histograms!(0.0001, 16);
        r.register(
            "store_operation_duration_seconds",
            "Store operations by operation and outcome",
            store_duration.clone(),
        );
        let store_index_entries = Family::<IndexLabels, Counter>::default();
        r.register(
            "store_index_entries",
            "Index entries a Redis Cluster node did not take (lost), written again from the session (repaired), or given up (dropped)",
            store_index_entries.clone(),
        );
        let cors_refused = Family::<CorsLabels, Counter>::default();
        r.register("cors_refused", "Cross-origin requests from origins CORS does not allow", cors_refused.clone());
        let mcp_calls = Family::<McpLabels, Counter>::default();
        r.register("mcp_tool_calls", "MCP tool calls by server and outcome", mcp_calls.clone());
        let mcp_call_duration = histograms!(0.001, 16);
        r.register(
            "mcp_tool_call_duration_seconds",
            "MCP tool calls by server, sent to answered",
            mcp_call_duration.clone(),
        );
        let mcp_lists = Family::<McpLabels, Counter>::default();
        r.register("mcp_tool_lists", "MCP servers' tool lists fetched, by server and outcome", mcp_lists.clone());
        Self {
            registry: r,
            rate_limits,
            http_requests,
            http_duration,
            active_sessions,
            open_streams,
            time_to_first_token,
            model_call_duration,
            tokens,
            tool_calls,
            relays,
            resumes,
            takeovers,
            death_hints,
            held_turns,
            store_duration,
            store_index_entries,
            cors_refused,
            mcp_calls,
            mcp_call_duration,
            mcp_lists,
        }
    }

    pub fn mcp_call(&self, server: &str, outcome: &str) {
        self.mcp_calls.get_or_create(&McpLabels { server: server.to_string(), outcome: outcome.to_string() }).inc();
    }

    pub fn mcp_latency(&self, server: &str, elapsed: Duration) {
        self.mcp_call_duration
            .get_or_create(&McpServerLabels { server: server.to_string() })
            .observe(elapsed.as_secs_f64());
    }

    pub fn mcp_list(&self, server: &str, outcome: &str) {
        self.mcp_lists.get_or_create(&McpLabels { server: server.to_string(), outcome: outcome.to_string() }).inc();
    }

    pub fn observe_http(&self, route: &str, method: &str, status: u16, elapsed: Duration) {
        self.http_requests
            .get_or_create(&HttpLabels { route: route.to_string(), method: method.to_string(), status })
            .inc();
        self.http_duration.get_or_create(&RouteLabels { route: route.to_string() }).observe(elapsed.as_secs_f64());
    }

    pub fn rate_limit(&self, tenant: &str, outcome: &str) {
        self.rate_limits
            .get_or_create(&RateLimitLabels { tenant: tenant.to_string(), outcome: outcome.to_string() })
            .inc();
    }

    pub fn tokens(&self, tenant: &str, model: &str, input: u64, output: u64) {
        for (kind, n) in [("input", input), ("output", output)] {
            let labels = TokenLabels { tenant: tenant.to_string(), model: model.to_string(), kind: kind.to_string() };
            self.tokens.get_or_create(&labels).inc_by(n);
        }
    }

    pub fn tool_call(&self, kind: &str, outcome: &str) {
        self.tool_calls.get_or_create(&ToolLabels { kind: kind.to_string(), outcome: outcome.to_string() }).inc();
    }

    pub fn death_hint(&self, outcome: &str) {
        self.death_hints.get_or_create(&DeathHintLabels { outcome: outcome.to_string() }).inc();
    }

    pub fn held_notice(&self, outcome: &str) {
        self.held_turns.get_or_create(&HeldLabels { outcome: outcome.to_string() }).inc();
    }

    pub fn relay(&self, event: &str) {
        self.relays.get_or_create(&RelayLabels { event: event.to_string() }).inc();
    }

    /// A cross-origin request refused (see [`CorsLabels`]).
    pub fn cors_refused(&self, kind: &'static str) {
        self.cors_refused.get_or_create(&CorsLabels { kind: kind.to_string() }).inc();
    }

    pub fn resume(&self, dialect: &str) {
        self.resumes.get_or_create(&DialectLabels { dialect: dialect.to_string() }).inc();
    }

    /// Counts an open stream of `dialect` until the guard is dropped.
    pub fn open_stream(self: &std::sync::Arc<Self>, dialect: &str) -> StreamGuard {
        let gauge = self.open_streams.get_or_create(&DialectLabels { dialect: dialect.to_string() }).clone();
        gauge.inc();
        StreamGuard(gauge)
    }

    /// Counts a running turn until the guard is dropped.
    pub fn running_session(&self) -> StreamGuard {
        self.active_sessions.inc();
        StreamGuard(self.active_sessions.clone())
    }

    pub fn store_op(&self, op: &'static str, outcome: &'static str, elapsed: Duration) {
        self.store_op_histogram(op, outcome).observe(elapsed.as_secs_f64());
    }

    /// The histogram of one store operation and outcome, to keep for an
    /// operation timed at every round (its labels are not looked up each
    /// time).
    pub fn store_op_histogram(&self, op: &'static str, outcome: &'static str) -> Histogram {
        self.store_duration.get_or_create(&StoreLabels { op, outcome }).clone()
    }

    /// `n` index entries with `outcome` (see [`IndexLabels`]).
    pub fn index_entries(&self, outcome: &'static str, n: u64) {
        if n > 0 {
            self.store_index_entries.get_or_create(&IndexLabels { outcome: outcome.to_string() }).inc_by(n);
        }
    }

    /// The OpenMetrics text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// Decrements a gauge when dropped: a stream or a turn stops counting however
/// it ends.
pub struct StreamGuard(Gauge);

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}
