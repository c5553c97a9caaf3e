-- pg_idempotency, portable SQL variant: upgrade from 0.5.0 to 0.6.0. Run it like the
-- install, with the same -v schema= and -v storage=, as the role that installed:
--
--   psql -f sql/upgrade/pg_idempotency--0.5.0--0.6.0.sql
--
-- The batch API: idem_begin_batch and idem_complete_batch. Their claims and completions
-- are idem_begin's and idem_complete's, which move into the new <storage>._idem_begin_one
-- and _idem_complete_one (a batch's item answers a mismatch, a refused repeat or a lost
-- lease instead of raising it); _idem_read_held reads through the new _idem_read_claim.
-- The records and every other function are unchanged.
--
-- One transaction (however psql runs it); it changes nothing unless <storage>.installed
-- says 0.5.0. Hand-written; fixed once 0.6.0 is released. tests/tests/consistency/upgrade.rs
-- installs 0.5.0 (the base script and the upgrades up to it), upgrades, and compares every
-- object with a fresh 0.6.0 install.
\ir ../include/find-install.sql
SELECT pg_catalog.set_config('idem_upgrade.found', version, true) AS idem_found_version,
       version OPERATOR(pg_catalog.=) '0.5.0' AS idem_from
FROM :"storage".installed \gset
\if :idem_from
\else
DO $$ BEGIN
    RAISE EXCEPTION 'this script upgrades the portable variant from 0.5.0, not from %',
            pg_catalog.current_setting('idem_upgrade.found')
        USING ERRCODE = 'object_not_in_prerequisite_state',
              DETAIL = 'The storage schema given says version '
                       || pg_catalog.current_setting('idem_upgrade.found') || ' is installed.',
              HINT = 'Apply the scripts of sql/upgrade/ in order, starting from the installed version.';
END $$;
\endif

SET LOCAL search_path = pg_catalog, :"storage", pg_temp;

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
BEGIN
    SELECT r.state, r.fence, r.ttl, r.expires_at, p.lease, p.cache_failures
    INTO state, r_fence, ttl, expires_at, policy_lease, policy_cache_failures
    FROM (SELECT) AS one
    LEFT JOIN records AS r ON r.scope = _idem_read_claim.scope AND r.key = _idem_read_claim.key
                          AND r.owner = _idem_read_claim.owner
    LEFT JOIN policies AS p ON p.scope = _idem_read_claim.scope;
    IF state IS NULL OR expires_at <= now THEN
        lost := 'The key has no live record: it was released, forgotten, never claimed, or it expired.';
    ELSIF r_fence <> _idem_read_claim.fence THEN
        lost := CASE WHEN r_fence > _idem_read_claim.fence
            THEN 'The record is held under a later fence: the call was taken over or claimed again.'
            ELSE 'The record is held under a different fence.' END;
    END IF;
END
$fn$;

