-- pg_idempotency, portable SQL variant: upgrade from 0.7.0 to 0.8.0. Run it like the
-- install, with the same -v schema= and -v storage=, as the role that installed:
--
--   psql -f sql/upgrade/pg_idempotency--0.7.0--0.8.0.sql
--
-- One transaction (however psql runs it); it changes nothing unless <storage>.installed
-- says 0.7.0. Hand-written; fixed once 0.8.0 is released. tests/tests/consistency/upgrade.rs
-- installs 0.7.0 (the base script and the upgrades up to it), upgrades, and compares every
-- object with a fresh 0.8.0 install. Each change of 0.8.0 is one block below, starting
-- with a comment line that names it.
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

-- 0.8.0: outcome counts per owner and scope in the counts table, for any number of scopes
-- (each backend its own row): idem_begin, idem_begin_batch, idem_complete and
-- idem_complete_batch count through the new _idem_count, _idem_count_outcome and
-- _idem_mark (replaced in place: their privileges and comments stay); idem_metrics gains
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

-- The client's mark a response is, if it is one (client/src/marks.rs): the object
-- {"pg_idempotency": {"unrecorded": "<why>"}} or {"pg_idempotency": {"outcome_unknown": "<why>"}},
-- with no other member. NULL for any other response.
CREATE FUNCTION :"storage"._idem_mark(response jsonb) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $fn$
    SELECT CASE
        WHEN jsonb_typeof($1) IS DISTINCT FROM 'object' OR NOT $1 ? 'pg_idempotency' THEN NULL
        WHEN (SELECT count(*) FROM jsonb_object_keys($1)) <> 1 THEN NULL
        WHEN jsonb_typeof($1 -> 'pg_idempotency' -> 'unrecorded') = 'string' THEN 'unrecorded'
        WHEN jsonb_typeof($1 -> 'pg_idempotency' -> 'outcome_unknown') = 'string' THEN 'outcome_unknown'
    END
$fn$;

REVOKE ALL ON FUNCTION
    :"storage"._idem_count(regrole, text, bigint, bigint, bigint, bigint, bigint, bigint, bigint),
    :"storage"._idem_count_outcome(regrole, text, text),
    :"storage"._idem_mark(jsonb)
FROM PUBLIC;

SET LOCAL search_path = pg_catalog, pg_temp;
-- The claim is _idem_begin_one's (sql/src/claims.sql), shared with idem_begin_batch. Its
-- outcome is counted in the call's transaction; a refusal raised is not (docs/decisions.md,
-- "Counts that never fold").
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
DECLARE
    res begin_result;
BEGIN
    res := _idem_begin_one(idem_begin.scope, idem_begin.key, idem_begin.request, NULL,
        idem_begin.ttl, idem_begin.lease, idem_begin.on_cache_hit, idem_begin.on_mismatch,
        idem_begin.wait, idem_begin.claim_token, false);
    PERFORM _idem_count_outcome(_idem_caller(), idem_begin.scope, res.outcome);
    RETURN res;
END
$fn$;

-- The completion is _idem_complete_one's (sql/src/claims.sql), shared with
-- idem_complete_batch. A completion with the client's mark (unrecorded, outcome_unknown)
-- is counted.
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
    IF _idem_mark(idem_complete.response) IS NOT NULL THEN
        PERFORM _idem_count(_idem_caller(), idem_complete.scope, 0, 0, 0, 0, 0,
            (_idem_mark(idem_complete.response) = 'unrecorded')::integer,
            (_idem_mark(idem_complete.response) = 'outcome_unknown')::integer);
    END IF;
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
            idem_begin_batch.on_mismatch, '0', v_tokens[it.i], true);
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
    PERFORM _idem_count(_idem_caller(), c_scope, 0, 0, 0, 0, 0,
        count(*) FILTER (WHERE _idem_mark(v_responses[items[s]]) = 'unrecorded'),
        count(*) FILTER (WHERE _idem_mark(v_responses[items[s]]) = 'outcome_unknown'))
    FROM generate_subscripts(items, 1) AS s
    WHERE NOT lost[s] AND _idem_mark(v_responses[items[s]]) IS NOT NULL
    HAVING count(*) > 0;
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
               count(*) FILTER (WHERE r.expires_at > now.t AND r.state = 'in_progress') AS in_progress,
               count(*) FILTER (WHERE r.expires_at > now.t AND r.state = 'succeeded') AS succeeded,
               count(*) FILTER (WHERE r.expires_at > now.t AND r.state = 'failed') AS failed,
               count(*) FILTER (WHERE r.expires_at > now.t AND r.state = 'in_progress'
                                  AND r.lease_until <= now.t) AS lapsed,
               count(*) FILTER (WHERE r.expires_at <= now.t) AS expired,
               now.t - min(r.created_at) FILTER (WHERE r.expires_at > now.t
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
