-- pg_idempotency, portable SQL variant: upgrade from 0.7.0 to 0.8.0. Run it like the
-- install, with the same -v schema= and -v storage=, as the role that installed:
--
--   psql -f sql/upgrade/pg_idempotency--0.7.0--0.8.0.sql
--
-- Each change is one block below, opened by a `-- 0.8.0: <what it does>` line.
--
-- One transaction (however psql runs it); it changes nothing unless <storage>.installed
-- says 0.7.0. Hand-written; fixed once 0.8.0 is released. tests/tests/consistency/upgrade.rs
-- installs 0.7.0 (the base script and the upgrades up to it), upgrades, and compares every
-- object with a fresh 0.8.0 install.
\ir ../include/find-install.sql
SELECT pg_catalog.set_config('idem_upgrade.found', version, true) AS idem_found_version,
       version OPERATOR(pg_catalog.=) '0.7.0' AS idem_from
FROM :"storage".installed \gset
\if :idem_from
\else
DO $$ BEGIN
    RAISE EXCEPTION 'this script upgrades the portable variant from 0.7.0, not from %',
            pg_catalog.current_setting('idem_upgrade.found')
        USING ERRCODE = 'object_not_in_prerequisite_state',
              DETAIL = 'The storage schema given says version '
                       || pg_catalog.current_setting('idem_upgrade.found') || ' is installed.',
              HINT = 'Apply the scripts of sql/upgrade/ in order, starting from the installed version.';
END $$;
\endif

SET LOCAL search_path = pg_catalog, :"storage", pg_temp;



