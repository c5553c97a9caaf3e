-- pg_idempotency, portable SQL variant: upgrade from 0.8.0 to 0.9.0. Run it like the
-- install, with the same -v schema= and -v storage=, as the role that installed:
--
--   psql -f sql/upgrade/pg_idempotency--0.8.0--0.9.0.sql
--
-- Each change is one block below, opened by a `-- 0.9.0: <what it does>` line.
--
-- One transaction (however psql runs it); it changes nothing unless <storage>.installed
-- says 0.8.0. Hand-written; fixed once 0.9.0 is released. tests/tests/consistency/upgrade.rs
-- installs 0.8.0 (the base script and the upgrades up to it), upgrades, and compares every
-- object with a fresh 0.9.0 install.
\ir ../include/find-install.sql
SELECT pg_catalog.set_config('idem_upgrade.found', version, true) AS idem_found_version,
       version OPERATOR(pg_catalog.=) '0.8.0' AS idem_from
FROM :"storage".installed \gset
\if :idem_from
\else
DO $$ BEGIN
    RAISE EXCEPTION 'this script upgrades the portable variant from 0.8.0, not from %',
            pg_catalog.current_setting('idem_upgrade.found')
        USING ERRCODE = 'object_not_in_prerequisite_state',
              DETAIL = 'The storage schema given says version '
                       || pg_catalog.current_setting('idem_upgrade.found') || ' is installed.',
              HINT = 'Apply the scripts of sql/upgrade/ in order, starting from the installed version.';
END $$;
\endif

SET LOCAL search_path = pg_catalog, :"storage", pg_temp;

