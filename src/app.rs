//! Builds the running gateway from a [`Config`]: shared state, the router and
//! the middleware stack (all in one place), and the serve loop with graceful
//! shutdown.
//!
//! [`Application::build`] binds the listener and reports its address, so tests
//! run the real app on port 0.

use std::{future::Future, net::SocketAddr, sync::Arc, time::Instant};

use axum::{
    Router,
    extract::{DefaultBodyLimit, MatchedPath, Request, State},
    http::HeaderName,
    middleware::{self, Next},
    response::Response,
};
use tokio::net::TcpListener;
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use tower::ServiceBuilder;
use tower_http::{
    catch_panic::CatchPanicLayer,
    request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer},
    trace::TraceLayer,
};

use crate::{
    api,
    auth::{self, Authenticator},
    config::Config,
    cors::{self, CorsPolicy},
    error::{self, REQUEST_ID_HEADER},
    limits::{self, RateLimits},
    orchestrator::{Orchestrator, prompt},
    protocol::ModelLimits,
    providers::Providers,
    sessions::{Sessions, TurnRunner},
    state::{AppState, Shared},
    store::{NOTICE_CHANNEL, Store, StoreError},
    telemetry::{attributes as attr, metrics::Metrics, timing, trace},
};

#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cannot make the workspace directory: {0}")]
    Workspaces(std::io::Error),
    #[error("cannot read a workspace template: {0}")]
    Templates(String),
}

pub struct Application {
    listener: TcpListener,
    router: Router,
    state: AppState,
}

impl Application {
    /// Binds `config.server.listen` and assembles the app. Nothing is served
    /// until [`Application::run_until_stopped`].
    pub async fn build(config: Config) -> Result<Self, StartupError> {
        Self::build_with_runner(config, None).await
    }

    /// Like [`Application::build`], with the given turn runner instead of the
    /// orchestrator (tests script turns this way).
    pub async fn build_with_runner(config: Config, runner: Option<Arc<dyn TurnRunner>>) -> Result<Self, StartupError> {
        let addr = config.server.listen;
        let listener = TcpListener::bind(addr).await.map_err(|source| StartupError::Bind { addr, source })?;
        let (notices_tx, notices_rx) = tokio::sync::mpsc::channel(NOTICE_CHANNEL);
        let metrics = Arc::new(Metrics::new());
        let store = Store::open(&config.store, notices_tx, metrics.clone())?;
        let cors = CorsPolicy::from_config(&config, metrics.clone());
        let authenticator = Arc::new(Authenticator::from_config(&config).with_cors(cors.clone()));
        let config = Arc::new(config);
        let shutdown = CancellationToken::new();
        let tasks = TaskTracker::new();
        authenticator.start_refresh(&tasks, shutdown.clone());
        let enabled_prompts = Arc::new(prompt::parse_enabled(std::env::var("ENABLED_PROMPTS").ok().as_deref()));
        // The runner comes first: the sessions service may take sessions
        // over as soon as it starts, and must be able to run them.
        let providers = Arc::new(Providers::from_config(&config));
        let (workspaces, probe, skills) = open_workspaces(&config, &store, &tasks).await?;
        let seeds = {
            let config = config.sandbox.clone();
            let loaded = tokio::task::spawn_blocking(move || crate::workspace::Seeds::load(&config)).await;
            Arc::new(loaded.map_err(|e| StartupError::Templates(e.to_string()))?.map_err(StartupError::Templates)?)
        };
        let runner = runner.unwrap_or_else(|| {
            Orchestrator::new(config.clone(), providers.clone(), (*enabled_prompts).clone(), workspaces.clone(), skills)
        });
        let sessions = Sessions::start(
            store.clone(),
            notices_rx,
            config.clone(),
            metrics.clone(),
            runner,
            tasks.clone(),
            shutdown.clone(),
        );
        let limits = RateLimits::new(config.clone(), store.quotas.clone(), metrics.clone());
        limits.start_cleanup(&tasks, shutdown.clone());
        let model_limits = ModelLimits::of(&config.models);
        let sandbox = Arc::new(probe);
        let state = AppState::new(Shared {
            config,
            store,
            sessions,
            metrics,
            model_limits,
            providers,
            enabled_prompts,
            shutdown,
            tasks,
            sandbox,
            seeds,
        });
        let router = router(state.clone(), authenticator, limits, cors);
        Ok(Self { listener, router, state })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().expect("a bound listener has an address")
    }

    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Serves until `signal` resolves, then drains: readiness turns 503 at
    /// once, no new connections are accepted, open streams end with a frame
    /// telling their clients to rejoin, running turns are handed to other
    /// replicas, and background tasks stop — all within
    /// `server.shutdown_grace`.
    pub async fn run_until_stopped(self, signal: impl Future<Output = ()> + Send + 'static) -> std::io::Result<()> {
        let Self { listener, router, state } = self;
        let grace = state.config.server.shutdown_grace;
        tracing::info!(
            addr = %listener.local_addr()?,
            replica = %state.config.server.replica_id,
            instance = %state.sessions.instance(),
            store = state.store.kind,
            "switchboard listening"
        );
        let sessions = state.sessions.clone();
        let delay = state.config.server.drain_delay;
        let (drained_tx, drained) = tokio::sync::oneshot::channel();
        let serve =
            crate::server::serve(listener, router, state.config.server.input, state.config.server.http2, async move {
                signal.await;
                tracing::info!("draining: readiness is 503, streams end with a rejoin frame, turns are handed off");
                let started = tokio::time::Instant::now();
                // New connections are still accepted during the delay (their
                // turns go to other replicas); the listener closes after both.
                tokio::join!(sessions.drain(grace), tokio::time::sleep(delay));
                let _ = drained_tx.send(started);
            });
        let deadline = async {
            let Ok(started) = drained.await else { return std::future::pending().await };
            // What is left of the grace for connections still open.
            tokio::time::sleep_until(started + grace).await;
        };
        tokio::select! {
            () = serve => {}
            () = deadline => {
                tracing::warn!(grace_secs = grace.as_secs(), "shutdown grace expired; closing remaining connections");
            }
        }
        state.shutdown.cancel();
        state.tasks.close();
        state.tasks.wait().await;
        tracing::info!("stopped");
        Ok(())
    }
}

