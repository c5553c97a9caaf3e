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

-- Whose records a proxied call acts on: PL/Proxy connects to the partition as current_user,
-- and the partition takes that role as the owner, while a call made on the partition itself
-- is owned by the outer role (SET ROLE and SET SESSION AUTHORIZATION count; an application's
-- SECURITY DEFINER function does not). Where the two differ (inside such a function owned
-- by another role) the call is refused, so a wrapper never puts its callers into its
-- owner's key space; a grant role (idempotency_user, idempotency_admin) owns no records
-- anywhere and is refused as the partitions refuse it (IK006, the same words). True, or an
-- error: STABLE and without arguments, so a query calling it in WHERE checks it once,
-- before it asks any partition.
CREATE FUNCTION idempotency._idem_proxied_caller() RETURNS boolean
STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
LANGUAGE plpgsql AS $fn$
DECLARE
    outer_role text := CASE WHEN pg_catalog.current_setting('role') OPERATOR(pg_catalog.=) 'none'
                            THEN session_user::text
                            ELSE pg_catalog.current_setting('role') END;
BEGIN
    IF outer_role IN ('idempotency_user', 'idempotency_admin') THEN
        RAISE EXCEPTION 'a grant role cannot own idempotency records'
            USING ERRCODE = 'IK006',
                  DETAIL = pg_catalog.format('The call was made as %s, which every role granted it may become with SET ROLE: its records would be shared by all of them.', outer_role),
                  HINT = 'Call as the application''s own role. Grant it with GRANT idempotency_user TO tenant WITH INHERIT TRUE, SET FALSE (PostgreSQL 16 and later); a NOINHERIT role gets a group role of its own: CREATE ROLE tenant_calls NOLOGIN; GRANT idempotency_user TO tenant_calls; GRANT tenant_calls TO tenant; then SET ROLE tenant_calls.';
    END IF;
    IF outer_role OPERATOR(pg_catalog.<>) current_user::text THEN
        RAISE EXCEPTION 'pg_idempotency: a call through the PL/Proxy layer must run as the role that makes it'
            USING ERRCODE = 'feature_not_supported',
                  DETAIL = pg_catalog.format('The call was made by role %s as role %s (a SECURITY DEFINER function): PL/Proxy would connect to the partition as %s, and act on that role''s records instead of the caller''s.', pg_catalog.quote_ident(outer_role), pg_catalog.quote_ident(current_user::text), pg_catalog.quote_ident(current_user::text)),
                  HINT = 'Call the API outside the SECURITY DEFINER function, or make the function SECURITY INVOKER; on a partition itself, such a function''s callers keep their own records.';
    END IF;
    RETURN true;
END
$fn$;

-- The partition of a proxied call that acts on records as its caller: its routing hash,
-- once the caller is checked.
CREATE FUNCTION idempotency._idem_route(scope text, key text)
RETURNS integer
STABLE CALLED ON NULL INPUT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
LANGUAGE sql AS $fn$
    SELECT idempotency._idem_partition(scope, key) WHERE idempotency._idem_proxied_caller()
$fn$;

-- idem_begin's partition (its caller checked, as _idem_route below): with a NULL key, the key the partition will derive from the
-- request (the hash of its canonical JSON in lowercase hex, computed here by the same SQL
-- as the portable variant's), so that the call meets the same call made with its key
-- spelled out.
CREATE FUNCTION idempotency._idem_begin_partition(scope text, key text, request jsonb)
RETURNS integer
STABLE CALLED ON NULL INPUT PARALLEL SAFE
SET search_path = pg_catalog, idempotency, pg_temp
LANGUAGE sql AS $fn$
    SELECT idempotency._idem_route(scope, COALESCE(key,
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

