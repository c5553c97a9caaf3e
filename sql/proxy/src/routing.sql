-- ---------------------------------------------------------------------------------------
-- Routing: which partition holds a record.
-- ---------------------------------------------------------------------------------------
-- The routing hash of a scope and key: the first four bytes of SHA-256 over the UTF-8
-- bytes of scope, a NUL byte and key, as a signed integer; PL/Proxy takes its low bits
-- (hash & (partitions - 1)). SHA-256 of the UTF-8 bytes is the same on every PostgreSQL
-- version, architecture and database encoding, and any client can compute it; hashtext is
-- an internal hash that PostgreSQL does not promise to keep across major versions, and
-- it refuses NUL. Text cannot hold NUL, so the separator is unambiguous. A NULL scope or
-- key routes like an empty one: the partition refuses it with its own error.
CREATE FUNCTION idempotency._idem_partition(scope text, key text)
RETURNS integer
IMMUTABLE CALLED ON NULL INPUT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
LANGUAGE sql AS $fn$
    SELECT ('x' OPERATOR(pg_catalog.||) pg_catalog.encode(pg_catalog.substr(pg_catalog.sha256(
                pg_catalog.convert_to(COALESCE(scope, ''), 'UTF8')
                OPERATOR(pg_catalog.||) '\x00'::pg_catalog.bytea
                OPERATOR(pg_catalog.||) pg_catalog.convert_to(COALESCE(key, ''), 'UTF8')),
            1, 4), 'hex'))::pg_catalog.bit(32)::pg_catalog.int4
$fn$;
COMMENT ON FUNCTION idempotency._idem_partition(text, text) IS
    'The routing hash of a record: the first 4 bytes of sha256(scope || NUL || key) as int4';

-- idem_begin's partition: with a NULL key, the key the partition will derive from the
-- request (the hash of its canonical JSON in lowercase hex, computed here by the same SQL
-- as the portable variant's), so that the call meets the same call made with its key
-- spelled out.
CREATE FUNCTION idempotency._idem_begin_partition(scope text, key text, request jsonb)
RETURNS integer
IMMUTABLE CALLED ON NULL INPUT PARALLEL SAFE
SET search_path = pg_catalog, idempotency, pg_temp
LANGUAGE sql AS $fn$
    SELECT idempotency._idem_partition(scope, COALESCE(key,
        pg_catalog.encode(idempotency._idem_hash(request), 'hex')))
$fn$;

-- A batch's array with one element per item, NULL ones included, as PL/Proxy's SPLIT needs
-- it (a NULL array becomes n NULLs of its type).
CREATE FUNCTION idempotency._idem_padded(a anyarray, n integer)
RETURNS anyarray
IMMUTABLE CALLED ON NULL INPUT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
LANGUAGE sql AS $fn$
    SELECT ARRAY(SELECT a[i] FROM pg_catalog.generate_series(1, n) AS i ORDER BY i)
$fn$;
