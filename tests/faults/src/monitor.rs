//! The record monitor: while a run goes on, reads the storage table of the server under test
//! every few tens of milliseconds (as the superuser) and keeps what it saw, each read
//! stamped with the server's own clock, so that the checker can tell a record that outlived
//! its expiry from one that vanished before it (I5). And the purge that the portable
//! variant needs from outside (the documented way: `idem_purge_expired` on a schedule, as
//! pg_cron would run it); the extension's purge worker needs nothing from the run.

use std::time::Duration;

use tokio::sync::watch;
use tokio_postgres::Client;

use crate::clock::Clock;
use crate::history::{Poll, SeenRecord};

/// One read of the scope's records with the server's clock. The clock is read once, in a
/// subquery of the same statement (after its snapshot was taken: a record missing from
/// the read was gone by then); the outer join gives the time even when the scope is empty.
const READ: &str = "SELECT (extract(epoch FROM now_.t) * 1000000)::bigint - $2, \
            r.key, r.owner::text, r.state, r.fence, r.attempt, r.upstream_key, \
            (extract(epoch FROM r.expires_at) * 1000000)::bigint - $2 \
     FROM (SELECT clock_timestamp() AS t) AS now_ \
     LEFT JOIN idempotency.records r ON r.scope = $1 \
     ORDER BY r.key, r.owner";

/// Reads the records of `scope` once.
pub async fn poll(c: &Client, scope: &str, clock: Clock) -> Result<Poll, tokio_postgres::Error> {
    let rows = c.query(READ, &[&scope, &clock.start_epoch_micros]).await?;
    let at = rows.first().map(|r| r.get::<_, i64>(0)).unwrap_or_default();
    let records = rows
        .iter()
        .filter(|r| r.get::<_, Option<String>>(1).is_some())
        .map(|r| SeenRecord {
            key: r.get(1),
            owner: r.get(2),
            state: r.get(3),
            fence: r.get(4),
            attempt: r.get(5),
            upstream_key: r.get(6),
            expires_at: r.get(7),
        })
        .collect();
    Ok(Poll { at, records })
}

/// Polls `scope` every `every` until `stop` turns true; then once more, and returns every
/// poll. A read that fails (the server restarting under a fault) is skipped: a gap between
/// polls only widens the window the checker allows, it never invents a record.
pub async fn watch_records(
    dsn: String,
    scope: String,
    clock: Clock,
    every: Duration,
    mut stop: watch::Receiver<bool>,
) -> Vec<Poll> {
    let mut polls = Vec::new();
    let mut client: Option<Client> = None;
    loop {
        let last = *stop.borrow();
        if client.as_ref().is_none_or(|c| c.is_closed()) {
            client = crate::ledger::connect(&dsn).await.ok();
        }
        if let Some(c) = &client {
            if let Ok(p) = poll(c, &scope, clock).await {
                polls.push(p);
            }
        }
        if last {
            return polls;
        }
        // The poll period, not an ordering of sessions: the monitor samples the table.
        let _ = tokio::time::timeout(every, stop.changed()).await;
    }
}

/// Calls `idem_purge_expired()` every `every` until `stop` turns true, the way a pg_cron
/// job purges for the portable variant; returns how many records the calls deleted.
pub async fn purge_on_schedule(
    dsn: String,
    every: Duration,
    mut stop: watch::Receiver<bool>,
) -> i64 {
    let mut purged = 0;
    let mut client: Option<Client> = None;
    loop {
        // The schedule's period, not an ordering of sessions.
        let _ = tokio::time::timeout(every, stop.changed()).await;
        if *stop.borrow() {
            return purged;
        }
        if client.as_ref().is_none_or(|c| c.is_closed()) {
            client = crate::ledger::connect(&dsn).await.ok();
        }
        if let Some(c) = &client {
            if let Ok(row) = c.query_one("SELECT idem_purge_expired()", &[]).await {
                purged += row.get::<_, i64>(0);
            }
        }
    }
}
