-- Transactional use: idem_begin, the write and idem_complete in one transaction are
-- exactly-once. (Two sessions racing are in tests/isolation.)
\set VERBOSITY verbose
\set SHOW_CONTEXT never
CREATE TABLE outbox (id serial PRIMARY KEY, body text);

-- A claim in a rolled-back transaction vanishes with it.
BEGIN;
SELECT outcome FROM idem_begin('send_email', 'tx-1');
INSERT INTO outbox (body) VALUES ('hello');
ROLLBACK;
SELECT count(*) AS rows FROM idem_lookup('send_email', 'tx-1');
SELECT count(*) AS emails FROM outbox;

-- Committed: the claim, the write and the completion become visible together.
BEGIN;
SELECT fence AS f FROM idem_begin('send_email', 'tx-1') \gset
INSERT INTO outbox (body) VALUES ('hello');
SELECT state FROM idem_complete('send_email', 'tx-1', :f, '{"outbox_id": 1}');
COMMIT;
SELECT outcome, response FROM idem_begin('send_email', 'tx-1');
SELECT count(*) AS emails FROM outbox;

-- A savepoint rolled back undoes the claim but not the transaction.
BEGIN;
SAVEPOINT before_claim;
SELECT outcome FROM idem_begin('send_email', 'tx-2');
ROLLBACK TO SAVEPOINT before_claim;
SELECT count(*) AS rows FROM idem_lookup('send_email', 'tx-2');
COMMIT;

-- Times come from the wall clock, not the transaction's start.
BEGIN;
SELECT pg_sleep(0.1);
SELECT outcome FROM idem_begin('send_email', 'tx-3');
SELECT created_at > now() + interval '50 ms' AS wall_clock FROM idem_lookup('send_email', 'tx-3');
COMMIT;
DROP TABLE outbox;
