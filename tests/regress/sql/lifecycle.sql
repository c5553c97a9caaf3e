-- The life of one call: claim, duplicate while running, completion, replay, lookup, forget.
-- Times and uuids vary from run to run, so rows show what they imply, not their values.
\set VERBOSITY verbose
\set SHOW_CONTEXT never

-- A first call claims the key and gets a fence.
SELECT outcome, fence IS NOT NULL AS has_fence, attempt, recovered, succeeded, response,
       lease_until > clock_timestamp() AS lease_live,
       expires_at - lease_until AS ttl_minus_lease
FROM idem_begin('send_email', 'order-1', '{"to": "ann@example.com"}');

-- A duplicate while it runs learns that, and never the holder's fence.
SELECT outcome, fence, attempt, succeeded, retry_after > '0' AND retry_after <= '1 minute' AS retry_after_ok
FROM idem_begin('send_email', 'order-1', '{"to": "ann@example.com"}');

-- The holder completes with its fence.
SELECT state, expires_at > clock_timestamp() + interval '59 minutes' AS remembered_for_ttl
FROM idem_complete('send_email', 'order-1', 1, '{"message_id": 42}');

-- A repeat replays the stored result.
SELECT outcome, fence, attempt, recovered, succeeded, response, lease_until, retry_after
FROM idem_begin('send_email', 'order-1', '{"to": "ann@example.com"}');

-- Completing again with the same fence is a no-op that keeps the stored result.
SELECT state FROM idem_complete('send_email', 'order-1', 1, '{"message_id": 999}');
SELECT response FROM idem_lookup('send_email', 'order-1');

-- The record, as idem_lookup shows it.
SELECT scope, key, state, fence, attempt, octet_length(fingerprint) AS fingerprint_bytes,
       upstream_key IS NOT NULL AS has_upstream_key, response,
       completed_at >= created_at AS completed_after_created, lease_until, ttl, owner
FROM idem_lookup('send_email', 'order-1');

-- The same key in another scope is another call.
SELECT outcome, fence FROM idem_begin('send_sms', 'order-1');

-- Named arguments, in any order.
SELECT outcome FROM idem_begin(key => 'order-2', scope => 'send_email', ttl => '10 minutes',
                               lease => '30 seconds', on_cache_hit => 'return_cached',
                               on_mismatch => 'reject', wait => '0');
SELECT expires_at - lease_until AS ttl_minus_lease FROM idem_lookup('send_email', 'order-2');

-- HASH_INPUT: a NULL key is the hex SHA-256 of the request.
SELECT outcome, attempt FROM idem_begin('charge_card', NULL, '{"amount": 100, "card": "c1"}');
SELECT key ~ '^[0-9a-f]{64}$' AS hex_sha256, key = encode(fingerprint, 'hex') AS key_is_fingerprint
FROM idem_lookup('charge_card', encode(sha256(convert_to('{"amount":100,"card":"c1"}', 'UTF8')), 'hex'));
-- The same request, spelled differently, finds the same call.
SELECT outcome FROM idem_begin('charge_card', NULL, '{"card":"c1",  "amount":100}');

-- Forget removes a record; the next begin claims afresh with attempt 1.
SELECT idem_forget('send_email', 'order-1') AS forgotten;
SELECT idem_forget('send_email', 'order-1') AS forgotten_again;
SELECT count(*) AS rows FROM idem_lookup('send_email', 'order-1');
SELECT outcome, attempt FROM idem_begin('send_email', 'order-1');

-- Release gives a claim up and leaves nothing behind: the next begin claims afresh.
SELECT fence AS released_fence FROM idem_lookup('send_email', 'order-2') \gset
SELECT idem_release('send_email', 'order-2', :released_fence);
SELECT outcome, attempt, recovered, fence > :released_fence AS fence_grew
FROM idem_begin('send_email', 'order-2');

-- Extend pushes the lease (and never lets the record expire before it).
SELECT fence AS f2 FROM idem_lookup('send_email', 'order-2') \gset
SELECT lease_until > clock_timestamp() + interval '4 minutes' AS extended,
       expires_at >= lease_until AS expiry_covers_lease
FROM idem_extend('send_email', 'order-2', :f2, '5 minutes');
SELECT lease_until > clock_timestamp() + interval '59 seconds' AS default_lease
FROM idem_extend('send_email', 'order-2', :f2);