-- 0.8.0: unresolved records outlive their ttl; operators list and resolve them (audited)
-- A record whose outcome is unknown (a claim whose lease lapsed, a record holding one of
-- the client's marks) is kept past its ttl until an operator resolves it or its unresolved
-- bound passes (idem_begin's unresolved_ttl, else pg_idempotency.unresolved_ttl, 7 days):
-- records gains unresolved_until and policies unresolved_ttl (last; idem_set_policy takes
-- it, idem_policies shows it); the claims in progress and the marks stored at the
-- upgrade get the default bound, so a crash from before the upgrade is kept too.
ALTER TABLE :"storage".records ADD COLUMN unresolved_until timestamptz;

ALTER TABLE :"storage".policies ADD COLUMN unresolved_ttl interval;

-- Who resolved which unresolved record, when, how, and the record as it stood before
-- (idem_resolve): read through idem_resolutions.
CREATE TABLE :"storage".resolutions (
    resolved_at  timestamptz NOT NULL,
    resolved_by  regrole     NOT NULL,
    action       text        NOT NULL
                 CHECK (action IN ('succeeded', 'failed', 'release', 'forget')),
    owner        regrole     NOT NULL,
    scope        text        NOT NULL,
    key          text        NOT NULL,
    fence        bigint      NOT NULL,
    state        text        NOT NULL,
    why          text        NOT NULL,
    attempt      integer     NOT NULL,
    upstream_key uuid        NOT NULL,
    response     jsonb
);
COMMENT ON TABLE :"storage".resolutions IS
    'pg_idempotency: who resolved an unresolved record, when, how, and the record before';

CREATE TYPE :"storage".unresolved_record AS (
    owner        regrole,
    scope        text,
    key          text,
    state        text,
    why          text,
    fence        bigint,
    attempt      integer,
    upstream_key uuid,
    since        timestamptz,
    until        timestamptz,
    response     jsonb);
COMMENT ON TYPE :"storage".unresolved_record IS 'A record awaiting an operator''s decision, as idem_unresolved lists it';

-- How long past its ttl a record whose outcome is unknown is kept (a lapsed claim, a
-- mark): the extension's pg_idempotency.unresolved_ttl, 7 days unless set
-- (docs/decisions.md, "Unresolved calls outlive their ttl").
CREATE FUNCTION :"storage"._idem_default_unresolved_ttl_micros() RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE
RETURN _idem_setting('pg_idempotency.unresolved_ttl', 604800, 's', 1, 2147483647) * 1000000;

-- Whether a stored response is one of the client's marks (client/src/marks.rs): an object
-- whose only member pg_idempotency holds a string `outcome_unknown` (an earlier attempt may
-- have had its effect, the tool refused to run again) or `unrecorded` (the effect happened,
-- its result was not stored). Such a record's outcome is unknown to its callers.
CREATE FUNCTION :"storage"._idem_mark(response jsonb) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE WHEN pg_catalog.jsonb_typeof(response) = 'object'
                 AND (SELECT pg_catalog.count(*) FROM pg_catalog.jsonb_object_keys(response)) = 1
            THEN CASE WHEN pg_catalog.jsonb_typeof(response -> 'pg_idempotency' -> 'unrecorded') = 'string'
                      THEN 'unrecorded'
                      WHEN pg_catalog.jsonb_typeof(response -> 'pg_idempotency' -> 'outcome_unknown') = 'string'
                      THEN 'outcome_unknown' END END;

UPDATE :"storage".records
SET unresolved_until = CASE WHEN state = 'in_progress' THEN lease_until ELSE completed_at END
    + _idem_interval(least(_idem_default_unresolved_ttl_micros(), (_idem_limits()).max_ttl_micros))
WHERE (state = 'in_progress' AND lease_until IS NOT NULL)
   OR (completed_at IS NOT NULL AND _idem_mark(response) IS NOT NULL);

DROP FUNCTION :"storage"._idem_begin_one(text, text, jsonb, bytea, interval, interval, text, text, interval, uuid, boolean);

-- The claims of idem_begin and idem_complete, for one call, and the checks of a batch's
-- arrays: what idem_begin/idem_complete and their batch forms share. With refusals_answer
-- (a batch's item), a mismatch or a refused repeat is answered as the outcome 'mismatch' or
-- 'refused', and a lost lease as `lost`, instead of raised: one item's refusal must not
-- undo the other items' claims. given_fp is the request's fingerprint when the caller has
-- computed it already (a batch orders its items by their keys, derived ones included).
CREATE FUNCTION :"storage"._idem_begin_one(
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
               r.claimed_at, r.unresolved_until, p.ttl, p.lease, p.on_cache_hit, p.on_mismatch,
               p.unresolved_ttl
        INTO r_state, r_fence, r_attempt, r_fp, r_upstream, r_response,
             r_created, r_lease_until, r_expires, r_token, r_recovered,
             r_claimed, r_unresolved, p_ttl, p_lease, p_hit, p_mismatch, p_unresolved
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
                                          claim_token, recovered, claimed_at, unresolved_until)
                VALUES (c_scope, c_key, 'in_progress', n_fence, 1, n_fp, n_upstream, n_created,
                        n_lease_until, n_expires, _idem_interval(s_ttl), c_owner,
                        _idem_begin_one.claim_token, false, now, n_unresolved)
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
                    claimed_at = now, unresolved_until = n_unresolved
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

CREATE OR REPLACE FUNCTION :"storage"._idem_complete_one(
    scope text, key text, fence bigint, response jsonb, succeeded boolean,
    cache_failure boolean, refusals_answer boolean,
    OUT state text, OUT expires_at timestamptz, OUT lost boolean)
LANGUAGE plpgsql VOLATILE AS $fn$
#variable_conflict use_column
DECLARE
    lim record := _idem_limits();
    c_owner regrole := _idem_caller();
    c_scope text := _idem_scope(_idem_complete_one.scope, lim.max_scope_bytes);
    c_key text := _idem_key(_idem_complete_one.key, lim.max_key_bytes);
    c_fence bigint := _idem_fence(_idem_complete_one.fence);
    held record;
    cache boolean;
    new_state text;
    now timestamptz;
    written integer;
    -- The client's mark, if the response is one (unrecorded, outcome_unknown): kept past
    -- the ttl and counted when it is written, not when a repeat finds it written.
    c_mark text := _idem_mark(_idem_complete_one.response);
BEGIN
    lost := false;
    PERFORM _idem_check_response(_idem_complete_one.response, lim.max_response_bytes);
    IF _idem_complete_one.succeeded IS NULL THEN
        PERFORM _idem_fail('22023', 'succeeded must not be null',
            'A completion records whether the call succeeded.',
            'Pass succeeded => true or false.');
    END IF;
    FOR race IN 1..1000 LOOP
        now := clock_timestamp();
        held := _idem_read_claim(c_scope, c_key, c_owner, c_fence, now);
        IF held.lost IS NOT NULL THEN
            IF _idem_complete_one.refusals_answer THEN
                lost := true;
                RETURN;
            END IF;
            PERFORM _idem_lease_lost(held.lost);
        END IF;
        IF held.state <> 'in_progress' THEN
            -- Completed by this very fence before (its first reply may have been lost): keep
            -- what is stored.
            state := held.state;
            expires_at := held.expires_at;
            RETURN;
        END IF;
        PERFORM _idem_durable_commit();
        -- The call's word, else its scope's policy; failures are not cached by default.
        cache := coalesce(_idem_complete_one.cache_failure, held.policy_cache_failures, false);
        IF NOT _idem_complete_one.succeeded AND NOT cache THEN
            -- An uncached failure leaves nothing behind, so a retry runs the call again.
            DELETE FROM records AS r
            WHERE r.scope = c_scope AND r.key = c_key AND r.owner = c_owner AND r.fence = c_fence
              AND r.state = 'in_progress';
            GET DIAGNOSTICS written = ROW_COUNT;
            IF written = 1 THEN
                state := 'absent';
                RETURN;
            END IF;
            CONTINUE;
        END IF;
        new_state := CASE WHEN _idem_complete_one.succeeded THEN 'succeeded' ELSE 'failed' END;
        UPDATE records AS r
        SET state = new_state, response = _idem_complete_one.response, completed_at = now,
            lease_until = NULL, expires_at = now + held.ttl,
            -- A mark's outcome is unknown: it is kept for the claim's unresolved bound.
            unresolved_until = CASE WHEN c_mark IS NOT NULL
                                    THEN now + (r.unresolved_until - r.lease_until) END
        WHERE r.scope = c_scope AND r.key = c_key AND r.owner = c_owner AND r.fence = c_fence
          AND r.state = 'in_progress';
        GET DIAGNOSTICS written = ROW_COUNT;
        IF written = 1 THEN
            IF c_mark IS NOT NULL THEN
                PERFORM _idem_count(c_owner, c_scope, 0, 0, 0, 0, 0,
                    (c_mark = 'unrecorded')::integer, (c_mark = 'outcome_unknown')::integer);
            END IF;
            state := new_state;
            expires_at := now + held.ttl;
            RETURN;
        END IF;
    END LOOP;
    PERFORM _idem_contention();
END
$fn$;

-- The live record of `owner` that `fence` holds: its state, ttl and expiry, and its
-- scope's policy fields; or, in `lost`, why the fence does not hold it (the detail of lease
-- lost). Another owner's record is not looked at: a fence of theirs is lost here exactly as
-- a made-up one on a key nobody used.
CREATE OR REPLACE FUNCTION :"storage"._idem_read_claim(
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

-- idem_lookup's body (PL/pgSQL refuses result columns named like the parameters). The
-- arguments are checked first, then whose record it may see, then it reads.
CREATE OR REPLACE FUNCTION :"storage"._idem_lookup(p_scope text, p_key text, p_owner regrole)
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

-- Why a live record awaits an operator at `now`, or NULL when it does not: its claim's
-- lease lapsed (its holder's outcome is unknown), or it holds one of the client's marks.
CREATE FUNCTION :"storage"._idem_unresolved_why(
    state text, lease_until timestamptz, response jsonb, now timestamptz)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE WHEN state = 'in_progress' THEN
                CASE WHEN lease_until <= now THEN 'lease_lapsed' END
            ELSE :"storage"._idem_mark(response) END;

-- Whose records an operator function acts on: `named`'s when the caller is that role or
-- has the privileges of idempotency_admin; NULL named: every owner's (NULL) for an admin
-- listing, else the caller's own (never a grant role's). The words are idem_lookup's.
CREATE FUNCTION :"storage"._idem_operator_owner(named regrole, every boolean)
RETURNS regrole
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $fn$
DECLARE
    caller regrole := CASE WHEN pg_catalog.current_setting('role') = 'none'
                           THEN pg_catalog.quote_ident(session_user)::regrole
                           ELSE pg_catalog.quote_ident(pg_catalog.current_setting('role'))::regrole END;
    admin boolean := pg_catalog.pg_has_role(caller::oid, 'idempotency_admin', 'USAGE');
BEGIN
    IF named IS NOT NULL AND (named = caller OR admin) THEN
        RETURN named;
    END IF;
    IF named IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = 'only members of idempotency_admin may see or resolve another role''s records',
            DETAIL = pg_catalog.format('The call named owner %s; the calling role is %s.', named, caller),
            HINT = 'Leave owner NULL to act on your own records, or grant idempotency_admin.';
    END IF;
    IF every AND admin THEN
        RETURN NULL;
    END IF;
    IF caller::text IN ('idempotency_user', 'idempotency_admin') THEN
        RAISE EXCEPTION USING ERRCODE = 'IK006',
            MESSAGE = 'a grant role cannot own idempotency records',
            DETAIL = pg_catalog.format('The call was made as %s, which every role granted it may become with SET ROLE: its records would be shared by all of them.', caller),
            HINT = 'Call as the application''s own role, or name the owner as a member of idempotency_admin.';
    END IF;
    RETURN caller;
END
$fn$;

-- idem_unresolved's rows: the live records of `owner` (NULL: as _idem_operator_owner
-- decides) that await a decision, oldest first.
CREATE FUNCTION :"storage"._idem_unresolved_rows(owner regrole)
RETURNS SETOF :"storage".unresolved_record
LANGUAGE plpgsql STABLE AS $fn$
DECLARE
    whose regrole := _idem_operator_owner(_idem_unresolved_rows.owner, true);
    now timestamptz := pg_catalog.clock_timestamp();
BEGIN
    RETURN QUERY
    SELECT u.owner, u.scope, u.key, u.state, u.why, u.fence, u.attempt, u.upstream_key,
           u.since, u.until, u.response
    FROM (SELECT r.owner, r.scope, r.key, r.state,
                 _idem_unresolved_why(r.state, r.lease_until, r.response, now) AS why,
                 r.fence, r.attempt, r.upstream_key,
                 coalesce(r.lease_until, r.completed_at) AS since,
                 greatest(r.expires_at, r.unresolved_until) AS until, r.response
          FROM records AS r
          WHERE (whose IS NULL OR r.owner = whose)
            AND (r.expires_at > now OR r.unresolved_until > now)) AS u
    WHERE u.why IS NOT NULL
    ORDER BY u.since, u.owner::text, u.scope, u.key;
END
$fn$;

-- idem_resolve's work: the record `fence` holds in `state`, still awaiting a decision, is
-- settled by `action` (succeeded or failed: the result the operator found is recorded;
-- release or forget: the record is removed, so the next call runs), and the resolution is
-- written to resolutions in the same transaction. A record that changed since it was
-- listed (completed, taken over, forgotten, expired) is refused with IK003, unchanged.
CREATE FUNCTION :"storage"._idem_resolve_one(
    scope text, key text, fence bigint, state text, action text, response jsonb,
    owner regrole)
RETURNS text
LANGUAGE plpgsql VOLATILE AS $fn$
#variable_conflict use_column
DECLARE
    whose regrole;
    r records%ROWTYPE;
    why text;
    now timestamptz := pg_catalog.clock_timestamp();
    limit_bytes bigint := (SELECT l.max_response_bytes FROM _idem_limits() AS l);
    bytes bigint;
BEGIN
    IF _idem_resolve_one.scope IS NULL OR _idem_resolve_one.key IS NULL
       OR _idem_resolve_one.fence IS NULL OR _idem_resolve_one.state IS NULL
       OR _idem_resolve_one.action IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = 'scope, key, fence, state and action must not be null',
            DETAIL = 'A resolution names the record as idem_unresolved listed it (scope, key, fence, state) and what to do.',
            HINT = 'Pass the row''s scope, key, fence and state, and action succeeded, failed, release or forget.';
    END IF;
    IF pg_catalog.octet_length(_idem_resolve_one.scope) > 2048
       OR pg_catalog.octet_length(_idem_resolve_one.key) > 2048 THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'scope or key is too long',
            DETAIL = 'No record has a scope or key longer than 2048 bytes.',
            HINT = 'Pass the scope and key idem_unresolved listed.';
    END IF;
    IF _idem_resolve_one.state NOT IN ('in_progress', 'succeeded', 'failed') THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'unknown state',
            DETAIL = pg_catalog.format('state is %L; a record is in_progress, succeeded or failed.', pg_catalog.left(_idem_resolve_one.state, 64)),
            HINT = 'Pass the state idem_unresolved listed.';
    END IF;
    IF _idem_resolve_one.action NOT IN ('succeeded', 'failed', 'release', 'forget') THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'unknown action',
            DETAIL = pg_catalog.format('action is %L.', pg_catalog.left(_idem_resolve_one.action, 64)),
            HINT = 'Pass succeeded or failed (with the result found), release (the call runs again) or forget.';
    END IF;
    IF _idem_resolve_one.action IN ('release', 'forget') AND _idem_resolve_one.response IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'a release or forget stores no response',
            DETAIL = pg_catalog.format('action %s removes the record; a response was given.', _idem_resolve_one.action),
            HINT = 'Pass response only with succeeded or failed.';
    END IF;
    IF _idem_mark(_idem_resolve_one.response) IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'a resolution records a result, not a mark',
            DETAIL = 'The response is one of the client''s marks: the outcome would stay unknown.',
            HINT = 'Pass the result found, or release or forget the record.';
    END IF;
    IF _idem_resolve_one.response IS NOT NULL THEN
        bytes := pg_catalog.pg_column_size(_idem_resolve_one.response::text::jsonb) - 4;
        IF bytes > limit_bytes THEN
            RAISE EXCEPTION USING ERRCODE = 'IK004', MESSAGE = 'response is too large',
                DETAIL = pg_catalog.format('The response takes %s bytes as jsonb; the limit is %s.', bytes, limit_bytes),
                HINT = 'Store a smaller response (a reference to the result instead of the result), or raise pg_idempotency.max_response_bytes.';
        END IF;
    END IF;
    whose := _idem_operator_owner(_idem_resolve_one.owner, false);

    SELECT * INTO r FROM records AS x
    WHERE x.scope = _idem_resolve_one.scope AND x.key = _idem_resolve_one.key AND x.owner = whose
    FOR UPDATE;
    IF FOUND AND (r.expires_at > now OR r.unresolved_until > now) THEN
        why := _idem_unresolved_why(r.state, r.lease_until, r.response, now);
    END IF;
    IF why IS NULL OR r.fence <> _idem_resolve_one.fence OR r.state <> _idem_resolve_one.state THEN
        RAISE EXCEPTION USING ERRCODE = 'IK003',
            MESSAGE = 'the record changed since it was listed',
            DETAIL = CASE
                WHEN NOT FOUND OR NOT (r.expires_at > now OR r.unresolved_until > now)
                    THEN 'The key has no live record: it was completed and expired, released, forgotten or resolved.'
                WHEN r.fence <> _idem_resolve_one.fence
                    THEN pg_catalog.format('The record is held under fence %s, not %s: the call was taken over or claimed again.', r.fence, _idem_resolve_one.fence)
                WHEN r.state <> _idem_resolve_one.state
                    THEN pg_catalog.format('The record is %s, not %s.', r.state, _idem_resolve_one.state)
                ELSE pg_catalog.format('The record is %s and awaits no decision: its lease is live or its result is known.', r.state) END,
            HINT = 'List it again with idem_unresolved and decide on what it holds now.';
    END IF;

    IF pg_catalog.current_setting('synchronous_commit') IN ('off', 'local', 'remote_write') THEN
        PERFORM pg_catalog.set_config('synchronous_commit', 'on', true);
    END IF;
    INSERT INTO resolutions (resolved_at, resolved_by, action, owner, scope, key, fence, state,
                             why, attempt, upstream_key, response)
    VALUES (now,
            CASE WHEN pg_catalog.current_setting('role') = 'none'
                 THEN pg_catalog.quote_ident(session_user)::regrole
                 ELSE pg_catalog.quote_ident(pg_catalog.current_setting('role'))::regrole END,
            _idem_resolve_one.action, r.owner, r.scope, r.key, r.fence, r.state, why, r.attempt,
            r.upstream_key, _idem_resolve_one.response);
    IF _idem_resolve_one.action IN ('succeeded', 'failed') THEN
        -- The result found, as its holder would have recorded it: replayed from now on,
        -- for the record's ttl from now.
        UPDATE records AS x
        SET state = _idem_resolve_one.action, response = _idem_resolve_one.response,
            completed_at = now, lease_until = NULL, expires_at = now + r.ttl,
            unresolved_until = NULL, claim_token = NULL
        WHERE x.scope = r.scope AND x.key = r.key AND x.owner = r.owner AND x.fence = r.fence;
        RETURN _idem_resolve_one.action;
    END IF;
    DELETE FROM records AS x
    WHERE x.scope = r.scope AND x.key = r.key AND x.owner = r.owner AND x.fence = r.fence;
    RETURN 'absent';
END
$fn$;

-- idem_resolutions' rows: the resolutions of `owner`'s records (NULL: as
-- _idem_operator_owner decides), newest first.
CREATE FUNCTION :"storage"._idem_resolution_rows(owner regrole)
RETURNS SETOF :"storage".resolutions
LANGUAGE plpgsql STABLE AS $fn$
DECLARE
    whose regrole := _idem_operator_owner(_idem_resolution_rows.owner, true);
BEGIN
    RETURN QUERY
    SELECT x.* FROM resolutions AS x
    WHERE whose IS NULL OR x.owner = whose
    ORDER BY x.resolved_at DESC;
END
$fn$;

DROP FUNCTION :"schema".idem_begin(text, text, jsonb, interval, interval, text, text, interval, uuid);

-- unresolved_ttl NULL: pg_idempotency.unresolved_ttl. How long past its ttl a record whose outcome is unknown (a lapsed claim, a mark) is kept for an operator.
-- The claim is _idem_begin_one's (sql/src/claims.sql), shared with idem_begin_batch.
CREATE FUNCTION :"schema".idem_begin(
    scope          text,
    key            text,
    request        jsonb DEFAULT NULL,
    ttl            interval DEFAULT NULL,
    lease          interval DEFAULT NULL,
    on_cache_hit   text DEFAULT NULL,
    on_mismatch    text DEFAULT NULL,
    wait           interval DEFAULT '0',
    claim_token    uuid DEFAULT NULL,
    unresolved_ttl interval DEFAULT NULL)
RETURNS :"storage".begin_result
VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, :"storage", pg_temp
LANGUAGE plpgsql AS $fn$
BEGIN
    RETURN _idem_begin_one(idem_begin.scope, idem_begin.key, idem_begin.request, NULL,
        idem_begin.ttl, idem_begin.lease, idem_begin.on_cache_hit, idem_begin.on_mismatch,
        idem_begin.wait, idem_begin.claim_token, idem_begin.unresolved_ttl, false);
END
$fn$;
COMMENT ON FUNCTION :"schema".idem_begin(text, text, jsonb, interval, interval, text, text, interval, uuid, interval) IS
    'Claim a call (outcome claimed, with a fence), or learn it is running (in_progress), or get its remembered result (replay)';

-- keys[i], requests[i] and claim_tokens[i] are item i (a NULL key: derived from its request). Items are claimed in key order, answered in item order; a mismatch or a refused repeat is that item's outcome, a bad argument fails the whole batch.
-- As the extension (pg_idempotency/src/begin_batch.rs): every item is checked (its
-- fingerprint computed, its key derived) before any is decided; then the items are decided
-- in key order, so that two batches sharing keys lock them in one order, and answered in
-- item order.
CREATE OR REPLACE FUNCTION :"schema".idem_begin_batch(
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
SET search_path = pg_catalog, :"storage", pg_temp
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    lim record := _idem_limits();
    c_scope text;
    c_ttl bigint;
    c_lease bigint;
    v_keys text[];
    v_requests jsonb[];
    v_tokens uuid[];
    n integer;
    fps bytea[] := '{}';
    ks text[] := '{}';
    at integer;
    e_code text;
    e_message text;
    e_detail text;
    e_hint text;
    it record;
    items integer[] := '{}';
    answers begin_result[] := '{}';
BEGIN
    c_scope := _idem_scope(idem_begin_batch.scope, lim.max_scope_bytes);
    v_keys := _idem_items(idem_begin_batch.keys);
    v_requests := _idem_items(idem_begin_batch.requests);
    v_tokens := _idem_items(idem_begin_batch.claim_tokens);
    n := _idem_batch_items('idem_begin_batch', ARRAY['keys', 'requests', 'claim_tokens'],
        ARRAY[cardinality(v_keys), cardinality(v_requests), cardinality(v_tokens)],
        'keys and requests must not both be null', 'keys, or requests to derive them from');
    c_ttl := _idem_duration('ttl', idem_begin_batch.ttl, false, lim.max_ttl_micros);
    c_lease := _idem_duration('lease', idem_begin_batch.lease, false, lim.max_ttl_micros);
    PERFORM _idem_on_cache_hit(idem_begin_batch.on_cache_hit);
    PERFORM _idem_on_mismatch(idem_begin_batch.on_mismatch);
    IF c_lease IS NOT NULL AND c_ttl IS NOT NULL THEN
        PERFORM _idem_effective_lease(c_lease, NULL, c_ttl);
    END IF;

    BEGIN
        FOR i IN 1..n LOOP
            at := i;
            IF v_requests[i] IS NOT NULL THEN
                fps[i] := _idem_hash(v_requests[i]);
            END IF;
            IF v_keys[i] IS NULL THEN
                IF fps[i] IS NULL THEN
                    PERFORM _idem_fail('22023', 'key must not be null without a request',
                        'A NULL key asks for the key to be derived from the request, and no request was given.',
                        'Pass a key, or a request to derive it from (HASH_INPUT).');
                END IF;
                ks[i] := encode(fps[i], 'hex');
            ELSE
                ks[i] := _idem_key(v_keys[i], lim.max_key_bytes);
            END IF;
        END LOOP;
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS e_code = RETURNED_SQLSTATE, e_message = MESSAGE_TEXT,
            e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT;
        PERFORM _idem_fail(e_code, e_message, format('Item %s of the batch: %s', at, e_detail), e_hint);
    END;

    FOR it IN SELECT s AS i FROM generate_series(1, n) AS s ORDER BY ks[s] COLLATE "C", s LOOP
        items := items || it.i;
        answers := answers || _idem_begin_one(c_scope, ks[it.i], NULL, fps[it.i],
            idem_begin_batch.ttl, idem_begin_batch.lease, idem_begin_batch.on_cache_hit,
            idem_begin_batch.on_mismatch, '0', v_tokens[it.i], NULL, true);
    END LOOP;
    RETURN QUERY
        SELECT items[s], (answers[s]).outcome, (answers[s]).fence, (answers[s]).attempt,
               (answers[s]).recovered, (answers[s]).upstream_key, (answers[s]).succeeded,
               (answers[s]).response, (answers[s]).lease_until, (answers[s]).expires_at,
               (answers[s]).retry_after, (answers[s]).key
        FROM generate_subscripts(items, 1) AS s
        ORDER BY items[s];
END
$fn$;
COMMENT ON FUNCTION :"schema".idem_begin_batch(text, text[], jsonb[], interval, interval, text, text, uuid[]) IS
    'idem_begin for many calls of one scope in one round trip: one row per item (claimed, replay, in_progress, mismatch or refused)';

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
        -- The unresolved bound moves with the lease, by the same length.
        UPDATE records AS r SET lease_until = n_lease_until, expires_at = n_expires,
            unresolved_until = n_lease_until + (r.unresolved_until - r.lease_until)
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
COMMENT ON FUNCTION :"schema".idem_extend(text, text, bigint, interval) IS
    'Extend the lease of a claim that is still running (a heartbeat)';

CREATE OR REPLACE FUNCTION :"schema".idem_forget(
    scope text,
    key   text,
    owner regrole DEFAULT NULL)
RETURNS boolean
VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, :"storage", pg_temp
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    lim record := _idem_limits();
    c_scope text := _idem_scope(idem_forget.scope, lim.max_scope_bytes);
    c_key text := _idem_key(idem_forget.key, lim.max_key_bytes);
    c_owner regrole := _idem_acting_owner(idem_forget.owner);
    now timestamptz := clock_timestamp();
    gone timestamptz;
BEGIN
    DELETE FROM records AS r WHERE r.scope = c_scope AND r.key = c_key AND r.owner = c_owner
    RETURNING greatest(r.expires_at, r.unresolved_until) INTO gone;
    RETURN coalesce(gone > now, false);
END
$fn$;
COMMENT ON FUNCTION :"schema".idem_forget(text, text, regrole) IS
    'Remove the caller''s record (an admin: owner''s), e.g. a bad cached result; true when a live one was removed';

-- batch_size NULL: pg_idempotency.purge_batch_size, as the purge worker uses.
-- Walks the table in physical order, batch_size expired rows per statement, locked with
-- SKIP LOCKED (a row a concurrent idem_begin is claiming again is left for the next run)
-- and re-checked under the lock, so a live record is never deleted (nor one whose outcome
-- is unknown before its unresolved bound). No index on
-- expires_at: its updates would make every completion a non-HOT update.
CREATE OR REPLACE FUNCTION :"schema".idem_purge_expired(
    batch_size integer DEFAULT NULL)
RETURNS bigint
VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, :"storage", pg_temp
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    n integer := coalesce(idem_purge_expired.batch_size,
        _idem_setting('pg_idempotency.purge_batch_size', 10000, '', 1, 2147483647));
    now timestamptz := clock_timestamp();
    done_upto tid := '(0,0)';
    batch_end tid;
    deleted bigint;
    total bigint := 0;
BEGIN
    IF n <= 0 THEN
        PERFORM _idem_fail('22023', 'batch_size must be positive',
            format('batch_size is %s.', n),
            'Pass a positive batch size, or NULL for pg_idempotency.purge_batch_size.');
    END IF;
    LOOP
        WITH doomed AS (
            SELECT r.ctid FROM records AS r
            WHERE r.ctid > done_upto AND r.expires_at <= now
              AND coalesce(r.unresolved_until <= now, true)
            LIMIT n FOR UPDATE SKIP LOCKED),
        gone AS (
            DELETE FROM records AS r USING doomed
            WHERE r.ctid = doomed.ctid AND r.expires_at <= now
              AND coalesce(r.unresolved_until <= now, true)
            RETURNING r.ctid)
        SELECT count(*), max(gone.ctid) INTO deleted, batch_end FROM gone;
        total := total + deleted;
        EXIT WHEN deleted < n;
        done_upto := greatest(done_upto, batch_end);
    END LOOP;
    -- The counts of backends that have exited fold into one row per pair (slot 0, which
    -- no process id is), so the counts table keeps a row per pair and live backend, not
    -- one per process that ever counted. A live backend's rows are left alone; a new
    -- backend that takes a gone one's id waits on the row lock and starts a row anew.
    WITH gone AS (
        DELETE FROM counts AS c
        WHERE c.slot <> 0
          AND NOT EXISTS (SELECT FROM pg_stat_activity AS a WHERE a.pid = c.slot)
        RETURNING c.*)
    INSERT INTO counts AS c (owner, scope, slot, claimed, replay, in_progress, mismatch,
                             refused, unrecorded, outcome_unknown)
    SELECT g.owner, g.scope, 0, sum(g.claimed), sum(g.replay), sum(g.in_progress),
           sum(g.mismatch), sum(g.refused), sum(g.unrecorded), sum(g.outcome_unknown)
    FROM gone AS g GROUP BY g.owner, g.scope
    ON CONFLICT (owner, scope, slot) DO UPDATE
    SET claimed = c.claimed + excluded.claimed, replay = c.replay + excluded.replay,
        in_progress = c.in_progress + excluded.in_progress,
        mismatch = c.mismatch + excluded.mismatch, refused = c.refused + excluded.refused,
        unrecorded = c.unrecorded + excluded.unrecorded,
        outcome_unknown = c.outcome_unknown + excluded.outcome_unknown;
    RETURN total;
END
$fn$;
COMMENT ON FUNCTION :"schema".idem_purge_expired(integer) IS
    'Delete the rows of expired records, batch_size at a time; returns how many (never a live record)';

-- Per owner and scope: a role sees its own rows, a role with idempotency_admin's privileges
-- every owner's. The outcome counters live in the extension's shared memory; the portable
-- variant has none, so they are NULL here (as in the extension when it is not preloaded).
CREATE OR REPLACE FUNCTION :"schema".idem_metrics()
RETURNS TABLE (
    owner              regrole,
    scope              text,
    in_progress        bigint,
    succeeded          bigint,
    failed             bigint,
    lapsed             bigint,
    expired            bigint,
    oldest_in_progress interval,
    claimed_total      bigint,
    replay_total       bigint,
    in_progress_total  bigint,
    mismatch_total     bigint,
    note               text)
VOLATILE CALLED ON NULL INPUT PARALLEL SAFE SECURITY DEFINER
SET search_path = pg_catalog, :"storage", pg_temp
LANGUAGE sql AS $fn$
    WITH now AS (SELECT clock_timestamp() AS t, _idem_visible_owner() AS visible)
    SELECT r.owner, r.scope,
           count(*) FILTER (WHERE (r.expires_at > now.t OR r.unresolved_until > now.t) AND r.state = 'in_progress'),
           count(*) FILTER (WHERE (r.expires_at > now.t OR r.unresolved_until > now.t) AND r.state = 'succeeded'),
           count(*) FILTER (WHERE (r.expires_at > now.t OR r.unresolved_until > now.t) AND r.state = 'failed'),
           count(*) FILTER (WHERE (r.expires_at > now.t OR r.unresolved_until > now.t) AND r.state = 'in_progress'
                              AND r.lease_until <= now.t),
           count(*) FILTER (WHERE r.expires_at <= now.t AND coalesce(r.unresolved_until <= now.t, true)),
           now.t - min(r.created_at) FILTER (WHERE (r.expires_at > now.t OR r.unresolved_until > now.t)
                                              AND r.state = 'in_progress'),
           NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint,
           'outcome counters are off: the portable variant keeps none (the extension, preloaded, counts them)'
    FROM records r, now
    WHERE now.visible IS NULL OR r.owner = now.visible
    GROUP BY r.owner, r.scope, now.t
    ORDER BY r.owner::text, r.scope
$fn$;
COMMENT ON FUNCTION :"schema".idem_metrics() IS
    'Per owner and scope (a role: its own; an admin: every owner): live records by state, lapsed leases, expired rows not yet purged, the oldest running claim, and outcome counters since the server started (note says why they are NULL)';

-- owner NULL: the caller's own records (an admin: every owner's). Naming another role needs idempotency_admin.
CREATE FUNCTION :"schema".idem_unresolved(
    owner regrole DEFAULT NULL)
RETURNS SETOF :"storage".unresolved_record
STABLE CALLED ON NULL INPUT PARALLEL UNSAFE SECURITY DEFINER ROWS 100
SET search_path = pg_catalog, :"storage", pg_temp
LANGUAGE sql AS $fn$
    SELECT * FROM _idem_unresolved_rows($1)
$fn$;
COMMENT ON FUNCTION :"schema".idem_unresolved(regrole) IS
    'The records awaiting an operator''s decision: a claim whose lease lapsed, or a mark (outcome_unknown, unrecorded); kept past their ttl until resolved or until their unresolved bound';

-- action: succeeded or failed (record the result found), release (the next call runs again) or forget. fence and state as idem_unresolved listed them: a record that changed since is refused (IK003).
CREATE FUNCTION :"schema".idem_resolve(
    scope    text,
    key      text,
    fence    bigint,
    state    text,
    action   text,
    response jsonb DEFAULT NULL,
    owner    regrole DEFAULT NULL)
RETURNS text
VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, :"storage", pg_temp
LANGUAGE sql AS $fn$
    SELECT _idem_resolve_one($1, $2, $3, $4, $5, $6, $7)
$fn$;
COMMENT ON FUNCTION :"schema".idem_resolve(text, text, bigint, text, text, jsonb, regrole) IS
    'Settle a record awaiting a decision (as idem_unresolved listed it) and write who did it into the audit; answers the state left (succeeded, failed or absent)';

-- owner NULL: the caller's own records' (an admin: every owner's).
CREATE FUNCTION :"schema".idem_resolutions(
    owner regrole DEFAULT NULL)
RETURNS SETOF :"storage".resolutions
STABLE CALLED ON NULL INPUT PARALLEL UNSAFE SECURITY DEFINER ROWS 100
SET search_path = pg_catalog, :"storage", pg_temp
LANGUAGE sql AS $fn$
    SELECT * FROM _idem_resolution_rows($1)
$fn$;
COMMENT ON FUNCTION :"schema".idem_resolutions(regrole) IS
    'The audit of idem_resolve: who resolved which record, when, how, and the record before, newest first';

DROP FUNCTION :"schema".idem_set_policy(text, interval, interval, text, boolean, text);

-- INOUT: the policy comes back as stored (durations normalised).
CREATE FUNCTION :"schema".idem_set_policy(
    INOUT scope          text,
    INOUT ttl            interval DEFAULT NULL,
    INOUT lease          interval DEFAULT NULL,
    INOUT on_cache_hit   text DEFAULT NULL,
    INOUT cache_failures boolean DEFAULT NULL,
    INOUT on_mismatch    text DEFAULT NULL,
    INOUT unresolved_ttl interval DEFAULT NULL,
    OUT   updated_at timestamptz,
    OUT   updated_by regrole)
RETURNS record
VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, :"storage", pg_temp
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    lim record := _idem_limits();
    c_ttl bigint;
    c_lease bigint;
    c_unresolved bigint;
BEGIN
    scope := _idem_scope(idem_set_policy.scope, lim.max_scope_bytes);
    c_ttl := _idem_duration('ttl', idem_set_policy.ttl, false, lim.max_ttl_micros);
    c_lease := _idem_duration('lease', idem_set_policy.lease, false, lim.max_ttl_micros);
    IF c_ttl IS NOT NULL AND c_lease IS NOT NULL THEN
        PERFORM _idem_effective_lease(c_lease, NULL, c_ttl);
    END IF;
    PERFORM _idem_on_cache_hit(idem_set_policy.on_cache_hit);
    PERFORM _idem_on_mismatch(idem_set_policy.on_mismatch);
    c_unresolved := _idem_duration('unresolved_ttl', idem_set_policy.unresolved_ttl, false,
                                   lim.max_ttl_micros);
    unresolved_ttl := _idem_interval(c_unresolved);
    ttl := _idem_interval(c_ttl);
    lease := _idem_interval(c_lease);
    updated_at := clock_timestamp();
    updated_by := _idem_session_role();
    INSERT INTO policies AS p (scope, ttl, lease, on_cache_hit, cache_failures, on_mismatch,
                               updated_at, updated_by, unresolved_ttl)
    VALUES (idem_set_policy.scope, idem_set_policy.ttl, idem_set_policy.lease,
            idem_set_policy.on_cache_hit, idem_set_policy.cache_failures,
            idem_set_policy.on_mismatch, idem_set_policy.updated_at, idem_set_policy.updated_by,
            idem_set_policy.unresolved_ttl)
    ON CONFLICT (scope) DO UPDATE SET ttl = excluded.ttl, lease = excluded.lease,
        on_cache_hit = excluded.on_cache_hit, cache_failures = excluded.cache_failures,
        on_mismatch = excluded.on_mismatch, updated_at = excluded.updated_at,
        updated_by = excluded.updated_by, unresolved_ttl = excluded.unresolved_ttl;
END
$fn$;
COMMENT ON FUNCTION :"schema".idem_set_policy(text, interval, interval, text, boolean, text, interval) IS
    'Set (replace) the policy of a scope: the defaults every caller of that scope obeys';

DROP FUNCTION :"schema".idem_policies();

CREATE FUNCTION :"schema".idem_policies()
RETURNS TABLE (
    scope          text,
    ttl            interval,
    lease          interval,
    on_cache_hit   text,
    cache_failures boolean,
    on_mismatch    text,
    unresolved_ttl interval,
    updated_at     timestamptz,
    updated_by     regrole)
STABLE CALLED ON NULL INPUT PARALLEL SAFE SECURITY DEFINER
SET search_path = pg_catalog, :"storage", pg_temp
LANGUAGE sql AS $fn$
    SELECT scope, ttl, lease, on_cache_hit, cache_failures, on_mismatch, unresolved_ttl,
           updated_at, updated_by
    FROM policies ORDER BY scope
$fn$;
COMMENT ON FUNCTION :"schema".idem_policies() IS
    'Every scope''s policy';

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA :"storage" FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION
    :"schema".idem_begin(text, text, jsonb, interval, interval, text, text, interval, uuid, interval),
    :"schema".idem_set_policy(text, interval, interval, text, boolean, text, interval),
    :"schema".idem_policies(),
    :"schema".idem_unresolved(regrole),
    :"schema".idem_resolve(text, text, bigint, text, text, jsonb, regrole),
    :"schema".idem_resolutions(regrole)
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    :"schema".idem_begin(text, text, jsonb, interval, interval, text, text, interval, uuid, interval),
    :"schema".idem_unresolved(regrole),
    :"schema".idem_resolve(text, text, bigint, text, text, jsonb, regrole),
    :"schema".idem_resolutions(regrole),
    :"schema".idem_policies()
TO idempotency_user;
GRANT EXECUTE ON FUNCTION
    :"schema".idem_set_policy(text, interval, interval, text, boolean, text, interval)
TO idempotency_admin;
-- (end of 0.8.0: unresolved records)

-- 0.8.0: outcome counts per owner and scope in the counts table, for any number of scopes
-- (each backend its own row): idem_begin, idem_begin_batch, idem_complete and
-- idem_complete_batch count through the new _idem_count and _idem_count_outcome (and
-- the _idem_mark above; replaced in place: their privileges and comments stay); idem_metrics gains
-- refused_total, unrecorded_total, outcome_unknown_total and folded_scopes (last), so it is
-- made again with a fresh install's privileges and comment.
SET LOCAL search_path = pg_catalog, :"storage", pg_temp;
-- Outcome counts per owner and scope, for idem_metrics()'s *_total columns: durable, with
-- no bound on the number of scopes (docs/decisions.md, "Counts that never fold"). Each
-- backend adds to its own row of a scope (slot: the backend's process id), so callers of one scope never
-- wait on each other's row, however long the transactions they count in.
CREATE TABLE :"storage".counts (
    owner           regrole NOT NULL,
    scope           text    NOT NULL,
    slot            integer NOT NULL,
    claimed         bigint  NOT NULL DEFAULT 0,
    replay          bigint  NOT NULL DEFAULT 0,
    in_progress     bigint  NOT NULL DEFAULT 0,
    mismatch        bigint  NOT NULL DEFAULT 0,
    refused         bigint  NOT NULL DEFAULT 0,
    unrecorded      bigint  NOT NULL DEFAULT 0,
    outcome_unknown bigint  NOT NULL DEFAULT 0,
    PRIMARY KEY (owner, scope, slot)
) WITH (fillfactor = 70);
COMMENT ON TABLE :"storage".counts IS
    'pg_idempotency: outcome counts per owner, scope and backend, summed by idem_metrics()';

-- Adds a call's outcomes to its owner's counts of the scope (idem_metrics' *_total), in this
-- backend's own row (its process id): two callers of one scope never wait on each other's
-- row, however long their transactions. The counts are the transaction's: what rolls back
-- (a refusal raised, the caller's ROLLBACK) is not counted. pg_idempotency.count_outcomes
-- = 0 counts nothing (docs/decisions.md, "Counts that never fold").
CREATE FUNCTION :"storage"._idem_count(owner regrole, scope text, claimed bigint,
    replay bigint, in_progress bigint, mismatch bigint, refused bigint, unrecorded bigint,
    outcome_unknown bigint)
RETURNS void
LANGUAGE sql VOLATILE AS $fn$
    INSERT INTO counts AS c (owner, scope, slot, claimed, replay, in_progress, mismatch,
                             refused, unrecorded, outcome_unknown)
    SELECT $1, $2, pg_backend_pid(), $3, $4, $5, $6, $7, $8, $9
    WHERE _idem_setting('pg_idempotency.count_outcomes', 1, '', 0, 1) = 1
    ON CONFLICT (owner, scope, slot) DO UPDATE
    SET claimed = c.claimed + excluded.claimed, replay = c.replay + excluded.replay,
        in_progress = c.in_progress + excluded.in_progress,
        mismatch = c.mismatch + excluded.mismatch, refused = c.refused + excluded.refused,
        unrecorded = c.unrecorded + excluded.unrecorded,
        outcome_unknown = c.outcome_unknown + excluded.outcome_unknown
$fn$;

-- Counts one idem_begin outcome ('claimed', 'replay', 'in_progress', 'mismatch', 'refused').
CREATE FUNCTION :"storage"._idem_count_outcome(owner regrole, scope text, outcome text)
RETURNS void
LANGUAGE sql VOLATILE AS $fn$
    SELECT _idem_count($1, $2, ($3 = 'claimed')::integer, ($3 = 'replay')::integer,
                       ($3 = 'in_progress')::integer, ($3 = 'mismatch')::integer,
                       ($3 = 'refused')::integer, 0, 0)
$fn$;

REVOKE ALL ON FUNCTION
    :"storage"._idem_count(regrole, text, bigint, bigint, bigint, bigint, bigint, bigint, bigint),
    :"storage"._idem_count_outcome(regrole, text, text)
FROM PUBLIC;

SET LOCAL search_path = pg_catalog, pg_temp;
-- The claim is _idem_begin_one's (sql/src/claims.sql), shared with idem_begin_batch. Its
-- outcome is counted in the call's transaction; a refusal raised is not (docs/decisions.md,
-- "Counts that never fold").
CREATE OR REPLACE FUNCTION :"schema".idem_begin(
    scope          text,
    key            text,
    request        jsonb DEFAULT NULL,
    ttl            interval DEFAULT NULL,
    lease          interval DEFAULT NULL,
    on_cache_hit   text DEFAULT NULL,
    on_mismatch    text DEFAULT NULL,
    wait           interval DEFAULT '0',
    claim_token    uuid DEFAULT NULL,
    unresolved_ttl interval DEFAULT NULL)
RETURNS :"storage".begin_result
VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, :"storage", pg_temp
LANGUAGE plpgsql AS $fn$
DECLARE
    res begin_result;
BEGIN
    res := _idem_begin_one(idem_begin.scope, idem_begin.key, idem_begin.request, NULL,
        idem_begin.ttl, idem_begin.lease, idem_begin.on_cache_hit, idem_begin.on_mismatch,
        idem_begin.wait, idem_begin.claim_token, idem_begin.unresolved_ttl, false);
    PERFORM _idem_count_outcome(_idem_caller(), idem_begin.scope, res.outcome);
    RETURN res;
END
$fn$;

-- The completion is _idem_complete_one's (sql/src/claims.sql), shared with
-- idem_complete_batch; it counts a completion that writes the client's mark (unrecorded,
-- outcome_unknown).
CREATE OR REPLACE FUNCTION :"schema".idem_complete(
    scope         text,
    key           text,
    fence         bigint,
    response      jsonb,
    succeeded     boolean DEFAULT true,
    cache_failure boolean DEFAULT NULL)
RETURNS :"storage".complete_result
VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, :"storage", pg_temp
LANGUAGE plpgsql AS $fn$
DECLARE
    done record;
    res complete_result;
BEGIN
    done := _idem_complete_one(idem_complete.scope, idem_complete.key, idem_complete.fence,
        idem_complete.response, idem_complete.succeeded, idem_complete.cache_failure, false);
    res.state := done.state;
    res.expires_at := done.expires_at;
    RETURN res;
END
$fn$;

-- keys[i], requests[i] and claim_tokens[i] are item i (a NULL key: derived from its request). Items are claimed in key order, answered in item order; a mismatch or a refused repeat is that item's outcome, a bad argument fails the whole batch.
-- As the extension (pg_idempotency/src/begin_batch.rs): every item is checked (its
-- fingerprint computed, its key derived) before any is decided; then the items are decided
-- in key order, so that two batches sharing keys lock them in one order, and answered in
-- item order.
CREATE OR REPLACE FUNCTION :"schema".idem_begin_batch(
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
SET search_path = pg_catalog, :"storage", pg_temp
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    lim record := _idem_limits();
    c_scope text;
    c_ttl bigint;
    c_lease bigint;
    v_keys text[];
    v_requests jsonb[];
    v_tokens uuid[];
    n integer;
    fps bytea[] := '{}';
    ks text[] := '{}';
    at integer;
    e_code text;
    e_message text;
    e_detail text;
    e_hint text;
    it record;
    items integer[] := '{}';
    answers begin_result[] := '{}';
BEGIN
    c_scope := _idem_scope(idem_begin_batch.scope, lim.max_scope_bytes);
    v_keys := _idem_items(idem_begin_batch.keys);
    v_requests := _idem_items(idem_begin_batch.requests);
    v_tokens := _idem_items(idem_begin_batch.claim_tokens);
    n := _idem_batch_items('idem_begin_batch', ARRAY['keys', 'requests', 'claim_tokens'],
        ARRAY[cardinality(v_keys), cardinality(v_requests), cardinality(v_tokens)],
        'keys and requests must not both be null', 'keys, or requests to derive them from');
    c_ttl := _idem_duration('ttl', idem_begin_batch.ttl, false, lim.max_ttl_micros);
    c_lease := _idem_duration('lease', idem_begin_batch.lease, false, lim.max_ttl_micros);
    PERFORM _idem_on_cache_hit(idem_begin_batch.on_cache_hit);
    PERFORM _idem_on_mismatch(idem_begin_batch.on_mismatch);
    IF c_lease IS NOT NULL AND c_ttl IS NOT NULL THEN
        PERFORM _idem_effective_lease(c_lease, NULL, c_ttl);
    END IF;

    BEGIN
        FOR i IN 1..n LOOP
            at := i;
            IF v_requests[i] IS NOT NULL THEN
                fps[i] := _idem_hash(v_requests[i]);
            END IF;
            IF v_keys[i] IS NULL THEN
                IF fps[i] IS NULL THEN
                    PERFORM _idem_fail('22023', 'key must not be null without a request',
                        'A NULL key asks for the key to be derived from the request, and no request was given.',
                        'Pass a key, or a request to derive it from (HASH_INPUT).');
                END IF;
                ks[i] := encode(fps[i], 'hex');
            ELSE
                ks[i] := _idem_key(v_keys[i], lim.max_key_bytes);
            END IF;
        END LOOP;
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS e_code = RETURNED_SQLSTATE, e_message = MESSAGE_TEXT,
            e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT;
        PERFORM _idem_fail(e_code, e_message, format('Item %s of the batch: %s', at, e_detail), e_hint);
    END;

    FOR it IN SELECT s AS i FROM generate_series(1, n) AS s ORDER BY ks[s] COLLATE "C", s LOOP
        items := items || it.i;
        answers := answers || _idem_begin_one(c_scope, ks[it.i], NULL, fps[it.i],
            idem_begin_batch.ttl, idem_begin_batch.lease, idem_begin_batch.on_cache_hit,
            idem_begin_batch.on_mismatch, '0', v_tokens[it.i], NULL, true);
    END LOOP;
    PERFORM _idem_count(_idem_caller(), c_scope,
        count(*) FILTER (WHERE a.outcome = 'claimed'), count(*) FILTER (WHERE a.outcome = 'replay'),
        count(*) FILTER (WHERE a.outcome = 'in_progress'),
        count(*) FILTER (WHERE a.outcome = 'mismatch'), count(*) FILTER (WHERE a.outcome = 'refused'),
        0, 0)
    FROM unnest(answers) AS a;
    RETURN QUERY
        SELECT items[s], (answers[s]).outcome, (answers[s]).fence, (answers[s]).attempt,
               (answers[s]).recovered, (answers[s]).upstream_key, (answers[s]).succeeded,
               (answers[s]).response, (answers[s]).lease_until, (answers[s]).expires_at,
               (answers[s]).retry_after, (answers[s]).key
        FROM generate_subscripts(items, 1) AS s
        ORDER BY items[s];
END
$fn$;

-- Item i is (keys[i], fences[i], responses[i], succeeded[i], cache_failure[i]); succeeded NULL: every item succeeded. A lost lease is that item's outcome (lease_lost); the others are completed.
-- As the extension (pg_idempotency/src/complete_batch.rs): every item is checked before any
-- is completed; then the items are completed in key order and answered in item order, a
-- lost lease as that item's outcome.
CREATE OR REPLACE FUNCTION :"schema".idem_complete_batch(
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
SET search_path = pg_catalog, :"storage", pg_temp
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    lim record := _idem_limits();
    c_scope text;
    v_keys text[];
    v_fences bigint[];
    v_responses jsonb[];
    v_succeeded boolean[];
    v_cache boolean[];
    n integer;
    ks text[] := '{}';
    at integer;
    e_code text;
    e_message text;
    e_detail text;
    e_hint text;
    it record;
    done record;
    items integer[] := '{}';
    states text[] := '{}';
    expiries timestamptz[] := '{}';
    lost boolean[] := '{}';
BEGIN
    c_scope := _idem_scope(idem_complete_batch.scope, lim.max_scope_bytes);
    v_keys := _idem_items(idem_complete_batch.keys);
    v_fences := _idem_items(idem_complete_batch.fences);
    v_responses := _idem_items(idem_complete_batch.responses);
    v_succeeded := _idem_items(idem_complete_batch.succeeded);
    v_cache := _idem_items(idem_complete_batch.cache_failure);
    n := _idem_batch_items('idem_complete_batch',
        ARRAY['keys', 'fences', 'responses', 'succeeded', 'cache_failure'],
        ARRAY[cardinality(v_keys), cardinality(v_fences), cardinality(v_responses),
              cardinality(v_succeeded), cardinality(v_cache)],
        'keys must not be null', 'keys, fences and responses');

    BEGIN
        FOR i IN 1..n LOOP
            at := i;
            ks[i] := _idem_key(v_keys[i], lim.max_key_bytes);
            PERFORM _idem_fence(v_fences[i]);
            PERFORM _idem_check_response(v_responses[i], lim.max_response_bytes);
        END LOOP;
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS e_code = RETURNED_SQLSTATE, e_message = MESSAGE_TEXT,
            e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT;
        PERFORM _idem_fail(e_code, e_message, format('Item %s of the batch: %s', at, e_detail), e_hint);
    END;

    FOR it IN SELECT s AS i FROM generate_series(1, n) AS s ORDER BY ks[s] COLLATE "C", s LOOP
        -- succeeded NULL: succeeded, as a single call's default.
        done := _idem_complete_one(c_scope, ks[it.i], v_fences[it.i], v_responses[it.i],
            coalesce(v_succeeded[it.i], true), v_cache[it.i], true);
        items := items || it.i;
        states := states || done.state;
        expiries := expiries || done.expires_at;
        lost := lost || done.lost;
    END LOOP;
    RETURN QUERY
        SELECT items[s], ks[items[s]],
               CASE WHEN lost[s] THEN 'lease_lost' ELSE 'completed' END,
               states[s], expiries[s]
        FROM generate_subscripts(items, 1) AS s
        ORDER BY items[s];
END
$fn$;

DROP FUNCTION :"schema".idem_metrics();
-- Per owner and scope: a role sees its own rows, a role with idempotency_admin's privileges
-- every owner's. The outcome counts are the counts table's (sql/src/helpers.sql,
-- _idem_count): what committed; a refusal raised rolls back with its transaction, so the
-- note says it is not counted (the extension counts it).
CREATE FUNCTION :"schema".idem_metrics()
RETURNS TABLE (
    owner                 regrole,
    scope                 text,
    in_progress           bigint,
    succeeded             bigint,
    failed                bigint,
    lapsed                bigint,
    expired               bigint,
    oldest_in_progress    interval,
    claimed_total         bigint,
    replay_total          bigint,
    in_progress_total     bigint,
    mismatch_total        bigint,
    note                  text,
    refused_total         bigint,
    unrecorded_total      bigint,
    outcome_unknown_total bigint,
    folded_scopes         bigint)
VOLATILE CALLED ON NULL INPUT PARALLEL SAFE SECURITY DEFINER
SET search_path = pg_catalog, :"storage", pg_temp
LANGUAGE sql AS $fn$
    WITH now AS (SELECT clock_timestamp() AS t, _idem_visible_owner() AS visible,
                        _idem_setting('pg_idempotency.metrics_scope_limit', 0, '', 0, 2147483647) AS top,
                        _idem_setting('pg_idempotency.metrics_records', 1, '', 0, 1) = 1 AS scan),
    stored AS (
        SELECT r.owner, r.scope,
               count(*) FILTER (WHERE (r.expires_at > now.t OR r.unresolved_until > now.t) AND r.state = 'in_progress') AS in_progress,
               count(*) FILTER (WHERE (r.expires_at > now.t OR r.unresolved_until > now.t) AND r.state = 'succeeded') AS succeeded,
               count(*) FILTER (WHERE (r.expires_at > now.t OR r.unresolved_until > now.t) AND r.state = 'failed') AS failed,
               count(*) FILTER (WHERE (r.expires_at > now.t OR r.unresolved_until > now.t) AND r.state = 'in_progress'
                                  AND r.lease_until <= now.t) AS lapsed,
               count(*) FILTER (WHERE r.expires_at <= now.t AND coalesce(r.unresolved_until <= now.t, true)) AS expired,
               now.t - min(r.created_at) FILTER (WHERE (r.expires_at > now.t OR r.unresolved_until > now.t)
                                                  AND r.state = 'in_progress') AS oldest_in_progress
        FROM records r, now
        -- A one-time filter: with metrics_records = 0 the records are not read at all.
        WHERE _idem_setting('pg_idempotency.metrics_records', 1, '', 0, 1) = 1
          AND (now.visible IS NULL OR r.owner = now.visible)
        GROUP BY r.owner, r.scope, now.t),
    counted AS (
        SELECT c.owner, c.scope, sum(c.claimed)::bigint AS claimed, sum(c.replay)::bigint AS replay,
               sum(c.in_progress)::bigint AS in_progress, sum(c.mismatch)::bigint AS mismatch,
               sum(c.refused)::bigint AS refused, sum(c.unrecorded)::bigint AS unrecorded,
               sum(c.outcome_unknown)::bigint AS outcome_unknown
        FROM counts c, now
        WHERE now.visible IS NULL OR c.owner = now.visible
        GROUP BY c.owner, c.scope),
    joined AS (
        SELECT coalesce(s.owner, c.owner) AS owner, coalesce(s.scope, c.scope) AS scope,
               CASE WHEN now.scan THEN coalesce(s.in_progress, 0) END AS in_progress, CASE WHEN now.scan THEN coalesce(s.succeeded, 0) END AS succeeded,
               CASE WHEN now.scan THEN coalesce(s.failed, 0) END AS failed, CASE WHEN now.scan THEN coalesce(s.lapsed, 0) END AS lapsed,
               CASE WHEN now.scan THEN coalesce(s.expired, 0) END AS expired, s.oldest_in_progress,
               coalesce(c.claimed, 0) AS claimed, coalesce(c.replay, 0) AS replay,
               coalesce(c.in_progress, 0) AS in_progress_total, coalesce(c.mismatch, 0) AS mismatch,
               coalesce(c.refused, 0) AS refused, coalesce(c.unrecorded, 0) AS unrecorded,
               coalesce(c.outcome_unknown, 0) AS outcome_unknown
        FROM stored s FULL JOIN counted c ON c.owner = s.owner AND c.scope = s.scope, now),
    -- With metrics_scope_limit set, the busiest pairs keep their rows; the rest of each
    -- owner fold into one row, '(other scopes)', whose folded_scopes says how many.
    ranked AS (
        SELECT j.*, now.top > 0 AND row_number() OVER (
                   ORDER BY j.claimed + j.replay + j.in_progress_total + j.mismatch + j.refused
                            + coalesce(j.in_progress + j.succeeded + j.failed + j.expired, 0) DESC,
                            j.owner::text, j.scope) > now.top AS folded
        FROM joined j, now)
    SELECT * FROM (
    SELECT owner, scope, in_progress, succeeded, failed, lapsed, expired, oldest_in_progress,
           claimed, replay, in_progress_total, mismatch, CASE WHEN _idem_setting('pg_idempotency.count_outcomes', 1, '', 0, 1) = 0 THEN
               'this session counts no outcomes: pg_idempotency.count_outcomes = 0'
           WHEN NOT (SELECT scan FROM now) THEN
               'records not read (pg_idempotency.metrics_records = 0): their columns are NULL'
           ELSE 'a refusal raised (IK001, IK002) is not counted: it rolls back its transaction' END, refused, unrecorded,
           outcome_unknown, 0::bigint AS folded_scopes
    FROM ranked WHERE NOT folded
    UNION ALL
    SELECT owner, '(other scopes)', sum(in_progress)::bigint, sum(succeeded)::bigint,
           sum(failed)::bigint, sum(lapsed)::bigint, sum(expired)::bigint, max(oldest_in_progress),
           sum(claimed)::bigint, sum(replay)::bigint, sum(in_progress_total)::bigint,
           sum(mismatch)::bigint, CASE WHEN _idem_setting('pg_idempotency.count_outcomes', 1, '', 0, 1) = 0 THEN
               'this session counts no outcomes: pg_idempotency.count_outcomes = 0'
           WHEN NOT (SELECT scan FROM now) THEN
               'records not read (pg_idempotency.metrics_records = 0): their columns are NULL'
           ELSE 'a refusal raised (IK001, IK002) is not counted: it rolls back its transaction' END, sum(refused)::bigint, sum(unrecorded)::bigint,
           sum(outcome_unknown)::bigint, count(*)
    FROM ranked WHERE folded
    GROUP BY owner) AS m
    ORDER BY m.owner::text, m.scope
$fn$;
COMMENT ON FUNCTION :"schema".idem_metrics() IS
    'Per owner and scope (a role: its own; an admin: every owner): live records by state, lapsed leases, expired rows not yet purged, the oldest running claim, and durable outcome counts (claims, replays, running, refusals, the client''s marks); past pg_idempotency.metrics_scope_limit rows, the rest fold into ''(other scopes)'' rows that say how many they hold';
REVOKE EXECUTE ON FUNCTION :"schema".idem_metrics() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION :"schema".idem_metrics() TO idempotency_user;

UPDATE :"storage".installed SET version = '0.8.0';

\if :_idem_own_transaction
COMMIT;
\endif
