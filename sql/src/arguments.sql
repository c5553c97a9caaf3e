-- ---------------------------------------------------------------------------------------
-- Arguments: checked before anything is read or written, with the extension's messages.
-- ---------------------------------------------------------------------------------------

CREATE FUNCTION :"storage"._idem_text_arg(name text, value text, max bigint, setting text)
RETURNS text
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $fn$
BEGIN
    IF value IS NULL THEN
        PERFORM _idem_fail('22023', format('%s must not be null', name),
            format('idem_* functions need a %s to find the record.', name),
            format('Pass a non-blank %s.', name));
    END IF;
    -- Unicode White_Space, as the extension's check.
    IF value ~ '^[\u0009-\u000D\u0020\u0085\u00A0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]*$' THEN
        PERFORM _idem_fail('22023', format('%s must not be blank', name),
            format('The %s is empty or only whitespace.', name),
            format('Pass a non-blank %s.', name));
    END IF;
    IF octet_length(value) > max THEN
        PERFORM _idem_fail('22023', format('%s is too long', name),
            format('The %s has %s bytes; the limit is %s.', name, octet_length(value), max),
            format('Use a shorter %s, or raise %s.', name, setting));
    END IF;
    RETURN value;
END
$fn$;

-- The hints name the extension's settings, as its own messages do: in this variant they are
-- the columns of the same names in <storage>.settings.
CREATE FUNCTION :"storage"._idem_scope(value text, max bigint) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
RETURN _idem_text_arg('scope', value, max, 'pg_idempotency.max_scope_bytes');

CREATE FUNCTION :"storage"._idem_key(value text, max bigint) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
RETURN _idem_text_arg('key', value, max, 'pg_idempotency.max_key_bytes');

-- A positive (or, with allow_zero, zero) finite duration no longer than max (max_ttl), in
-- microseconds; NULL stays NULL.
CREATE FUNCTION :"storage"._idem_duration(name text, iv interval, allow_zero boolean, max bigint)
RETURNS bigint
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $fn$
DECLARE
    us numeric;
BEGIN
    IF iv IS NULL THEN
        RETURN NULL;
    END IF;
    us := _idem_micros(iv);
    IF us IS NULL THEN
        PERFORM _idem_fail('22023', format('%s must be finite', name),
            format('The %s is infinite.', name),
            format('Pass a %s of at most pg_idempotency.max_ttl (%s s).', name, max / 1000000));
    END IF;
    IF us < 0 OR (us = 0 AND NOT allow_zero) THEN
        PERFORM _idem_fail('22023',
            format('%s must be %s', name, CASE WHEN allow_zero THEN 'zero or positive' ELSE 'positive' END),
            format('The %s normalises to %s.', name, _idem_seconds(us)),
            format('Pass a %s such as ''30 seconds''.', name));
    END IF;
    IF us > max THEN
        PERFORM _idem_fail('22023', format('%s is too long', name),
            format('The %s normalises to %s; the limit is %s.', name, _idem_seconds(us), _idem_seconds(max)),
            format('Pass a shorter %s, or raise pg_idempotency.max_ttl.', name));
    END IF;
    RETURN us;
END
$fn$;

-- The lease in force: the call's (which may not exceed the ttl), else the policy's or
-- pg_idempotency.default_lease, capped by the ttl.
CREATE FUNCTION :"storage"._idem_effective_lease(given bigint, policy bigint, ttl bigint)
RETURNS bigint
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $fn$
BEGIN
    IF given IS NOT NULL AND given > ttl THEN
        PERFORM _idem_fail('22023', 'lease must not exceed ttl',
            format('The lease is %s and the ttl %s.', _idem_seconds(given), _idem_seconds(ttl)),
            'Pass a shorter lease or a longer ttl; extend a long call with idem_extend.');
    END IF;
    RETURN coalesce(given, least(coalesce(policy, _idem_default_lease_micros()), ttl));
END
$fn$;

-- The ttl in force: the call's, else the policy's, else pg_idempotency.default_ttl (checked
-- against max_ttl, in microseconds).
CREATE FUNCTION :"storage"._idem_effective_ttl(given bigint, policy bigint, max_ttl bigint)
RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE
RETURN coalesce(given, policy,
    _idem_duration('ttl', _idem_interval(_idem_default_ttl_micros()), false, max_ttl));

CREATE FUNCTION :"storage"._idem_word(name text, value text, words text[]) RETURNS text
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $fn$
BEGIN
    IF value IS NULL OR value = ANY (words) THEN
        RETURN value;
    END IF;
    PERFORM _idem_fail('22023', format('unknown %s "%s"', name, left(value, 64)),
        format('%s takes one of: %s.', name, array_to_string(words, ', ')),
        format('Pass one of those words, or NULL for the default (%s).', words[1]));
    RETURN NULL;
END
$fn$;

CREATE FUNCTION :"storage"._idem_on_cache_hit(value text) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
RETURN _idem_word('on_cache_hit', value,
                  ARRAY['return_cached', 'return_cached_if_success', 'fail_fast']);

CREATE FUNCTION :"storage"._idem_on_mismatch(value text) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
RETURN _idem_word('on_mismatch', value, ARRAY['reject', 'ignore']);

CREATE FUNCTION :"storage"._idem_fence(value bigint) RETURNS bigint
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $fn$
BEGIN
    IF value IS NULL THEN
        PERFORM _idem_fail('22023', 'fence must not be null',
            'Only the holder of a claim may complete, release or extend it, named by its fence.',
            'Pass the fence that idem_begin returned with outcome ''claimed''.');
    END IF;
    RETURN value;
END
$fn$;

CREATE FUNCTION :"storage"._idem_lease_lost(detail text) RETURNS void
LANGUAGE sql VOLATILE PARALLEL SAFE
RETURN _idem_fail('IK003', 'lease lost: this fence does not hold the record', detail,
    'Another attempt took the call over, or it was completed, released or expired; do not '
    'apply this attempt''s result. Call idem_begin again to learn the call''s state.');

CREATE FUNCTION :"storage"._idem_contention() RETURNS void
LANGUAGE sql VOLATILE PARALLEL SAFE
RETURN _idem_fail('40001', 'could not settle the record: it kept changing',
    '1000 concurrent changes to this key overtook this call.', 'Retry the call.');
