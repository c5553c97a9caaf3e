-- pg_idempotency 0.2.0 -> 0.3.0 (ALTER EXTENSION pg_idempotency UPDATE).
--
-- idem_begin takes a claim token: a repeat of the same attempt (its reply was lost) gets the
-- claim it made back, with its fence, instead of in_progress until the lease lapses.
-- Hand-written; fixed once 0.3.0 is released. tests/tests/upgrade.rs installs each released
-- version, fills it, updates, and compares every object with a fresh 0.3.0 install.
SET LOCAL search_path = pg_catalog, pg_temp;

-- Both columns describe the claim holding a record. Rows claimed before the update have no
-- token, so no repeat matches them.
ALTER TABLE idempotency.records
    ADD COLUMN claim_token uuid,
    ADD COLUMN recovered boolean NOT NULL DEFAULT false;

-- The function is made anew (a new OID, a new argument): the old signature would make a
-- call with eight arguments ambiguous. Until this update runs, the library serves the 0.2.0
-- function as 0.2.0 did.
DROP FUNCTION @extschema@.idem_begin(text, text, jsonb, interval, interval, text, text, interval);
CREATE FUNCTION @extschema@.idem_begin(
    scope        text,
    key          text,
    request      jsonb    DEFAULT NULL,
    ttl          interval DEFAULT NULL,
    lease        interval DEFAULT NULL,
    on_cache_hit text     DEFAULT NULL,
    on_mismatch  text     DEFAULT NULL,
    wait         interval DEFAULT '0',
    claim_token  uuid     DEFAULT NULL)
RETURNS idempotency.begin_result
VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE SECURITY DEFINER
LANGUAGE c AS 'MODULE_PATHNAME', 'idem_begin';
COMMENT ON FUNCTION @extschema@.idem_begin(text, text, jsonb, interval, interval, text, text, interval, uuid) IS
    'Claim a call (outcome claimed, with a fence), or learn it is running (in_progress), or get its remembered result (replay)';

REVOKE EXECUTE ON FUNCTION
    @extschema@.idem_begin(text, text, jsonb, interval, interval, text, text, interval, uuid)
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    @extschema@.idem_begin(text, text, jsonb, interval, interval, text, text, interval, uuid)
TO idempotency_user;
