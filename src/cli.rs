//! The command line of docs/design.md ("Process"): `serve` (the default), `token`, `key` and
//! `check-config`. Each subcommand loads the configuration the same way.

use std::{path::PathBuf, process::ExitCode, time::Duration};

use clap::{Parser, Subcommand};

use crate::{
    app::Application,
    auth, bridge,
    config::{self, Config, ConfigErrors},
    telemetry::{Settings, Telemetry},
};

#[derive(Debug, Parser)]
#[command(name = "switchboard", version, about = "Multi-tenant session relay gateway for LLM agent sessions")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Configuration file (TOML). Also SWITCHBOARD_CONFIG. Without one, the
    /// embedded defaults are used.
    #[arg(long, global = true)]
    pub config: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the gateway (the default).
    Serve,
    /// Print a JWT that this configuration accepts (HS256 tenants).
    Token {
        #[arg(long)]
        tenant: String,
        #[arg(long)]
        subject: String,
        /// Lifetime in seconds.
        #[arg(long, default_value_t = 3600)]
        ttl: u64,
        /// A scope to grant (repeatable), e.g. sessions:admin.
        #[arg(long = "scope")]
        scopes: Vec<String>,
    },
    /// Print a new random API key (first line) and the `api_keys` entry that
    /// accepts it (second line: paste it into the tenant's `api_keys`, or its
    /// `api_keys_file`). Only the entry's SHA-256 goes into configuration.
    Key {
        #[arg(long)]
        tenant: String,
        #[arg(long)]
        subject: String,
        /// A scope to grant (repeatable), e.g. sessions:admin.
        #[arg(long = "scope")]
        scopes: Vec<String>,
    },
    /// Validate the configuration and report every error with its path.
    CheckConfig,
    /// Speak zot's RPC on stdin and stdout (as `zot rpc` does), relaying to
    /// the gateway at --url: a harness that spawns `zot rpc` spawns this
    /// instead. A dropped connection is rejoined by sequence number.
    #[command(name = "zot-rpc")]
    ZotRpc {
        /// The gateway (or its load balancer), e.g. http://127.0.0.1:8080.
        #[arg(long)]
        url: String,
        /// A JWT (also SWITCHBOARD_TOKEN).
        #[arg(long, env = "SWITCHBOARD_TOKEN", hide_env_values = true, conflicts_with = "api_key")]
        token: Option<String>,
        /// An API key (also SWITCHBOARD_API_KEY).
        #[arg(long, env = "SWITCHBOARD_API_KEY", hide_env_values = true)]
        api_key: Option<String>,
        /// An existing session to continue; else one is made.
        #[arg(long)]
        session: Option<String>,
        /// zot's flags: the model of a new session is `<provider>/<model>`
        /// when both are given, else `<model>` (else the tenant's default).
        #[arg(long)]
        provider: Option<String>,
        #[arg(long)]
        model: Option<String>,
        /// zot's reasoning level for a new session.
        #[arg(long)]
        reasoning: Option<String>,
        /// Accepted for zot's command line; the gateway has no working
        /// directory of the caller's.
        #[arg(long)]
        cwd: Option<String>,
    },
}

