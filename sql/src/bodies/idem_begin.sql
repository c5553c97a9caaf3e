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
    c_scope := _idem_scope(idem_begin.scope, lim.max_scope_bytes);
    IF idem_begin.request IS NOT NULL THEN
        c_fp := _idem_hash(idem_begin.request);
    END IF;
    IF idem_begin.key IS NULL THEN
        IF c_fp IS NULL THEN
            PERFORM _idem_fail('22023', 'key must not be null without a request',
                'A NULL key asks for the key to be derived from the request, and no request was given.',
                'Pass a key, or a request to derive it from (HASH_INPUT).');
        END IF;
        c_key := encode(c_fp, 'hex');
    ELSE
        c_key := _idem_key(idem_begin.key, lim.max_key_bytes);
    END IF;
    -- Every outcome answers the key the call used (derived or given).
    res.key := c_key;
    c_ttl := _idem_duration('ttl', idem_begin.ttl, false, lim.max_ttl_micros);
    c_lease := _idem_duration('lease', idem_begin.lease, false, lim.max_ttl_micros);
    c_hit := _idem_on_cache_hit(idem_begin.on_cache_hit);
    c_mismatch := _idem_on_mismatch(idem_begin.on_mismatch);
    c_wait := coalesce(_idem_duration('wait', idem_begin.wait, true, lim.max_ttl_micros), 0);
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
                PERFORM _idem_fail('IK001', 'idempotency key reused with a different request',
                    format('The key was first used with a request of fingerprint \x%s; this request''s fingerprint is \x%s.',
                           encode(r_fp, 'hex'), encode(c_fp, 'hex')),
                    'Use a new key for a different request, or on_mismatch => ''ignore'' when only part of the request names the call.');
            END IF;
            IF r_state = 'in_progress' AND r_lease_until > now THEN
                -- The caller's own claim, repeated because its answer was lost: the claim
                -- as it stands, at once (no wait) and unchanged (the lease is not renewed).
                IF idem_begin.claim_token IS NOT NULL AND idem_begin.claim_token = r_token THEN
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
                        idem_begin.claim_token, false, now)
                ON CONFLICT (scope, key, owner) DO NOTHING;
            ELSE
                -- Only if the record is still as it was read (a completion or an extension in
                -- between wins).
                UPDATE records AS r
                SET state = 'in_progress', fence = n_fence, attempt = n_attempt,
                    fingerprint = n_fp, upstream_key = n_upstream, response = NULL,
                    created_at = n_created, completed_at = NULL, lease_until = n_lease_until,
                    expires_at = n_expires, ttl = _idem_interval(s_ttl),
                    claim_token = idem_begin.claim_token, recovered = n_recovered,
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
