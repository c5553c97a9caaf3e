-- Canonical JSON (docs/canonical-json.md): RFC 8785 with lossless numbers, and its SHA-256.
\set VERBOSITY verbose
\set SHOW_CONTEXT never

-- Keys sorted by UTF-16 code units, no whitespace, the last duplicate wins.
SELECT idem_canonical('{"b": 2, "a": 1, "a": 3, "é": [true, null], "\ud83d\ude00": "x", "\ue000": "y"}');
-- Numbers: their exact value, in ECMAScript's layout.
SELECT n, idem_canonical(n::jsonb)
FROM unnest(ARRAY['1.0', '1.00', '1e0', '-0', '0.1', '100', '1e21', '0.0000001', '-1.5E-7',
                  '9007199254740993', '333333333.33333329', '1e400', '1e-400']) AS n;
-- Strings: JCS escapes; / and DEL stay raw.
SELECT idem_canonical('"tab\t quote\" slash/ bell\u0007 euro\u20ac"');
SELECT idem_canonical('"\u007f"') = '"' || chr(127) || '"' AS del_raw;
-- The same request, spelled differently, has one fingerprint; a different one does not.
SELECT idem_hash('{"amount": 100, "card": "c1"}') = idem_hash('{ "card":"c1", "amount":1.00e2 }') AS same,
       idem_hash('{"amount": 100, "card": "c1"}') = idem_hash('{"amount": 100.000000000000001, "card": "c1"}') AS different_amount;
SELECT octet_length(idem_hash('{}')) AS bytes,
       idem_hash('{"a": [1, "x"]}') = sha256(convert_to('{"a":[1,"x"]}', 'UTF8')) AS sha256_of_canonical_text;
-- HASH_INPUT: a NULL key is the hex of the request's hash.
SELECT outcome FROM idem_begin('charge', NULL, '{"card": "c1", "amount": 100}');
SELECT count(*) AS found FROM idem_lookup('charge', encode(idem_hash('{"amount":100,"card":"c1"}'), 'hex'));
SELECT fingerprint = idem_hash('{"amount": 1e2, "card": "c1"}') AS fingerprint_is_the_hash
FROM idem_lookup('charge', encode(idem_hash('{"amount":100,"card":"c1"}'), 'hex'));
-- Strict and immutable: NULL in, NULL out; usable in indexes.
SELECT idem_hash(NULL) IS NULL AS null_in_null_out;
SELECT provolatile, proisstrict, proparallel FROM pg_proc WHERE proname IN ('idem_hash', 'idem_canonical');

-- IK005: nesting deeper than 128 levels has no canonical form.
SELECT idem_canonical((repeat('[', 129) || repeat(']', 129))::jsonb);
SELECT length(idem_canonical((repeat('[', 128) || repeat(']', 128))::jsonb)) AS depth_128_ok;
SELECT outcome FROM idem_begin('deep', NULL, (repeat('{"a":', 129) || '1' || repeat('}', 129))::jsonb);