pub async fn run(cli: Cli) -> ExitCode {
    let command = cli.command.unwrap_or(Command::Serve);
    if let Command::ZotRpc { url, token, api_key, session, provider, model, reasoning, cwd: _ } = command {
        // A client of a gateway: it needs no configuration of its own.
        let credential = match (token, api_key) {
            (Some(token), _) => Some(bridge::Credential::Token(token)),
            (None, Some(key)) => Some(bridge::Credential::ApiKey(key)),
            (None, None) => None,
        };
        let model = match (provider, model) {
            (Some(provider), Some(model)) => Some(format!("{provider}/{model}")),
            (_, model) => model,
        };
        return bridge::run(bridge::Options { url, credential, session, model, reasoning }).await;
    }
    let config = Config::load(cli.config.as_deref(), &config::process_env);
    match command {
        Command::Serve => serve(config).await,
        Command::Key { tenant, subject, scopes } => {
            match &config {
                Ok(config) if !config.tenants.contains_key(&tenant) => {
                    eprintln!(
                        "note: no tenant {tenant:?} in the configuration yet; add the entry to it when you add it"
                    );
                }
                Ok(_) => {}
                Err(_) => eprintln!("note: the configuration does not load; the key is printed anyway"),
            }
            let (key, entry) = auth::new_api_key(&subject, &scopes);
            println!("{key}");
            println!("{entry}");
            ExitCode::SUCCESS
        }
        // (`zot-rpc` was handled above: it runs without a configuration.)
        Command::CheckConfig | Command::ZotRpc { .. } => match config {
            Ok(config) => {
                for warning in config.warnings() {
                    eprintln!("warning: {warning}");
                }
                println!(
                    "configuration ok: {} tenant(s), {} model(s), {} tool(s), {} store",
                    config.tenants.len(),
                    config.models.len(),
                    config.tools.len(),
                    match &config.store.redis {
                        Some(crate::config::RedisTarget::Node(_)) => "redis",
                        Some(crate::config::RedisTarget::Cluster(_)) => "redis cluster",
                        None => "in-memory",
                    },
                );
                check_sandbox(&config).await;
                ExitCode::SUCCESS
            }
            Err(errors) => report(&errors),
        },
        Command::Token { tenant, subject, ttl, scopes } => {
            let config = match config {
                Ok(config) => config,
                Err(errors) => return report(&errors),
            };
            let Some(tenant) = config.tenants.get(&tenant) else {
                eprintln!("no tenant {tenant:?} in the configuration");
                return ExitCode::FAILURE;
            };
            match auth::mint_token(tenant, &subject, Duration::from_secs(ttl), &scopes) {
                Ok(token) => {
                    println!("{token}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("cannot sign a token: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

/// `check-config`'s report on the sandbox: its probe, run here (a warning,
/// not an error: the host that runs `check-config` may not be the one that
/// serves).
async fn check_sandbox(config: &Config) {
    let probe = match crate::sandbox::prepare_root(&config.sandbox).await {
        Ok(root) => {
            let sandbox = crate::sandbox::open(&config.sandbox);
            let probe = crate::sandbox::probe(&*sandbox, &root, config.sandbox.uid).await;
            if config.sandbox.dir.is_none() {
                let _ = tokio::fs::remove_dir_all(&root).await;
            }
            probe
        }
        Err(e) => crate::sandbox::Probe {
            backend: config.sandbox.backend.as_str(),
            works: false,
            detail: format!("cannot make the workspace directory: {e}"),
        },
    };
    if probe.works {
        println!("sandbox: {} works on this host ({})", probe.backend, probe.detail);
    } else {
        let needed = if config.needs_sandbox() { " (a tenant has bash: /readyz will answer 503)" } else { "" };
        eprintln!("warning: sandbox: {} does not work on this host{needed}: {}", probe.backend, probe.detail);
    }
}

async fn serve(config: Result<Config, ConfigErrors>) -> ExitCode {
    let telemetry = match Telemetry::init(Settings::from_env()) {
        Ok(telemetry) => telemetry,
        Err(e) => {
            eprintln!("cannot start telemetry: {e}");
            return ExitCode::FAILURE;
        }
    };
    let code = serve_with(config, telemetry.traces_enabled()).await;
    // Pending spans are sent before the process exits (a blocking export).
    let _ = tokio::task::spawn_blocking(move || telemetry.shutdown()).await;
    code
}

async fn serve_with(config: Result<Config, ConfigErrors>, traces: bool) -> ExitCode {
    if traces {
        tracing::info!("exporting traces over OTLP");
    }
    let config = match config {
        Ok(config) => config,
        Err(errors) => return report(&errors),
    };
    for warning in config.warnings() {
        tracing::warn!("{warning}");
    }
    if config.uses_builtin_dev_secret {
        tracing::warn!(
            "tenant `dev` signs tokens with the built-in development secret; \
             set SWITCHBOARD_DEV_SECRET or use a configuration file in production"
        );
    }
    let app = match Application::build(config).await {
        Ok(app) => app,
        Err(e) => {
            tracing::error!(error = %e, "cannot start");
            return ExitCode::FAILURE;
        }
    };
    match app.run_until_stopped(shutdown_signal()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "server error");
            ExitCode::FAILURE
        }
    }
}

fn report(errors: &ConfigErrors) -> ExitCode {
    eprintln!("invalid configuration ({} error(s)):", errors.0.len());
    for line in errors.to_string().lines() {
        eprintln!("  {line}");
    }
    ExitCode::FAILURE
}

/// Resolves on Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}
