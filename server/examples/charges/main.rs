//! An HTTP service whose callers retry: `POST /charges` (transactional) and `POST /emails`
//! (plain), both behind the idempotency layer. `scripts/example-server.sh` sets up a
//! database and starts it; by hand:
//!
//!   cargo run -p pg_idempotency_server --example charges -- --dsn "<conninfo>" [--port 3000]
//!
//! `--port 0` takes a free port; the line `listening on http://<address>` says which.

mod app;

use deadpool_postgres::{Manager, Pool};
use pg_idempotency_client::PgStore;

type Error = Box<dyn std::error::Error + Send + Sync>;

struct Options {
    dsn: String,
    host: String,
    port: u16,
}

fn options() -> Result<Options, String> {
    let mut o = Options {
        dsn: String::new(),
        host: "127.0.0.1".into(),
        port: 3000,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--dsn" => o.dsn = value()?,
            "--host" => o.host = value()?,
            "--port" => o.port = value()?.parse().map_err(|e| format!("--port: {e}"))?,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if o.dsn.is_empty() {
        return Err("--dsn is required".into());
    }
    Ok(o)
}

#[tokio::main]
async fn main() {
    let o = match options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}\nusage: charges --dsn <conninfo> [--host 127.0.0.1] [--port 3000]");
            std::process::exit(2);
        }
    };
    if let Err(e) = serve(o).await {
        eprintln!("charges: {e}");
        std::process::exit(1);
    }
}

async fn serve(o: Options) -> Result<(), Error> {
    let config: tokio_postgres::Config = o.dsn.parse()?;
    let pool = Pool::builder(Manager::new(config, tokio_postgres::NoTls))
        .max_size(16)
        .build()?;
    // Say now, not at the first request, when the database lacks the extension.
    PgStore::new(pool.clone()).check_installed().await?;
    app::create_tables(&pool).await?;
    let listener = tokio::net::TcpListener::bind((o.host.as_str(), o.port)).await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, app::router(pool))
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