-- The same, or lease lost.
CREATE OR REPLACE FUNCTION :"storage"._idem_read_held(
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

-- The claims of idem_begin and idem_complete, for one call, and the checks of a batch's
-- arrays: what idem_begin/idem_complete and their batch forms share. With refusals_answer
-- (a batch's item), a mismatch or a refused repeat is answered as the outcome 'mismatch' or
-- 'refused', and a lost lease as `lost`, instead of raised: one item's refusal must not
-- undo the other items' claims. given_fp is the request's fingerprint when the caller has
-- computed it already (a batch orders its items by their keys, derived ones included).
CREATE FUNCTION :"storage"._idem_begin_one(
    scope text, key text, request jsonb, given_fp bytea, ttl interval, lease interval,
    on_cache_hit text, on_mismatch text, wait interval, claim_token uuid,
    refusals_answer boolean)
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
    -- The settings in force: the call's, else the scope's policy, else the defaults.
    s_ttl bigint;
    s_lease bigint;
    s_hit text;
    s_mismatch text;
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
    p_ttl interval;
    p_lease interval;
    p_hit text;
    p_mismatch text;
    -- A claim, computed before the statement that writes it.
    n_fence bigint;
    n_attempt integer;
    n_fp bytea;
    n_upstream uuid;
    n_created timestamptz;
    n_lease_until timestamptz;
    n_expires timestamptz;
    n_recovered boolean;
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
    IF c_lease IS NOT NULL AND c_ttl IS NOT NULL THEN
        PERFORM _idem_effective_lease(c_lease, NULL, c_ttl);
    END IF;

    FOR race IN 1..1000 LOOP
        now := clock_timestamp();
        SELECT r.state, r.fence, r.attempt, r.fingerprint, r.upstream_key, r.response,
               r.created_at, r.lease_until, r.expires_at, r.claim_token, r.recovered,
               r.claimed_at, p.ttl, p.lease, p.on_cache_hit, p.on_mismatch
        INTO r_state, r_fence, r_attempt, r_fp, r_upstream, r_response,
             r_created, r_lease_until, r_expires, r_token, r_recovered,
             r_claimed, p_ttl, p_lease, p_hit, p_mismatch
        FROM (SELECT) AS one
        LEFT JOIN records AS r ON r.scope = c_scope AND r.key = c_key AND r.owner = c_owner
        LEFT JOIN policies AS p ON p.scope = c_scope;

        IF NOT resolved THEN
            s_ttl := _idem_effective_ttl(c_ttl, _idem_micros(p_ttl)::bigint, lim.max_ttl_micros);
            s_lease := _idem_effective_lease(c_lease, _idem_micros(p_lease)::bigint, s_ttl);
            s_hit := coalesce(c_hit, _idem_on_cache_hit(p_hit), 'return_cached');
            s_mismatch := coalesce(c_mismatch, _idem_on_mismatch(p_mismatch), 'reject');
            resolved := true;
        END IF;

        claim := false;
        IF r_state IS NULL OR r_expires <= now THEN
            -- Absent or expired: a fresh call.
            n_fence := nextval('fence_seq');
            n_attempt := 1;
            n_fp := c_fp;
            n_upstream := gen_random_uuid();
            n_created := now;
            n_lease_until := now + _idem_interval(s_lease);
            n_expires := now + _idem_interval(s_ttl);
            n_recovered := false;
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
                                          claim_token, recovered, claimed_at)
                VALUES (c_scope, c_key, 'in_progress', n_fence, 1, n_fp, n_upstream, n_created,
                        n_lease_until, n_expires, _idem_interval(s_ttl), c_owner,
                        _idem_begin_one.claim_token, false, now)
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
                    claimed_at = now
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

CREATE FUNCTION :"storage"._idem_complete_one(
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
            lease_until = NULL, expires_at = now + held.ttl
        WHERE r.scope = c_scope AND r.key = c_key AND r.owner = c_owner AND r.fence = c_fence
          AND r.state = 'in_progress';
        GET DIAGNOSTICS written = ROW_COUNT;
        IF written = 1 THEN
            state := new_state;
            expires_at := now + held.ttl;
            RETURN;
        END IF;
    END LOOP;
    PERFORM _idem_contention();
END
$fn$;

-- How many items a batch has: the length that every array given (lengths[i] of names[i],
-- NULL when that array is NULL) must share; none_message and none_what say what the items come
-- from when none is given. The words are the extension's (pg_idempotency/src/batch_args.rs).
CREATE FUNCTION :"storage"._idem_batch_items(
    function_name text, names text[], lengths integer[], none_message text, none_what text)
RETURNS integer
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $fn$
DECLARE
    n integer;
    n_name text;
BEGIN
    FOR i IN 1..cardinality(names) LOOP
        CONTINUE WHEN lengths[i] IS NULL;
        IF n IS NULL THEN
            n := lengths[i];
            n_name := names[i];
        ELSIF lengths[i] <> n THEN
            PERFORM _idem_fail('22023', 'the arrays of a batch must have one length',
                format('%s has %s elements and %s %s; element i of each is item i.',
                       n_name, n, names[i], lengths[i]),
                'Pass one element per item in every array (NULL where an item has none).');
        END IF;
    END LOOP;
    IF n IS NULL THEN
        PERFORM _idem_fail('22023', none_message,
            format('%s takes its items from %s.', function_name, none_what),
            format('Pass %s.', none_what));
    END IF;
    IF n > 1000 THEN
        PERFORM _idem_fail('22023', 'too many items in one batch',
            format('The batch has %s items; one call takes at most 1000.', n),
            'Split it into batches of at most 1000 items.');
    END IF;
    RETURN n;
END
$fn$;

-- Refuses a response larger than the limit (IK004).
CREATE FUNCTION :"storage"._idem_check_response(response jsonb, max_bytes bigint)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $fn$
DECLARE
    bytes bigint;
BEGIN
    IF response IS NULL THEN
        RETURN;
    END IF;
    -- The size of the jsonb, uncompressed, without its header (as the extension counts); a
    -- compressed or stored value is measured on a fresh copy.
    bytes := pg_column_size(response) - 4;
    IF bytes + 4 > max_bytes OR pg_column_compression(response) IS NOT NULL THEN
        bytes := pg_column_size(response::text::jsonb) - 4;
    END IF;
    IF bytes > max_bytes THEN
        PERFORM _idem_fail('IK004', 'response is too large',
            format('The response takes %s bytes as jsonb; the limit is %s.', bytes, max_bytes),
            'Store a smaller response (a reference to the result instead of the result), or raise pg_idempotency.max_response_bytes.');
    END IF;
END
$fn$;

-- A batch's array from subscript 1, in storage order (how the extension reads one, and
-- unnest): an array given with other bounds or dimensions is read as its elements.
CREATE FUNCTION :"storage"._idem_items(a anyarray) RETURNS anyarray
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $fn$
    SELECT CASE WHEN a IS NOT NULL THEN
        ARRAY(SELECT u.v FROM pg_catalog.unnest(a) WITH ORDINALITY AS u(v, o) ORDER BY u.o) END
$fn$;

-- As every storage function: execute is never PUBLIC's (_idem_read_held, replaced in
-- place, keeps its privileges).
REVOKE ALL ON FUNCTION
    :"storage"._idem_read_claim(text, text, regrole, bigint, timestamptz),
    :"storage"._idem_begin_one(text, text, jsonb, bytea, interval, interval, text, text, interval, uuid, boolean),
    :"storage"._idem_complete_one(text, text, bigint, jsonb, boolean, boolean, boolean),
    :"storage"._idem_batch_items(text, text[], integer[], text, text),
    :"storage"._idem_check_response(jsonb, bigint),
    :"storage"._idem_items(anyarray)
    FROM PUBLIC;

