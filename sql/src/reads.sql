-- What only the holder of a claim may do, named by its fence: read the record, decide, then
-- write with a statement guarded by the fence; if the record changed in between, read
-- again. A stale fence is an error, never a silent no-op.

-- The live record of `owner` that `fence` holds: its state, ttl and expiry, and its
-- scope's policy fields; or, in `lost`, why the fence does not hold it (the detail of lease
-- lost). Another owner's record is not looked at: a fence of theirs is lost here exactly as
-- a made-up one on a key nobody used.
CREATE FUNCTION :"storage"._idem_read_claim(
    scope text, key text, owner regrole, fence bigint, now timestamptz,
    OUT state text, OUT ttl interval, OUT expires_at timestamptz,
    OUT policy_lease interval, OUT policy_cache_failures boolean, OUT lost text)
LANGUAGE plpgsql VOLATILE AS $fn$
#variable_conflict use_column
DECLARE
    r_fence bigint;
    r_unresolved timestamptz;
BEGIN
    SELECT r.state, r.fence, r.ttl, r.expires_at, r.unresolved_until, p.lease, p.cache_failures
    INTO state, r_fence, ttl, expires_at, r_unresolved, policy_lease, policy_cache_failures
    FROM (SELECT) AS one
    LEFT JOIN records AS r ON r.scope = _idem_read_claim.scope AND r.key = _idem_read_claim.key
                          AND r.owner = _idem_read_claim.owner
    LEFT JOIN policies AS p ON p.scope = _idem_read_claim.scope;
    IF state IS NULL OR (expires_at <= now AND coalesce(r_unresolved <= now, true)) THEN
        lost := 'The key has no live record: it was released, forgotten, never claimed, or it expired.';
    ELSIF r_fence <> _idem_read_claim.fence THEN
        lost := CASE WHEN r_fence > _idem_read_claim.fence
            THEN 'The record is held under a later fence: the call was taken over or claimed again.'
            ELSE 'The record is held under a different fence.' END;
    END IF;
END
$fn$;

-- The same, or lease lost.
CREATE FUNCTION :"storage"._idem_read_held(
    scope text, key text, owner regrole, fence bigint, now timestamptz,
    OUT state text, OUT ttl interval, OUT expires_at timestamptz,
    OUT policy_lease interval, OUT policy_cache_failures boolean)
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    held record := _idem_read_claim(scope, key, owner, fence, now);
BEGIN
    IF held.lost IS NOT NULL THEN
        PERFORM _idem_lease_lost(held.lost);
    END IF;
    state := held.state;
    ttl := held.ttl;
    expires_at := held.expires_at;
    policy_lease := held.policy_lease;
    policy_cache_failures := held.policy_cache_failures;
END
$fn$;

-- idem_lookup's body (PL/pgSQL refuses result columns named like the parameters). The
-- arguments are checked first, then whose record it may see, then it reads.
CREATE FUNCTION :"storage"._idem_lookup(p_scope text, p_key text, p_owner regrole)
RETURNS SETOF :"storage".lookup_result
LANGUAGE plpgsql VOLATILE ROWS 1 AS $fn$
DECLARE
    lim record := _idem_limits();
    c_scope text := _idem_scope(p_scope, lim.max_scope_bytes);
    c_key text := _idem_key(p_key, lim.max_key_bytes);
    c_owner regrole := _idem_acting_owner(p_owner);
    now timestamptz := clock_timestamp();
BEGIN
    -- The record as the API shows it: the claim token stays inside (it holds the claim).
    RETURN QUERY
    SELECT r.scope, r.key, r.state, r.fence, r.attempt, r.fingerprint, r.upstream_key,
           r.response, r.created_at, r.completed_at, r.lease_until, r.expires_at, r.ttl,
           r.owner
    FROM records AS r
    WHERE r.scope = c_scope AND r.key = c_key AND r.owner = c_owner
      AND (r.expires_at > now OR r.unresolved_until > now);
END
$fn$;
