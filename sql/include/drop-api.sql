-- Shared by uninstall.sql and migrate-to-extension.sql: drops the portable variant's API
-- functions from :"schema" (the signatures sql/pg_idempotency.sql creates; include/
-- require-current.sql has checked that this is the version installed).
DROP FUNCTION :"schema".idem_begin(text, text, jsonb, interval, interval, text, text, interval),
    :"schema".idem_complete(text, text, bigint, jsonb, boolean, boolean),
    :"schema".idem_release(text, text, bigint),
    :"schema".idem_extend(text, text, bigint, interval),
    :"schema".idem_lookup(text, text, regrole),
    :"schema".idem_forget(text, text, regrole),
    :"schema".idem_canonical(jsonb),
    :"schema".idem_hash(jsonb),
    :"schema".idem_purge_expired(integer),
    :"schema".idem_set_policy(text, interval, interval, text, boolean, text),
    :"schema".idem_drop_policy(text),
    :"schema".idem_policies(),
    :"schema".idem_metrics();
