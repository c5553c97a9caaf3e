-- ---------------------------------------------------------------------------------------
-- Configuration: the partitions, and a range of fences for each.
-- ---------------------------------------------------------------------------------------
-- A fence names one claim of one call anywhere: each partition hands out fences from a
-- range of its own, partition p from [p * 2^44, (p + 1) * 2^44). A range holds 1.7e13
-- claims (55 years at 10,000 claims a second), 512 of them fit below 2^53, so a fence
-- stays exact in every JSON client, and growing from N to 2N partitions (docs/scaling.md)
-- moves a record only from partition p to partition p + N, whose fences are all higher,
-- so a takeover after a move still gets a fence above its holder's.
--
-- The fence sequence's last value on partition p (NULL when it never handed one out).
CREATE FUNCTION idempotency._idem_fence_last(p_partition integer, p_sequence text)
RETURNS bigint
VOLATILE STRICT PARALLEL UNSAFE
LANGUAGE plproxy AS $fn$
    CLUSTER 'pg_idempotency';
    RUN ON p_partition;
    SELECT pg_catalog.pg_sequence_last_value(p_sequence::pg_catalog.regclass) AS _idem_fence_last;
$fn$;

-- Moves partition p's fence sequence up to the start of its range.
CREATE FUNCTION idempotency._idem_fence_floor(p_partition integer, p_sequence text, p_floor bigint)
RETURNS bigint
VOLATILE STRICT PARALLEL UNSAFE
LANGUAGE plproxy AS $fn$
    CLUSTER 'pg_idempotency';
    RUN ON p_partition;
    SELECT pg_catalog.setval(p_sequence::pg_catalog.regclass, p_floor) AS _idem_fence_floor;
$fn$;

-- Both run as any SQL on a partition; only idem_proxy_configure (a superuser's) calls them.
REVOKE ALL ON FUNCTION idempotency._idem_fence_last(integer, text),
    idempotency._idem_fence_floor(integer, text, bigint) FROM PUBLIC;

-- Points the proxy at its partitions, in order (a partition keeps its number for good:
-- its records and its fence range are tied to it): the PL/Proxy cluster pg_idempotency
-- (an SQL/MED server, created or updated; options other than the partitions' are kept),
-- a user mapping for PUBLIC without a user (PL/Proxy then connects as the calling role;
-- add per-role mappings with passwords where the partitions ask for them), USAGE for
-- idempotency_user, and each partition's fence range. Answers each partition's number
-- and fence range. Needs a superuser; run it again after adding partitions.
CREATE FUNCTION public.idem_proxy_configure(
    partitions     text[],
    fence_sequence text DEFAULT 'idempotency.fence_seq')
RETURNS TABLE (partition integer, fences_from bigint, fences_below bigint)
VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
LANGUAGE plpgsql AS $fn$
DECLARE
    range_size CONSTANT bigint := 17592186044416;  -- 2^44
    n integer := coalesce(cardinality(partitions), 0);
    old_options text[];
    changes text[] := '{}';
    last bigint;
    i integer;
BEGIN
    IF n < 1 OR n > 512 OR (n & (n - 1)) <> 0 THEN
        RAISE EXCEPTION 'pg_idempotency: the partition count must be a power of two from 1 to 512'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = format('%s connection strings were given.', n),
                  HINT = 'PL/Proxy picks a partition by the low bits of the routing hash: give 1, 2, 4, 8, ... connection strings.';
    END IF;
    IF array_position(partitions, NULL) IS NOT NULL
       OR EXISTS (SELECT FROM unnest(partitions) AS p(c) WHERE btrim(p.c) = '') THEN
        RAISE EXCEPTION 'pg_idempotency: a partition''s connection string is blank'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = format('Partitions given: %s.', partitions),
                  HINT = 'Give one libpq connection string per partition, e.g. ''host=db0 dbname=app''.';
    END IF;
    IF fence_sequence IS NULL THEN
        RAISE EXCEPTION 'pg_idempotency: the partitions'' fence sequence is NULL'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'Each partition''s fence sequence is moved to the start of its range.',
                  HINT = 'Leave it out for the default, idempotency.fence_seq (the portable variant: <storage>.fence_seq).';
    END IF;

    SELECT s.srvoptions INTO old_options FROM pg_foreign_server s WHERE s.srvname = 'pg_idempotency';
    IF NOT FOUND THEN
        EXECUTE format('CREATE SERVER pg_idempotency FOREIGN DATA WRAPPER plproxy OPTIONS (%s)',
            (SELECT string_agg(format('p%s %L', o - 1, partitions[o]), ', ' ORDER BY o)
             FROM generate_subscripts(partitions, 1) AS o));
    ELSE
        -- p0 .. p<n-1> set or added, any partition beyond them dropped, the rest kept.
        FOR i IN 0 .. greatest(n, (SELECT count(*) FROM unnest(old_options) AS o(v)
                                   WHERE o.v ~ '^p[0-9]+=')::integer) - 1 LOOP
            IF i < n THEN
                changes := changes || format('%s p%s %L',
                    CASE WHEN EXISTS (SELECT FROM unnest(old_options) AS o(v) WHERE o.v LIKE format('p%s=%%', i))
                         THEN 'SET' ELSE 'ADD' END, i, partitions[i + 1]);
            ELSIF EXISTS (SELECT FROM unnest(old_options) AS o(v) WHERE o.v LIKE format('p%s=%%', i)) THEN
                changes := changes || format('DROP p%s', i);
            END IF;
        END LOOP;
        EXECUTE format('ALTER SERVER pg_idempotency OPTIONS (%s)', array_to_string(changes, ', '));
    END IF;
    IF NOT EXISTS (SELECT FROM pg_user_mappings m WHERE m.srvname = 'pg_idempotency' AND m.usename = 'public') THEN
        CREATE USER MAPPING FOR PUBLIC SERVER pg_idempotency;
    END IF;
    GRANT USAGE ON FOREIGN SERVER pg_idempotency TO idempotency_user;

    FOR i IN 0 .. n - 1 LOOP
        last := idempotency._idem_fence_last(i, fence_sequence);
        IF last >= (i + 1) * range_size THEN
            RAISE EXCEPTION 'pg_idempotency: partition % has handed out fences beyond its range', i
                USING ERRCODE = 'invalid_parameter_value',
                      DETAIL = format('Its fence sequence is at %s; its range ends below %s.', last, (i + 1) * range_size),
                      HINT = 'A partition keeps its number: list the partitions in the order they were first configured.';
        END IF;
        IF i > 0 AND coalesce(last, 0) < i * range_size THEN
            PERFORM idempotency._idem_fence_floor(i, fence_sequence, i * range_size);
        END IF;
        partition := i;
        fences_from := greatest(i * range_size, 1);
        fences_below := (i + 1) * range_size;
        RETURN NEXT;
    END LOOP;
END
$fn$;
COMMENT ON FUNCTION public.idem_proxy_configure(text[], text) IS
    'Point the PL/Proxy layer at its partitions (in order; a power of two of them) and give each its range of fences';
REVOKE ALL ON FUNCTION public.idem_proxy_configure(text[], text) FROM PUBLIC;