/// The sandbox, its probe (run once here, logged loudly when a tenant runs
/// commands and it does not work), the skills, and the replica's workspaces.
async fn open_workspaces(
    config: &Config,
    store: &Store,
    tasks: &TaskTracker,
) -> Result<(Arc<crate::workspace::Workspaces>, crate::sandbox::Probe, Vec<crate::tools::skills::Skill>), StartupError>
{
    let root = crate::sandbox::prepare_root(&config.sandbox).await.map_err(StartupError::Workspaces)?;
    let sandbox = crate::sandbox::open(&config.sandbox);
    let probe = crate::sandbox::probe(&*sandbox, &root, config.sandbox.uid).await;
    let dirs = config.skills.dirs.clone();
    let skills = tokio::task::spawn_blocking(move || crate::tools::skills::discover(&dirs)).await.unwrap_or_default();
    if !skills.is_empty() {
        tracing::info!(skills = skills.len(), "skills found");
    }
    let limits = crate::sandbox::describe(&config.sandbox.limits);
    match (probe.works, config.needs_sandbox()) {
        (true, _) => tracing::info!(backend = probe.backend, detail = %probe.detail, %limits, "sandbox works"),
        (false, true) => tracing::error!(
            backend = probe.backend,
            detail = %probe.detail,
            "the sandbox does not work on this host: bash is off and /readyz answers 503"
        ),
        (false, false) => {
            tracing::warn!(backend = probe.backend, detail = %probe.detail, "the sandbox does not work here")
        }
    }
    let workspaces = crate::workspace::Workspaces::new(
        root,
        config.sandbox.clone(),
        sandbox,
        store.workspaces.clone(),
        skills.iter().map(|s| s.mount.clone()).collect(),
        tasks.clone(),
    );
    Ok((workspaces, probe, skills))
}

