-- Result rows: the extension's named composite types, in the storage schema.
CREATE TYPE :"storage".begin_result AS (
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
    key          text);
COMMENT ON TYPE :"storage".begin_result IS 'What idem_begin answers';
CREATE TYPE :"storage".complete_result AS (state text, expires_at timestamptz);
COMMENT ON TYPE :"storage".complete_result IS 'What idem_complete answers';
CREATE TYPE :"storage".extend_result AS (lease_until timestamptz, expires_at timestamptz);
COMMENT ON TYPE :"storage".extend_result IS 'What idem_extend answers';
CREATE TYPE :"storage".lookup_result AS (
    scope        text,
    key          text,
    state        text,
    fence        bigint,
    attempt      integer,
    fingerprint  bytea,
    upstream_key uuid,
    response     jsonb,
    created_at   timestamptz,
    completed_at timestamptz,
    lease_until  timestamptz,
    expires_at   timestamptz,
    ttl          interval,
    owner        regrole);
COMMENT ON TYPE :"storage".lookup_result IS 'A record as idem_lookup shows it';
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
