-- pg_idempotency 0.5.0 -> 0.6.0 (ALTER EXTENSION pg_idempotency UPDATE).
--
-- The batch API: idem_begin_batch claims many calls of one scope in one round trip, with an
-- outcome per item, and idem_complete_batch completes many claims under their fences. The
-- records and every other function are unchanged. Hand-written; fixed once 0.6.0 is
-- released. tests/tests/consistency/upgrade.rs installs each released version, fills it,
-- updates, and compares every object with a fresh 0.6.0 install.
SET LOCAL search_path = pg_catalog, pg_temp;

-- keys[i], requests[i] and claim_tokens[i] are item i (a NULL key: derived from its request). Items are claimed in key order, answered in item order; a mismatch or a refused repeat is that item's outcome, a bad argument fails the whole batch.
CREATE FUNCTION @extschema@.idem_begin_batch(
    scope        text,
    keys         text[],
    requests     jsonb[] DEFAULT NULL,
    ttl          interval DEFAULT NULL,
    lease        interval DEFAULT NULL,
    on_cache_hit text DEFAULT NULL,
    on_mismatch  text DEFAULT NULL,
    claim_tokens uuid[] DEFAULT NULL)
RETURNS TABLE (
    item         integer,
    outcome      text,
    fence        bigint,
    attempt      integer,
    recovered    boolean,
    upstream_key uuid,
    succeeded    boolean,
    response     jsonb,
    lease_until  timestamptz,
    expires_at   timestamptz,
    retry_after  interval,
    key          text)
VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE SECURITY DEFINER
LANGUAGE c AS 'MODULE_PATHNAME', 'idem_begin_batch';
COMMENT ON FUNCTION @extschema@.idem_begin_batch(text, text[], jsonb[], interval, interval, text, text, uuid[]) IS
    'idem_begin for many calls of one scope in one round trip: one row per item (claimed, replay, in_progress, mismatch or refused)';

-- Item i is (keys[i], fences[i], responses[i], succeeded[i], cache_failure[i]); succeeded NULL: every item succeeded. A lost lease is that item's outcome (lease_lost); the others are completed.
CREATE FUNCTION @extschema@.idem_complete_batch(
    scope         text,
    keys          text[],
    fences        bigint[],
    responses     jsonb[],
    succeeded     boolean[] DEFAULT NULL,
    cache_failure boolean[] DEFAULT NULL)
RETURNS TABLE (
    item       integer,
    key        text,
    outcome    text,
    state      text,
    expires_at timestamptz)
VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE SECURITY DEFINER
LANGUAGE c AS 'MODULE_PATHNAME', 'idem_complete_batch';
COMMENT ON FUNCTION @extschema@.idem_complete_batch(text, text[], bigint[], jsonb[], boolean[], boolean[]) IS
    'idem_complete for many claims of one scope in one round trip: one row per item (completed, with the state left, or lease_lost)';

REVOKE EXECUTE ON FUNCTION
    @extschema@.idem_begin_batch(text, text[], jsonb[], interval, interval, text, text, uuid[]),
    @extschema@.idem_complete_batch(text, text[], bigint[], jsonb[], boolean[], boolean[])
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    @extschema@.idem_begin_batch(text, text[], jsonb[], interval, interval, text, text, uuid[]),
    @extschema@.idem_complete_batch(text, text[], bigint[], jsonb[], boolean[], boolean[])
TO idempotency_user;
