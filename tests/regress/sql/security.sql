-- Security: privileges, search_path immunity, durable commits. (Install hygiene: install.sql
-- for the extension, tests/tests/operations/portable.rs for the portable variant.)
\set SHOW_CONTEXT never

-- Execute is not granted to PUBLIC; members of idempotency_user may call the API.
CREATE ROLE idem_stranger LOGIN;
CREATE ROLE idem_app LOGIN IN ROLE idempotency_user;
SET ROLE idem_stranger;
\set VERBOSITY sqlstate
SELECT outcome FROM idem_begin('s', 'k');
SELECT count(*) FROM idempotency.records;
RESET ROLE;
SET ROLE idem_app;
SELECT outcome, attempt FROM idem_begin('s', 'k');
SELECT outcome FROM idem_begin('s', 'k');
SELECT state, owner FROM idem_lookup('s', 'k');
-- The storage is reachable only through the functions; purging and policies are for
-- operators.
SELECT count(*) FROM idempotency.records;
UPDATE idempotency.records SET state = 'succeeded';
SELECT nextval('idempotency.fence_seq');
SELECT idem_purge_expired();
SELECT * FROM idem_set_policy('s', ttl => '1 hour');
SELECT idem_drop_policy('s');
SELECT count(*) AS policies FROM idem_policies();
-- A role's metrics and forgets cover its own records.
SELECT owner, scope, in_progress FROM idem_metrics();
SELECT outcome FROM idem_begin('s', 'mine-to-forget');
SELECT idem_forget('s', 'mine-to-forget') AS forgotten;
RESET ROLE;
-- Another role has its own key space: the same scope and key is a call of its own, and
-- the first role's record is neither visible nor reachable.
CREATE ROLE idem_other LOGIN IN ROLE idempotency_user;
SET ROLE idem_other;
SELECT count(*) AS sees_nothing FROM idem_lookup('s', 'k');
SELECT outcome, attempt FROM idem_begin('s', 'k');
SELECT idem_forget('s', 'mine-to-forget') AS forgot_nothing;
SELECT * FROM idem_lookup('s', 'k', 'idem_app');
SELECT idem_forget('s', 'k', 'idem_app');
SELECT owner, scope, in_progress FROM idem_metrics();
RESET ROLE;
-- Operators: members of idempotency_admin see and forget any role's records.
CREATE ROLE idem_ops LOGIN IN ROLE idempotency_admin;
-- A record of idem_app's that expires as soon as it is made (a ttl of 1 microsecond).
SET ROLE idem_app;
SELECT outcome FROM idem_begin('s', 'expired', ttl => '1 microsecond', unresolved_ttl => '1 microsecond');
RESET ROLE;
SELECT count(*) AS stored FROM idempotency.records \gset
SET ROLE idem_ops;
SELECT scope, ttl FROM idem_set_policy('s', ttl => '1 hour');
SELECT idem_drop_policy('s') AS dropped;
SELECT idem_purge_expired() AS purged \gset
RESET ROLE;
-- The operator's purge removed the rows it counted (other files' expired records too),
-- idem_app's expired record among them.
SELECT count(*) = :stored - :purged AS purged_what_it_counted,
       count(*) FILTER (WHERE scope = 's' AND key = 'expired') AS expired_left
FROM idempotency.records;
SET ROLE idem_ops;
-- (Counters are the server's, every database's: rows of this database's records only.)
SELECT owner, scope, in_progress FROM idem_metrics() WHERE scope = 's' AND in_progress + succeeded > 0;
SELECT outcome FROM idem_begin('s', 'ops-k');
SELECT idem_forget('s', 'ops-k') AS forgotten;
SELECT state, owner FROM idem_lookup('s', 'k', 'idem_other');
SELECT idem_forget('s', 'k', 'idem_other') AS forgotten_for_them;
RESET ROLE;
\set VERBOSITY verbose
-- The owner is the role that made the call (SET ROLE counts), not the functions' owner.
SELECT owner FROM idem_lookup('s', 'k', 'idem_app');
-- A superuser's own key space holds nothing of theirs.
SELECT count(*) AS own FROM idem_lookup('s', 'k');
-- The grant roles own no records: every role granted one may SET ROLE to it, so each
-- call on records made as one is refused (IK006), the hint saying how to grant instead.
SET ROLE idempotency_user;
SELECT outcome FROM idem_begin('s', 'k');
\set VERBOSITY sqlstate
SELECT * FROM idem_lookup('s', 'k');
SELECT idem_forget('s', 'k');
RESET ROLE;
SET ROLE idempotency_admin;
SELECT outcome FROM idem_begin('s', 'k');
-- Naming an owner, it acts as the admin.
SELECT owner FROM idem_lookup('s', 'k', 'idem_app');
RESET ROLE;
\set VERBOSITY verbose

-- search_path hijack: a hostile schema placed before pg_catalog with its own =, lower,
-- now, nextval, and a temp table named like ours. Nothing of it is used.
CREATE SCHEMA evil;
CREATE TABLE evil.calls (what text);
GRANT ALL ON SCHEMA evil TO PUBLIC;
GRANT ALL ON evil.calls TO PUBLIC;
CREATE FUNCTION evil.texteq(a text, b text) RETURNS boolean LANGUAGE plpgsql AS
    $$ BEGIN INSERT INTO evil.calls VALUES ('='); RETURN true; END $$;
CREATE OPERATOR evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = evil.texteq);
CREATE FUNCTION evil.now() RETURNS timestamptz LANGUAGE plpgsql AS
    $$ BEGIN INSERT INTO evil.calls VALUES ('now'); RETURN '2000-01-01'; END $$;
