//! `pg-idempotency-mcp`: the MCP proxy's command line. See docs/mcp.md.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Result;
use clap::Parser;
use pg_idempotency_mcp::config::{Config, FrontTransport};
use pg_idempotency_mcp::proxy::Proxy;
use pg_idempotency_mcp::upstream::Target;
use pg_idempotency_mcp::{front, store, upstream_child};

/// An MCP proxy that makes the tool calls of the server behind it safe to retry: calls of
/// tools with an effect are deduplicated in PostgreSQL (pg_idempotency).
#[derive(Parser, Debug)]
#[command(name = "pg-idempotency-mcp", version)]
struct Cli {
    /// The configuration file (TOML); every option below overrides it.
    #[arg(short, long)]
    config: Option<PathBuf>,
    /// The database with pg_idempotency (a libpq connection string or postgres:// URL).
    #[arg(long)]
    database_url: Option<String>,
    /// Serve Streamable HTTP on this address instead of stdio.
    #[arg(long, value_name = "ADDR")]
    http: Option<String>,
    /// The upstream server's name: the first part of every scope.
    #[arg(long)]
    name: Option<String>,
    /// Reach the upstream server over Streamable HTTP at this URL.
    #[arg(long, value_name = "URL")]
    upstream_url: Option<String>,
    /// The identity calls are made for: on stdio, and on an HTTP front without tokens.
    #[arg(long)]
    principal: Option<String>,
    /// Serve HTTP on an address other than loopback with no authentication at all: anyone
    /// who reaches it calls as the one principal. Refused next to tokens.
    #[arg(long)]
    allow_unauthenticated: bool,
    /// The upstream server's command and arguments, started as a child process.
    #[arg(last = true, value_name = "COMMAND")]
    command: Vec<String>,
}

fn main() -> Result<()> {
    // stdout carries the protocol on stdio: logs go to stderr.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("PGIDEM_MCP_LOG")
                .unwrap_or_else(|_| "warn,rmcp=error,pg_idempotency_mcp=info".into()),
        )
        .init();
    let cli = Cli::parse();
    let mut config = match &cli.config {
        Some(path) => Config::load(path)?,
        None => Config::default(),
    };
    if let Some(url) = cli.database_url {
        config.database.url = Some(url);
    }
    if let Some(addr) = cli.http {
        config.front.transport = FrontTransport::Http;
        config.front.listen = Some(addr);
    }
    if let Some(name) = cli.name {
        config.upstream.name = Some(name);
    }
    if let Some(p) = cli.principal {
        config.front.principal = Some(p);
    }
    if cli.allow_unauthenticated {
        config.front.allow_unauthenticated = true;
    }
    if let Some(url) = cli.upstream_url {
        config.upstream.url = Some(url);
        config.upstream.command = None;
    }
    if let Some((program, args)) = cli.command.split_first() {
        config.upstream.command = Some(program.clone());
        config.upstream.args = args.to_vec();
        config.upstream.url = None;
    }
    config.check()?;
    runtime_for(config.front.transport)?.block_on(serve(config))
}

/// The stdio front serves one host's session, one message after another: on one thread, a
/// call's hops between tasks (front, dispatch, holder, upstream) wake no other thread
/// (measured: a new call and a replay a little faster, docs/benchmarks.md). The HTTP
/// front serves many sessions at once, on a worker thread per core.
fn runtime_for(transport: FrontTransport) -> std::io::Result<tokio::runtime::Runtime> {
    match transport {
        FrontTransport::Stdio => tokio::runtime::Builder::new_current_thread(),
        FrontTransport::Http => tokio::runtime::Builder::new_multi_thread(),
    }
    .enable_all()
    .build()
}

async fn serve(config: Config) -> Result<()> {
    let target = Target::of(&config.upstream, &config.limits)?;
    let store = store::connect(&config.database, &config.limits).await?;
    let transport = config.front.transport;
    let grace = config.limits.recording_grace;
    let proxy = Arc::new(Proxy::new(config, target, store));
    let recordings = proxy.recordings.clone();
    let served = match transport {
        FrontTransport::Stdio => {
            tokio::select! {
                served = front::serve_stdio(proxy) => served,
                _ = tokio::signal::ctrl_c() => Ok(()),
                _ = terminated() => Ok(()),
            }
        }
        FrontTransport::Http => {
            tokio::select! {
                served = front::serve_http(proxy, None) => served,
                _ = tokio::signal::ctrl_c() => Ok(()),
                _ = terminated() => Ok(()),
            }
        }
    };
    // Answered calls are recorded before the proxy goes: a retry of one finds its result.
    let unrecorded = recordings.drain(grace).await;
    if unrecorded > 0 {
        tracing::warn!(unrecorded, grace = ?grace, "the proxy exits with answered calls not recorded yet: their records lapse and a retry of one is decided by its on_unknown_outcome");
    }
    // No stdio upstream server, nor anything it started, outlives the proxy.
    upstream_child::kill_all();
    served
}

/// SIGTERM (how a service manager or an MCP host stops the proxy) ends it as Ctrl-C does:
/// normally, its upstream servers and what they started killed on the way out.
async fn terminated() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                term.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    }
    #[cfg(not(unix))]
    std::future::pending::<()>().await
}
