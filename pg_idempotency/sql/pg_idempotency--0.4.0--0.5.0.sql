-- pg_idempotency 0.4.0 -> 0.5.0 (ALTER EXTENSION pg_idempotency UPDATE).
--
-- A record keeps when its running attempt claimed, so that a duplicate is told the running
-- call's estimated time left (retry_after) rather than the time until its lease lapses.
-- Records claimed before the update have no claim time: their creation time stands in.
-- Adding a nullable column without a default rewrites nothing.
-- Hand-written; fixed once 0.5.0 is released. tests/tests/upgrade.rs installs each released
-- version, fills it, updates, and compares every object with a fresh 0.5.0 install.
SET LOCAL search_path = pg_catalog, pg_temp;

ALTER TABLE idempotency.records ADD COLUMN claimed_at timestamptz;
