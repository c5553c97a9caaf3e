//! Waiting for a short lease or ttl to run out, as the server's clock sees it: the tests
//! that need a lapsed lease or an expired record poll the record instead of sleeping for
//! a time that should be enough.

use std::time::Duration;

use postgres::Client;

use crate::wait_until;

/// Long enough for any lease or ttl the suite sets to run out, on a loaded machine.
const BOUND: Duration = Duration::from_secs(10);

/// Waits until the lease of the in-progress record (scope, key) has lapsed.
pub fn wait_for_lapse(c: &mut Client, scope: &str, key: &str) {
    wait_until(
        &format!("the lease of ({scope}, {key}) to lapse"),
        BOUND,
        || {
            c.query_one(
                "SELECT lease_until <= clock_timestamp() FROM idem_lookup($1, $2)",
                &[&scope, &key],
            )
            .map(|r| r.get::<_, bool>(0))
            .unwrap_or_else(|e| panic!("idem_lookup({scope}, {key}): {e}"))
        },
    );
}

/// Waits until every record of `keys` in `scope` has expired (idem_lookup shows none).
pub fn wait_for_expiry(c: &mut Client, scope: &str, keys: &[String]) {
    wait_until(
        &format!("{} record(s) of {scope} to expire", keys.len()),
        BOUND,
        || {
            c.query_one(
                "SELECT count(*) FROM unnest($2::text[]) k, idem_lookup($1, k)",
                &[&scope, &keys],
            )
            .map(|r| r.get::<_, i64>(0) == 0)
            .unwrap_or_else(|e| panic!("idem_lookup({scope}, ...): {e}"))
        },
    );
}