SET LOCAL search_path = pg_catalog, pg_temp;

-- Replaced in place (the same signatures): the same OIDs, so their privileges and comments
-- stay.
-- The claim is _idem_begin_one's (sql/src/claims.sql), shared with idem_begin_batch.
CREATE OR REPLACE FUNCTION :"schema".idem_begin(
    scope        text,
    key          text,
    request      jsonb DEFAULT NULL,
    ttl          interval DEFAULT NULL,
    lease        interval DEFAULT NULL,
    on_cache_hit text DEFAULT NULL,
    on_mismatch  text DEFAULT NULL,
    wait         interval DEFAULT '0',
    claim_token  uuid DEFAULT NULL)
RETURNS :"storage".begin_result
VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, :"storage", pg_temp
LANGUAGE plpgsql AS $fn$
BEGIN
    RETURN _idem_begin_one(idem_begin.scope, idem_begin.key, idem_begin.request, NULL,
        idem_begin.ttl, idem_begin.lease, idem_begin.on_cache_hit, idem_begin.on_mismatch,
        idem_begin.wait, idem_begin.claim_token, false);
END
$fn$;

-- The completion is _idem_complete_one's (sql/src/claims.sql), shared with
-- idem_complete_batch.
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
CREATE FUNCTION :"schema".idem_begin_batch(
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
            idem_begin_batch.on_mismatch, '0', v_tokens[it.i], true);
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

-- Item i is (keys[i], fences[i], responses[i], succeeded[i], cache_failure[i]); succeeded NULL: every item succeeded. A lost lease is that item's outcome (lease_lost); the others are completed.
-- As the extension (pg_idempotency/src/complete_batch.rs): every item is checked before any
-- is completed; then the items are completed in key order and answered in item order, a
-- lost lease as that item's outcome.
CREATE FUNCTION :"schema".idem_complete_batch(
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
COMMENT ON FUNCTION :"schema".idem_complete_batch(text, text[], bigint[], jsonb[], boolean[], boolean[]) IS
    'idem_complete for many claims of one scope in one round trip: one row per item (completed, with the state left, or lease_lost)';

REVOKE EXECUTE ON FUNCTION
    :"schema".idem_begin_batch(text, text[], jsonb[], interval, interval, text, text, uuid[]),
    :"schema".idem_complete_batch(text, text[], bigint[], jsonb[], boolean[], boolean[])
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    :"schema".idem_begin_batch(text, text[], jsonb[], interval, interval, text, text, uuid[]),
    :"schema".idem_complete_batch(text, text[], bigint[], jsonb[], boolean[], boolean[])
TO idempotency_user;

UPDATE :"storage".installed SET version = '0.6.0';

\if :_idem_own_transaction
COMMIT;
\endif