/// The routes and the middleware stack. Layers listed first wrap the ones
/// after them (they see the request first and the response last).
fn router(
    state: AppState,
    authenticator: Arc<Authenticator>,
    limits: Arc<RateLimits>,
    cors: Option<Arc<CorsPolicy>>,
) -> Router {
    let request_id = HeaderName::from_static(REQUEST_ID_HEADER);
    let input = state.config.server.input;
    let replica = state.config.server.replica_id.clone();
    let stack = ServiceBuilder::new()
        // Outermost, so every later layer and every log line has the id; an id
        // set by the load balancer is kept.
        .layer(SetRequestIdLayer::new(request_id.clone(), MakeRequestUuid))
        // One span per request, carrying the id and the caller's trace
        // context; never headers (tokens).
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(move |request: &Request| request_span(&replica, request))
                .on_response(record_status),
        )
        // The id goes back on every response, errors included.
        .layer(PropagateRequestIdLayer::new(request_id))
        // Counts and logs what the client finally got, after error
        // rendering, and adds Server-Timing to non-stream answers.
        .layer(middleware::from_fn_with_state(state.clone(), track_http))
        // CORS (when configured): a preflight carries no credential, so it is
        // answered here, before header limits, auth and rate limits (never a
        // 401, never counted against a tenant); outside the rescue, so every
        // answer from within, a rendered 401 or 429 included, carries the
        // headers a page needs to read it.
        .option_layer(cors::layer(cors.as_ref()))
        // The one rescue: every error response gets the JSON body here.
        .layer(middleware::from_fn(error::render_errors))
        // A panic in a handler becomes a 500 that the rescue renders.
        .layer(CatchPanicLayer::new())
        // Too many or too large headers: 431, before anything reads them.
        .layer(middleware::from_fn_with_state(input, limits::input::headers))
        // Deny by default: everything but auth::PUBLIC_PATHS (and the console's
        // page, when on) needs a credential.
        .layer(middleware::from_fn_with_state(authenticator, auth::require_auth))
        // After auth: limits are per tenant and subject of the verified token.
        .layer(middleware::from_fn_with_state(limits, limits::enforce))
        // The headers MCP servers are configured to receive per request
        // (a caller's own token), for the turn this request may start.
        .layer(middleware::from_fn_with_state(Arc::new(state.config.forwarded_headers()), forward_headers))
        // Only then is the body read: within its deadline (408) and size
        // (413), and refused if its JSON is too deep or its strings too long.
        .layer(middleware::from_fn_with_state(input, limits::input::body))
        // Extractors see the already-bounded body; their own limit must not
        // be lower than ours.
        .layer(DefaultBodyLimit::max(input.max_body_bytes));

    api::routes(state.config.server.console).fallback(api::not_found).layer(stack).with_state(state)
}

/// Keeps the request headers some `[[mcp_servers]]` forwards (`names`) as
/// the request's [`crate::principal::Forwarded`].
async fn forward_headers(State(names): State<Arc<Vec<String>>>, request: Request, next: Next) -> Response {
    if names.is_empty() {
        return next.run(request).await;
    }
    let headers = names
        .iter()
        .filter_map(|name| {
            let value = request.headers().get(name.as_str())?.to_str().ok()?;
            Some((name.clone(), value.to_string()))
        })
        .collect();
    crate::principal::Forwarded::new(headers).scope(next.run(request)).await
}

/// The span of one request: an OpenTelemetry SERVER span named
/// `METHOD /route`, continuing the caller's trace when it sent a
/// `traceparent`. Tenant and session id are recorded on it once known (auth,
/// the sessions service); never headers (tokens).
fn request_span(replica: &str, request: &Request) -> tracing::Span {
    let id = request.headers().get(REQUEST_ID_HEADER).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let route = request.extensions().get::<MatchedPath>().map_or("unmatched", MatchedPath::as_str);
    let method = request.method().as_str();
    let span = tracing::info_span!(
        "request",
        { attr::OTEL_NAME } = format!("{method} {route}"),
        { attr::OTEL_KIND } = "server",
        { attr::OTEL_STATUS_CODE } = tracing::field::Empty,
        { attr::REQUEST_ID } = id,
        { attr::HTTP_REQUEST_METHOD } = method,
        { attr::HTTP_ROUTE } = route,
        { attr::HTTP_RESPONSE_STATUS_CODE } = tracing::field::Empty,
        { attr::REPLICA } = replica,
        { attr::TENANT } = tracing::field::Empty,
        { attr::SESSION_ID } = tracing::field::Empty,
        { attr::TRACE_ID } = tracing::field::Empty,
    );
    trace::continue_from(&span, request.headers());
    if let Some(trace_id) = trace::trace_id(&span) {
        span.record(attr::TRACE_ID, trace_id);
    }
    span
}

/// The span's status.
fn record_status(response: &Response, _latency: std::time::Duration, span: &tracing::Span) {
    let status = response.status();
    span.record(attr::HTTP_RESPONSE_STATUS_CODE, i64::from(status.as_u16()));
    if status.is_server_error() {
        span.record(attr::OTEL_STATUS_CODE, "ERROR");
    }
}

async fn track_http(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let route =
        request.extensions().get::<MatchedPath>().map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let method = request.method().to_string();
    let mut response = next.run(request).await;
    let elapsed = started.elapsed();
    let status = response.status().as_u16();
    state.metrics.observe_http(&route, &method, status, elapsed);
    timing::server_timing(&mut response, elapsed);
    // The access log line (the request span around it has the ids); probes
    // and scrapes only at debug.
    let latency_ms = elapsed.as_millis() as u64;
    if auth::PUBLIC_PATHS.contains(&route.as_str()) {
        tracing::debug!(status, latency_ms, "request answered");
    } else {
        tracing::info!(status, latency_ms, "request answered");
    }
    response
}
