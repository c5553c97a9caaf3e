-- ---------------------------------------------------------------------------------------
-- Canonical JSON (docs/canonical-json.md): RFC 8785 with lossless numbers, byte for byte
-- what the extension and the Rust client compute.
-- ---------------------------------------------------------------------------------------

-- A number: jsonb keeps its exact decimal value, and numeric's text form writes it without
-- an exponent, so its significant digits are all there is to write, in ECMAScript's layout
-- (Number::toString). No float8 is involved, so its text form's quirks never matter.
CREATE FUNCTION :"storage"._idem_canonical_number(literal text) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
DECLARE
    negative boolean := left(literal, 1) = '-';
    body text := CASE WHEN negative THEN substr(literal, 2) ELSE literal END;
    int_part text := split_part(body, '.', 1);
    all_digits text := int_part || split_part(body, '.', 2);
    digits text := ltrim(all_digits, '0');
    k integer;
    n integer;
    e integer;
    out text;
BEGIN
    IF digits = '' THEN
        RETURN '0';
    END IF;
    -- value = 0.DIGITS x 10^n
    n := length(int_part) - (length(all_digits) - length(digits));
    digits := rtrim(digits, '0');
    k := length(digits);
    IF k <= n AND n <= 21 THEN
        out := digits || repeat('0', n - k);
    ELSIF 0 < n AND n <= 21 THEN
        out := left(digits, n) || '.' || substr(digits, n + 1);
    ELSIF -6 < n AND n <= 0 THEN
        out := '0.' || repeat('0', -n) || digits;
    ELSE
        e := n - 1;
        out := left(digits, 1) || CASE WHEN k > 1 THEN '.' || substr(digits, 2) ELSE '' END
               || 'e' || CASE WHEN e < 0 THEN '-' ELSE '+' END || abs(e);
    END IF;
    RETURN CASE WHEN negative THEN '-' || out ELSE out END;
END
$fn$;

-- An object key's place in UTF-16 code unit order, for keys with characters beyond the
-- Basic Multilingual Plane (whose surrogates sort before U+E000..U+FFFF).
CREATE FUNCTION :"storage"._idem_utf16(key text) RETURNS bytea
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN coalesce((
    SELECT decode(string_agg(
               CASE WHEN c < 65536 THEN lpad(to_hex(c), 4, '0')
                    ELSE to_hex(55296 + ((c - 65536) >> 10)) || to_hex(56320 + ((c - 65536) & 1023))
               END, '' ORDER BY i), 'hex')
    FROM (SELECT ascii(ch) AS c, i FROM regexp_split_to_table(key, '') WITH ORDINALITY AS t(ch, i)) AS chars),
    '\x'::bytea);

-- The canonical text of a jsonb value that sits at nesting level `depth` (1 at the top).
CREATE FUNCTION :"storage"._idem_canonical_value(v jsonb, depth integer) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
DECLARE
    kind text := jsonb_typeof(v);
    out text;
BEGIN
    IF kind = 'object' OR kind = 'array' THEN
        IF depth > 128 THEN
            PERFORM _idem_fail('IK005', 'request has no canonical form',
                'JSON nested deeper than 128 levels.',
                'Requests are hashed in canonical JSON, which allows at most 128 levels of nesting.');
        END IF;
    END IF;
    IF kind = 'object' THEN
        -- Code point order is UTF-16 order unless a key has a supplementary character.
        IF getdatabaseencoding() = 'UTF8'
           AND EXISTS (SELECT FROM jsonb_object_keys(v) AS k WHERE k ~ '[\U00010000-\U0010FFFF]') THEN
            SELECT string_agg(to_jsonb(e.key)::text || ':' ||
                       CASE jsonb_typeof(e.value)
                           WHEN 'object' THEN _idem_canonical_value(e.value, depth + 1)
                           WHEN 'array' THEN _idem_canonical_value(e.value, depth + 1)
                           WHEN 'number' THEN _idem_canonical_number(e.value::text)
                           ELSE e.value::text END,
                       ',' ORDER BY _idem_utf16(e.key))
            INTO out FROM jsonb_each(v) AS e;
        ELSE
            SELECT string_agg(to_jsonb(e.key)::text || ':' ||
                       CASE jsonb_typeof(e.value)
                           WHEN 'object' THEN _idem_canonical_value(e.value, depth + 1)
                           WHEN 'array' THEN _idem_canonical_value(e.value, depth + 1)
                           WHEN 'number' THEN _idem_canonical_number(e.value::text)
                           ELSE e.value::text END,
                       ',' ORDER BY convert_to(e.key, 'UTF8'))
            INTO out FROM jsonb_each(v) AS e;
        END IF;
        RETURN '{' || coalesce(out, '') || '}';
    ELSIF kind = 'array' THEN
        SELECT string_agg(
                   CASE jsonb_typeof(a.value)
                       WHEN 'object' THEN _idem_canonical_value(a.value, depth + 1)
                       WHEN 'array' THEN _idem_canonical_value(a.value, depth + 1)
                       WHEN 'number' THEN _idem_canonical_number(a.value::text)
                       ELSE a.value::text END,
                   ',' ORDER BY a.i)
        INTO out FROM jsonb_array_elements(v) WITH ORDINALITY AS a(value, i);
        RETURN '[' || coalesce(out, '') || ']';
    ELSIF kind = 'number' THEN
        RETURN _idem_canonical_number(v::text);
    END IF;
    -- Strings, true, false, null: jsonb writes strings with exactly JCS's escapes.
    RETURN v::text;
END
$fn$;

CREATE FUNCTION :"storage"._idem_hash(request jsonb) RETURNS bytea
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN sha256(convert_to(_idem_canonical_value(request, 1), 'UTF8'));
