-- pg_idempotency 0.8.0 -> 0.9.0 (ALTER EXTENSION pg_idempotency UPDATE).
--
-- Each change is one block below, opened by a `-- 0.9.0: <what it does>` line.
-- Hand-written; fixed once 0.9.0 is released. tests/tests/consistency/upgrade.rs installs
-- each released version, fills it, updates, and compares every object with a fresh 0.9.0
-- install.
SET LOCAL search_path = pg_catalog, pg_temp;

-- 0.9.0: a duplicate of a call whose holder stopped beating is told the lease's time left
-- and stops waiting. records gains lease_length (last): the length of the lease the holder
-- last took (its claim, a takeover, each idem_extend), written by the library. With less
-- than a third of it left the holder has stopped beating (the client's heartbeat renews
-- every third): idem_begin answers in_progress at once, whatever its wait, with
-- retry_after the lease's time left. Records claimed before the update keep NULL: their
-- duplicates keep 0.8.0's rule until their holder's next extension or a new claim. The
-- 0.9.0 library serves a 0.8.0 catalogue as 0.8.0 did until this update runs.
ALTER TABLE idempotency.records ADD COLUMN lease_length interval;