CREATE FUNCTION evil.clock_timestamp() RETURNS timestamptz LANGUAGE plpgsql AS
    $$ BEGIN INSERT INTO evil.calls VALUES ('clock_timestamp'); RETURN '2000-01-01'; END $$;
CREATE FUNCTION evil.lower(text) RETURNS text LANGUAGE plpgsql AS
    $$ BEGIN INSERT INTO evil.calls VALUES ('lower'); RETURN $1; END $$;
CREATE FUNCTION evil.nextval(regclass) RETURNS bigint LANGUAGE plpgsql AS
    $$ BEGIN INSERT INTO evil.calls VALUES ('nextval'); RETURN 1; END $$;
-- A new session, so that its first calls meet the hostile path.
\c
\set VERBOSITY verbose
\set SHOW_CONTEXT never
CREATE TEMP TABLE records (scope text, key text, state text, fence bigint);
INSERT INTO records VALUES ('h', 'k', 'succeeded', 1);
SET search_path = evil, pg_temp, pg_catalog, public;
-- The hostile operator is really in the way of unqualified SQL ...
SELECT 'a'::text = 'b'::text AS hijacked_equals;
SELECT count(*) AS hostile_calls FROM evil.calls;
DELETE FROM evil.calls;
-- ... and not in ours.
SELECT outcome, fence IS NOT NULL AS has_fence FROM public.idem_begin('h', 'k', '{"a": 1}');
SELECT outcome FROM public.idem_begin('h', 'k', '{"a": 1}');
SELECT fence AS hf FROM public.idem_lookup('h', 'k') \gset
SELECT state FROM public.idem_complete('h', 'k', :hf, '{"ok": true}');
SELECT outcome, response FROM public.idem_begin('h', 'k', '{"a": 1}');
SELECT outcome FROM public.idem_begin('h', 'k2');
SELECT fence AS hf2 FROM public.idem_lookup('h', 'k2') \gset
SELECT lease_until > pg_catalog.clock_timestamp() + interval '59 seconds' AS extended
FROM public.idem_extend('h', 'k2', :hf2);
SELECT public.idem_release('h', 'k2', :hf2);
SELECT public.idem_forget('h', 'k');
SELECT scope, ttl FROM public.idem_set_policy('h', ttl => '1 hour');
-- (The test's own SQL here must not meet the hostile path either: pg_catalog's =.)
SELECT count(*) AS policies FROM public.idem_policies() p WHERE p.scope OPERATOR(pg_catalog.=) 'h';
SELECT public.idem_drop_policy('h');
SELECT outcome FROM public.idem_begin('h', 'live');
SELECT outcome FROM public.idem_begin('h', 'expired', ttl => '1 microsecond', unresolved_ttl => '1 microsecond');
SELECT pg_catalog.count(*) AS stored FROM idempotency.records \gset
SELECT public.idem_purge_expired() AS purged \gset
SELECT scope, in_progress, succeeded, failed, expired
FROM public.idem_metrics() m WHERE m.scope OPERATOR(pg_catalog.=) 'h';
SELECT pg_catalog.count(*) AS hostile_calls FROM evil.calls;
RESET search_path;
SELECT count(*) = :stored - :purged AS purged_what_it_counted,
       count(*) FILTER (WHERE scope = 'h' AND key = 'expired') AS expired_left
FROM idempotency.records;
DROP TABLE pg_temp.records;
SET client_min_messages = warning;
DROP SCHEMA evil CASCADE;
RESET client_min_messages;

-- Durability: a claim or completion commits synchronously whatever the session says.
BEGIN;
SET LOCAL synchronous_commit = off;
SELECT outcome FROM idem_begin('durable', 'd1');
SHOW synchronous_commit;
COMMIT;
BEGIN;
SET LOCAL synchronous_commit = off;
SELECT count(*) FROM idem_lookup('durable', 'd1');
SHOW synchronous_commit;
COMMIT;

DROP ROLE idem_stranger;
DROP ROLE idem_ops;
REVOKE idempotency_user FROM idem_other;
DROP ROLE idem_other;
REVOKE idempotency_user FROM idem_app;
DROP OWNED BY idem_app;
DROP ROLE idem_app;
