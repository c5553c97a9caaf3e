-- pg_idempotency, PL/Proxy layer: the guard a partition gets when it is resharded
-- (scripts/reshard.sh, docs/scaling.md "Resharding"). Run on a partition, as a superuser,
-- in one transaction; scripts/reshard.sh does. Plain SQL.
--
-- A partition of a proxy holds the keys whose routing hash's low bits are its number. When
-- the proxy grows from N to 2N partitions, the keys of partition p whose next bit is set
-- move to partition p + N. A call the proxy routed to p before the switch can still reach
-- p after it; the guard makes sure such a call changes nothing there: a write of a row
-- whose key is not p's (a claim, a completion, a takeover, a release) is refused with
-- 40001, so the caller retries, and the retry reaches the key's new partition. Reads of
-- the moved rows (a replay, an in_progress answer) are served by the frozen copy until
-- scripts/reshard.sh removes it. A purge may remove an expired copy.
SET LOCAL search_path = pg_catalog, pg_temp;
SET LOCAL client_min_messages = warning;

CREATE SCHEMA IF NOT EXISTS idempotency_reshard;
REVOKE ALL ON SCHEMA idempotency_reshard FROM PUBLIC;
COMMENT ON SCHEMA idempotency_reshard IS
    'pg_idempotency PL/Proxy layer: the resharding guard of this partition';

-- The proxy's routing hash (sql/proxy/src/routing.sql), the same formula.
CREATE OR REPLACE FUNCTION idempotency_reshard.routing_hash(scope text, key text)
RETURNS integer
IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
LANGUAGE sql AS $fn$
    SELECT ('x' OPERATOR(pg_catalog.||) pg_catalog.encode(pg_catalog.substr(pg_catalog.sha256(
                pg_catalog.convert_to(scope, 'UTF8')
                OPERATOR(pg_catalog.||) '\x00'::pg_catalog.bytea
                OPERATOR(pg_catalog.||) pg_catalog.convert_to(key, 'UTF8')),
            1, 4), 'hex'))::pg_catalog.bit(32)::pg_catalog.int4
$fn$;

-- The trigger: TG_ARGV[0] is this partition's number, TG_ARGV[1] the partition count.
CREATE OR REPLACE FUNCTION idempotency_reshard.guard()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    part integer := TG_ARGV[0]::integer;
    parts integer := TG_ARGV[1]::integer;
    row_scope text;
    row_key text;
    home integer;
BEGIN
    IF TG_OP = 'DELETE' THEN
        row_scope := OLD.scope; row_key := OLD.key;
    ELSE
        row_scope := NEW.scope; row_key := NEW.key;
    END IF;
    home := idempotency_reshard.routing_hash(row_scope, row_key) & (parts - 1);
    IF home = part THEN
        RETURN CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
    END IF;
    IF TG_OP = 'DELETE' AND (OLD.expires_at <= clock_timestamp()
                             OR current_setting('idempotency_reshard.cleanup', true) = 'on') THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'pg_idempotency: this key has moved to partition % of the proxy', home
        USING ERRCODE = 'serialization_failure',
              DETAIL = format('Partition %s of %s holds the keys whose routing hash ends in %s; this key''s is %s.',
                              part, parts, part, home),
              HINT = 'Retry the call: the proxy routes it to the key''s partition.';
END
$fn$;
REVOKE ALL ON FUNCTION idempotency_reshard.guard() FROM PUBLIC;
