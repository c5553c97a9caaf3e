//! The ledger: where each call's side effect lands, standing for the provider a real call
//! reaches. It is a database of its own, so that a fault in the server under test cannot
//! touch it, and it behaves as a careful provider does:
//!
//! - it refuses an effect whose fence is lower than the highest it accepted for the key
//!   (resource-side fencing: a holder that lost its lease and did not notice is harmless);
//! - it treats a repeat of an effect with the same upstream key as the same effect (a
//!   provider honouring `Idempotency-Key`), so a takeover that repeats the effect of a
//!   holder that died after it does not make a second one.
//!
//! Every accepted effect is one row of `effects`; the checker counts them (I1).

use tokio_postgres::{Client, NoTls};

use crate::history::{LedgerRow, Outcome};

/// The SQLSTATE the ledger raises for a stale fence.
pub const STALE: &str = "LG001";

const SCHEMA: &str = r#"
CREATE TABLE effects (
    key          text        NOT NULL,
    upstream_key uuid        NOT NULL,
    fence        bigint      NOT NULL,
    at           timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (key, upstream_key)
);
CREATE TABLE fences (key text PRIMARY KEY, fence bigint NOT NULL);
CREATE FUNCTION apply(k text, f bigint, u uuid) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    top bigint;
BEGIN
    INSERT INTO fences VALUES (k, f) ON CONFLICT (key) DO NOTHING;
    SELECT fence INTO top FROM fences WHERE key = k FOR UPDATE;
    IF f < top THEN
        RAISE EXCEPTION 'stale fence % for %: % was accepted', f, k, top
            USING ERRCODE = 'LG001';
    END IF;
    UPDATE fences SET fence = f WHERE key = k;
    INSERT INTO effects (key, upstream_key, fence) VALUES (k, u, f)
        ON CONFLICT (key, upstream_key) DO NOTHING;
END
$$;
"#;

/// Creates the ledger's tables in the (empty) database of `dsn`.
pub async fn create(dsn: &str) -> Result<(), tokio_postgres::Error> {
    let c = connect(dsn).await?;
    c.batch_execute(SCHEMA).await
}

/// A connection whose driver runs on its own task.
pub async fn connect(dsn: &str) -> Result<Client, tokio_postgres::Error> {
    let (client, conn) = tokio_postgres::connect(dsn, NoTls).await?;
    tokio::spawn(conn);
    Ok(client)
}

/// Applies one effect: `Done` when the ledger accepted it (new or a repeat), `Failed`
/// (`ledger`) for a stale fence, `Indeterminate` when the ledger could not be asked.
pub async fn apply(c: &Client, key: &str, fence: i64, upstream_key: uuid::Uuid) -> Outcome {
    match c
        .execute("SELECT apply($1, $2, $3)", &[&key, &fence, &upstream_key])
        .await
    {
        Ok(_) => Outcome::Done,
        Err(e) if e.code().map(|c| c.code()) == Some(STALE) => Outcome::Failed {
            sqlstate: "ledger".into(),
        },
        Err(e) => Outcome::Indeterminate {
            why: format!("ledger: {e}"),
        },
    }
}

/// Every accepted effect, with its time in microseconds since `start_epoch_micros`.
pub async fn rows(
    c: &Client,
    start_epoch_micros: i64,
) -> Result<Vec<LedgerRow>, tokio_postgres::Error> {
    Ok(c.query(
        "SELECT key, fence, upstream_key, \
                    (extract(epoch FROM at) * 1000000)::bigint - $1 \
             FROM effects ORDER BY at",
        &[&start_epoch_micros],
    )
    .await?
    .iter()
    .map(|r| LedgerRow {
        key: r.get(0),
        fence: r.get(1),
        upstream_key: r.get(2),
        at: r.get(3),
    })
    .collect())
}
