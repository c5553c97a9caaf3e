-- Walks the table in physical order, batch_size expired rows per statement, locked with
-- SKIP LOCKED (a row a concurrent idem_begin is claiming again is left for the next run)
-- and re-checked under the lock, so a live record is never deleted (nor one whose outcome
-- is unknown before its unresolved bound). No index on
-- expires_at: its updates would make every completion a non-HOT update.
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