-- 0.9.0: a duplicate of a call whose holder stopped beating is told the lease's time left
-- and stops waiting. records gains lease_length (last): the length of the lease the holder
-- last took (its claim, a takeover, each idem_extend). With less than a third of it left
-- the holder has stopped beating (the client's heartbeat renews every third): idem_begin
-- answers in_progress at once, whatever its wait, with retry_after the lease's time left.
-- Records claimed before the upgrade keep NULL: their duplicates keep 0.8.0's rule until
-- their holder's next extension or a new claim. _idem_begin_one and idem_extend are
-- replaced in place (their privileges and comments stay), text for text as the 0.9.0
-- install script has them.
ALTER TABLE :"storage".records ADD COLUMN lease_length interval;

CREATE OR REPLACE FUNCTION :"storage"._idem_begin_one(
    scope text, key text, request jsonb, given_fp bytea, ttl interval, lease interval,
    on_cache_hit text, on_mismatch text, wait interval, claim_token uuid,
    unresolved_ttl interval, refusals_answer boolean)
RETURNS :"storage".begin_result
LANGUAGE plpgsql VOLATILE AS $fn$
#variable_conflict use_column
DECLARE
    res begin_result;
    lim record := _idem_limits();
    -- The call, validated; durations in microseconds. Its owner is the caller: the record
    -- of another role with the same scope and key is another call, never read here.
    c_owner regrole := _idem_caller();
    c_scope text;
    c_key text;
    c_fp bytea;
    c_ttl bigint;
    c_lease bigint;
    c_hit text;
    c_mismatch text;
    c_wait bigint;
    c_unresolved bigint;
    -- The settings in force: the call's, else the scope's policy, else the defaults.
    s_ttl bigint;
    s_lease bigint;
    s_hit text;
    s_mismatch text;
    s_unresolved bigint;
    resolved boolean := false;
    -- The record as read, and its scope's policy.
    r_state text;
    r_fence bigint;
    r_attempt integer;
    r_fp bytea;
    r_upstream uuid;
    r_response jsonb;
    r_created timestamptz;
    r_lease_until timestamptz;
    r_expires timestamptz;
    r_token uuid;
    r_recovered boolean;
    r_claimed timestamptz;
    r_unresolved timestamptz;
    r_length interval;
    p_ttl interval;
    p_lease interval;
    p_hit text;
    p_mismatch text;
    p_unresolved interval;
    -- A claim, computed before the statement that writes it.
    n_fence bigint;
    n_attempt integer;
    n_fp bytea;
    n_upstream uuid;
    n_created timestamptz;
    n_lease_until timestamptz;
    n_expires timestamptz;
    n_recovered boolean;
    n_unresolved timestamptz;
    claim boolean;
    started timestamptz := clock_timestamp();
    now timestamptz;
    remaining numeric;
    -- Time spent asleep waiting: the wait ends when it or the wall clock reaches `wait`,
    -- so a clock set back during the wait does not stretch it.
    slept numeric := 0;
    nap numeric;
    pause numeric := 2000;
    written integer;
BEGIN
    c_scope := _idem_scope(_idem_begin_one.scope, lim.max_scope_bytes);
    c_fp := _idem_begin_one.given_fp;
    IF c_fp IS NULL AND _idem_begin_one.request IS NOT NULL THEN
        c_fp := _idem_hash(_idem_begin_one.request);
    END IF;
    IF _idem_begin_one.key IS NULL THEN
        IF c_fp IS NULL THEN
            PERFORM _idem_fail('22023', 'key must not be null without a request',
                'A NULL key asks for the key to be derived from the request, and no request was given.',
                'Pass a key, or a request to derive it from (HASH_INPUT).');
        END IF;
        c_key := encode(c_fp, 'hex');
    ELSE
        c_key := _idem_key(_idem_begin_one.key, lim.max_key_bytes);
    END IF;
    -- Every outcome answers the key the call used (derived or given).
    res.key := c_key;
    c_ttl := _idem_duration('ttl', _idem_begin_one.ttl, false, lim.max_ttl_micros);
    c_lease := _idem_duration('lease', _idem_begin_one.lease, false, lim.max_ttl_micros);
    c_hit := _idem_on_cache_hit(_idem_begin_one.on_cache_hit);
    c_mismatch := _idem_on_mismatch(_idem_begin_one.on_mismatch);
    c_wait := coalesce(_idem_duration('wait', _idem_begin_one.wait, true, lim.max_ttl_micros), 0);
    c_unresolved := _idem_duration('unresolved_ttl', _idem_begin_one.unresolved_ttl, false,
                                   lim.max_ttl_micros);
    IF c_lease IS NOT NULL AND c_ttl IS NOT NULL THEN
        PERFORM _idem_effective_lease(c_lease, NULL, c_ttl);
    END IF;

    FOR race IN 1..1000 LOOP
        now := clock_timestamp();
        SELECT r.state, r.fence, r.attempt, r.fingerprint, r.upstream_key, r.response,
               r.created_at, r.lease_until, r.expires_at, r.claim_token, r.recovered,
               r.claimed_at, r.unresolved_until, r.lease_length, p.ttl, p.lease, p.on_cache_hit,
               p.on_mismatch, p.unresolved_ttl
        INTO r_state, r_fence, r_attempt, r_fp, r_upstream, r_response,
             r_created, r_lease_until, r_expires, r_token, r_recovered,
             r_claimed, r_unresolved, r_length, p_ttl, p_lease, p_hit, p_mismatch, p_unresolved
        FROM (SELECT) AS one
        LEFT JOIN records AS r ON r.scope = c_scope AND r.key = c_key AND r.owner = c_owner
        LEFT JOIN policies AS p ON p.scope = c_scope;

        IF NOT resolved THEN
            s_ttl := _idem_effective_ttl(c_ttl, _idem_micros(p_ttl)::bigint, lim.max_ttl_micros);
            s_lease := _idem_effective_lease(c_lease, _idem_micros(p_lease)::bigint, s_ttl);
            s_hit := coalesce(c_hit, _idem_on_cache_hit(p_hit), 'return_cached');
            s_mismatch := coalesce(c_mismatch, _idem_on_mismatch(p_mismatch), 'reject');
            -- The call's, else the scope's policy, else pg_idempotency.unresolved_ttl; never
            -- above max_ttl (which may have been lowered since the policy was set).
            s_unresolved := least(coalesce(c_unresolved, _idem_micros(p_unresolved)::bigint,
                _idem_default_unresolved_ttl_micros()), lim.max_ttl_micros);
            resolved := true;
        END IF;

        claim := false;
        IF r_state IS NULL OR (r_expires <= now AND coalesce(r_unresolved <= now, true)) THEN
            -- Absent or expired: a fresh call. A record whose outcome is unknown (a lapsed
            -- claim, a mark) is live until its unresolved bound, past its ttl.
            n_fence := nextval('fence_seq');
            n_attempt := 1;
            n_fp := c_fp;
            n_upstream := gen_random_uuid();
            n_created := now;
            n_lease_until := now + _idem_interval(s_lease);
            n_expires := now + _idem_interval(s_ttl);
            n_recovered := false;
            n_unresolved := n_lease_until + _idem_interval(s_unresolved);
            claim := true;
        ELSE
            IF c_fp IS NOT NULL AND r_fp IS NOT NULL AND s_mismatch = 'reject' AND c_fp <> r_fp THEN
                IF _idem_begin_one.refusals_answer THEN
                    res.outcome := 'mismatch';
                    RETURN res;
                END IF;
                PERFORM _idem_fail('IK001', 'idempotency key reused with a different request',
                    format('The key was first used with a request of fingerprint \x%s; this request''s fingerprint is \x%s.',
                           encode(r_fp, 'hex'), encode(c_fp, 'hex')),
                    'Use a new key for a different request, or on_mismatch => ''ignore'' when only part of the request names the call.');
            END IF;
            IF r_state = 'in_progress' AND r_lease_until > now THEN
                -- The caller's own claim, repeated because its answer was lost: the claim
                -- as it stands, at once (no wait) and unchanged (the lease is not renewed).
                IF _idem_begin_one.claim_token IS NOT NULL AND _idem_begin_one.claim_token = r_token THEN
                    res.outcome := 'claimed';
                    res.fence := r_fence;
                    res.attempt := r_attempt;
                    res.recovered := r_recovered;
                    res.upstream_key := r_upstream;
                    res.lease_until := r_lease_until;
                    res.expires_at := r_expires;
                    RETURN res;
                END IF;
                -- A holder with less than a third of the lease it last took left has stopped
                -- beating (protocol::estimate; NULL: claimed before 0.9.0): the wait ends at
                -- once, and the duplicate is told the lease's time left, after which a retry
                -- takes the call over or finds it done.
                IF r_length IS NOT NULL
                   AND _idem_between(now, r_lease_until) * 3 < _idem_micros(r_length) THEN
                    res.outcome := 'in_progress';
                    res.attempt := r_attempt;
                    res.recovered := false;
                    res.upstream_key := r_upstream;
                    res.lease_until := r_lease_until;
                    res.expires_at := r_expires;
                    res.retry_after := r_lease_until - now;
                    RETURN res;
                END IF;
                remaining := c_wait - greatest(slept, _idem_between(started, now));
                IF remaining <= 0 THEN
                    res.outcome := 'in_progress';
                    res.attempt := r_attempt;
                    res.recovered := false;
                    res.upstream_key := r_upstream;
                    res.lease_until := r_lease_until;
                    res.expires_at := r_expires;
                    res.retry_after := _idem_retry_after(c_scope, c_owner,
                        coalesce(r_claimed, r_created), now, r_lease_until);
                    RETURN res;
                END IF;
                nap := least(greatest(least(pause, remaining) / 1000000, 0.001), 1);
                PERFORM pg_sleep(nap);
                slept := slept + nap * 1000000;
                pause := least(pause * 2, 100000);
            ELSIF r_state = 'in_progress'
                  OR (r_state = 'failed' AND s_hit = 'return_cached_if_success') THEN
                -- A lapsed lease (its outcome is unknown: recovered) or a failure to run
                -- again: the same call, so its upstream key and creation time stay. A sequence
                -- shared by many sessions does not alone order fences per key; greatest() does.
                n_fence := greatest(nextval('fence_seq'), r_fence + 1);
                n_attempt := CASE WHEN r_attempt < 2147483647 THEN r_attempt + 1 ELSE r_attempt END;
                -- The first request's fingerprint stays the call's identity.
                n_fp := coalesce(r_fp, c_fp);
                n_upstream := r_upstream;
                n_created := r_created;
                n_lease_until := now + _idem_interval(s_lease);
                n_expires := greatest(now + _idem_interval(s_ttl), r_expires);
                n_recovered := r_state = 'in_progress';
                n_unresolved := n_lease_until + _idem_interval(s_unresolved);
                claim := true;
            ELSIF s_hit = 'fail_fast' THEN
                IF _idem_begin_one.refusals_answer THEN
                    res.outcome := 'refused';
                    RETURN res;
                END IF;
                PERFORM _idem_fail('IK002', 'repeat of a completed call refused',
                    format('The call %s at attempt %s; on_cache_hit is ''fail_fast''.', r_state, r_attempt),
                    'Look at the stored result with idem_lookup, or use a new key to run the call again.');
            ELSE
                res.outcome := 'replay';
                res.attempt := r_attempt;
                res.recovered := false;
                res.upstream_key := r_upstream;
                res.succeeded := r_state = 'succeeded';
                res.response := r_response;
                res.lease_until := r_lease_until;
                res.expires_at := r_expires;
                RETURN res;
            END IF;
        END IF;

        IF claim THEN
            PERFORM _idem_durable_commit();
            IF r_state IS NULL THEN
                INSERT INTO records AS r (scope, key, state, fence, attempt, fingerprint,
                                          upstream_key, created_at, lease_until, expires_at, ttl, owner,
                                          claim_token, recovered, claimed_at, unresolved_until,
                                          lease_length)
                VALUES (c_scope, c_key, 'in_progress', n_fence, 1, n_fp, n_upstream, n_created,
                        n_lease_until, n_expires, _idem_interval(s_ttl), c_owner,
                        _idem_begin_one.claim_token, false, now, n_unresolved,
                        _idem_interval(s_lease))
                ON CONFLICT (scope, key, owner) DO NOTHING;
            ELSE
                -- Only if the record is still as it was read (a completion or an extension in
                -- between wins).
                UPDATE records AS r
                SET state = 'in_progress', fence = n_fence, attempt = n_attempt,
                    fingerprint = n_fp, upstream_key = n_upstream, response = NULL,
                    created_at = n_created, completed_at = NULL, lease_until = n_lease_until,
                    expires_at = n_expires, ttl = _idem_interval(s_ttl),
                    claim_token = _idem_begin_one.claim_token, recovered = n_recovered,
                    claimed_at = now, unresolved_until = n_unresolved,
                    lease_length = _idem_interval(s_lease)
                WHERE r.scope = c_scope AND r.key = c_key AND r.owner = c_owner AND r.fence = r_fence
                  AND r.state = r_state
                  AND coalesce(r.lease_until, '-infinity') = coalesce(r_lease_until, '-infinity');
            END IF;
            GET DIAGNOSTICS written = ROW_COUNT;
            IF written = 1 THEN
                res.outcome := 'claimed';
                res.fence := n_fence;
                res.attempt := n_attempt;
                res.recovered := n_recovered;
                res.upstream_key := n_upstream;
                res.lease_until := n_lease_until;
                res.expires_at := n_expires;
                RETURN res;
            END IF;
        END IF;
    END LOOP;
    PERFORM _idem_contention();
END
$fn$;

CREATE OR REPLACE FUNCTION :"schema".idem_extend(
    scope text,
    key   text,
    fence bigint,
    lease interval DEFAULT NULL)
RETURNS :"storage".extend_result
VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, :"storage", pg_temp
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    res extend_result;
    lim record := _idem_limits();
    c_owner regrole := _idem_caller();
    c_scope text := _idem_scope(idem_extend.scope, lim.max_scope_bytes);
    c_key text := _idem_key(idem_extend.key, lim.max_key_bytes);
    c_fence bigint := _idem_fence(idem_extend.fence);
    c_lease bigint := _idem_duration('lease', idem_extend.lease, false, lim.max_ttl_micros);
    held record;
    now timestamptz;
    n_lease bigint;
    n_lease_until timestamptz;
    n_expires timestamptz;
    written integer;
BEGIN
    FOR race IN 1..1000 LOOP
        now := clock_timestamp();
        held := _idem_read_held(c_scope, c_key, c_owner, c_fence, now);
        IF held.state <> 'in_progress' THEN
            PERFORM _idem_lease_lost('The call was already completed; there is no lease to extend.');
        END IF;
        n_lease := _idem_effective_lease(c_lease, _idem_micros(held.policy_lease)::bigint,
                                         _idem_micros(held.ttl)::bigint);
        n_lease_until := now + _idem_interval(n_lease);
        -- A record never expires while its lease is live.
        n_expires := greatest(held.expires_at, n_lease_until);
        PERFORM _idem_durable_commit();
        -- The unresolved bound moves with the lease, by the same length; the length taken
        -- tells a duplicate whether the holder still beats.
        UPDATE records AS r SET lease_until = n_lease_until, expires_at = n_expires,
            unresolved_until = n_lease_until + (r.unresolved_until - r.lease_until),
            lease_length = _idem_interval(n_lease)
        WHERE r.scope = c_scope AND r.key = c_key AND r.owner = c_owner AND r.fence = c_fence
          AND r.state = 'in_progress';
        GET DIAGNOSTICS written = ROW_COUNT;
        IF written = 1 THEN
            res.lease_until := n_lease_until;
            res.expires_at := n_expires;
            RETURN res;
        END IF;
    END LOOP;
    PERFORM _idem_contention();
END
$fn$;

UPDATE :"storage".installed SET version = '0.9.0';

\if :_idem_own_transaction
COMMIT;
\endif
