-- pg_idempotency 0.3.0 -> 0.4.0 (ALTER EXTENSION pg_idempotency UPDATE).
--
-- idem_purge_expired's batch_size defaults to NULL, which means the new setting
-- pg_idempotency.purge_batch_size (the purge worker's batch size, 10000 unless set).
-- Hand-written; fixed once 0.4.0 is released. tests/tests/upgrade.rs installs each released
-- version, fills it, updates, and compares every object with a fresh 0.4.0 install.
SET LOCAL search_path = pg_catalog, pg_temp;

-- Replaced in place: the same OID, so its privileges and comment stay.
CREATE OR REPLACE FUNCTION @extschema@.idem_purge_expired(
    batch_size integer DEFAULT NULL)
RETURNS bigint
VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE SECURITY DEFINER
LANGUAGE c AS 'MODULE_PATHNAME', 'idem_purge_expired';
