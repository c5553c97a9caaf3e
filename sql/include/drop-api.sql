-- Shared by uninstall.sql and migrate-to-extension.sql: drops the portable variant's API
-- functions from :"schema" (the signatures sql/pg_idempotency.sql creates; include/
-- require-current.sql has checked that this is the version installed).
--
-- idem_lookup and idem_forget took no owner before 0.2.0; an install made by a development
-- script of 0.2.0 may still have that form, so either is dropped (quietly).
SET LOCAL client_min_messages = warning;
DROP FUNCTION IF EXISTS :"schema".idem_lookup(text, text, regrole),
    :"schema".idem_forget(text, text, regrole),
    :"schema".idem_lookup(text, text),
    :"schema".idem_forget(text, text);
DROP FUNCTION :"schema".idem_begin(text, text, jsonb, interval, interval, text, text, interval, uuid, interval),
    :"schema".idem_complete(text, text, bigint, jsonb, boolean, boolean),
    :"schema".idem_begin_batch(text, text[], jsonb[], interval, interval, text, text, uuid[]),
    :"schema".idem_complete_batch(text, text[], bigint[], jsonb[], boolean[], boolean[]),
    :"schema".idem_release(text, text, bigint),
    :"schema".idem_extend(text, text, bigint, interval),
    :"schema".idem_canonical(jsonb),
    :"schema".idem_hash(jsonb),
    :"schema".idem_purge_expired(integer),
    :"schema".idem_set_policy(text, interval, interval, text, boolean, text, interval),
    :"schema".idem_drop_policy(text),
    :"schema".idem_policies(),
    :"schema".idem_metrics(),
    :"schema".idem_unresolved(regrole),
    :"schema".idem_resolve(text, text, bigint, text, text, jsonb, regrole),
    :"schema".idem_resolutions(regrole);
