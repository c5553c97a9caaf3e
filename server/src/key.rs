//! The `Idempotency-Key` header, read as callers send it.
//!
//! The IETF draft (draft-ietf-httpapi-idempotency-key-header) makes the field an RFC 8941
//! Item whose value is an sf-string: `Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"`.
//! Stripe's clients, and most others in use, send the key bare:
//! `Idempotency-Key: 8e03978e-40d5-43e8-bc93-6894a57f9324`. Both are accepted and give the
//! same key (the characters between the quotes, escapes undone). Anything ambiguous is
//! refused rather than guessed at, because a key read two ways would deduplicate nothing.

use http::{HeaderMap, HeaderValue};
use std::fmt;

/// The header's name, lower case as `http` stores it.
pub const HEADER: &str = "idempotency-key";

/// Why an `Idempotency-Key` header was refused. Each variant becomes a 400 problem+json
/// (see `Problem::bad_key`), with `detail()` and `hint()` as its text. More reasons may come
/// in a later release: a `match` on it needs a `_` arm.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyError {
    /// The header is present but empty, or is the empty sf-string `""`.
    Empty,
    /// A byte outside printable ASCII (0x20..=0x7E): non-ASCII or a control character.
    /// `at` is its byte offset in the header value.
    NotPrintableAscii { at: usize },
    /// A bare key holding a space or a double quote, which only an sf-string may hold.
    NotAToken { at: usize },
    /// An sf-string without its closing quote.
    Unterminated,
    /// A backslash in an sf-string followed by something other than `"` or `\`.
    BadEscape { at: usize },
    /// Characters after an sf-string's closing quote (RFC 8941 parameters included: the
    /// draft defines none, and a key whose identity depends on them is refused, not trimmed).
    TrailingCharacters { at: usize },
    /// The key (after its escapes are undone) is longer than the configured maximum.
    TooLong { len: usize, max: usize },
    /// The request carries the header more than once.
    Several { count: usize },
}

impl KeyError {
    /// What is wrong with the header, for problem+json's `detail`.
    pub fn detail(&self) -> String {
        match self {
            KeyError::Empty => "the Idempotency-Key header is empty".to_string(),
            KeyError::NotPrintableAscii { at } => format!(
                "the Idempotency-Key header has a character outside printable ASCII \
                 (a non-ASCII or control character) at byte {at}"
            ),
            KeyError::NotAToken { at } => format!(
                "the Idempotency-Key header is not quoted and has a space or a double quote \
                 at byte {at}"
            ),
            KeyError::Unterminated => {
                "the Idempotency-Key header opens a quoted string that is never closed".to_string()
            }
            KeyError::BadEscape { at } => format!(
                "the Idempotency-Key header's quoted string has a backslash at byte {at} \
                 that escapes neither \" nor \\"
            ),
            KeyError::TrailingCharacters { at } => format!(
                "the Idempotency-Key header has characters after its closing quote, \
                 from byte {at}"
            ),
            KeyError::TooLong { len, max } => format!(
                "the Idempotency-Key is {len} bytes long, more than the {max} this service accepts"
            ),
            KeyError::Several { count } => {
                format!("the request carries {count} Idempotency-Key headers; one is expected")
            }
        }
    }

    /// How to send a key this service accepts, for problem+json's `hint`.
    pub fn hint(&self) -> String {
        match self {
            KeyError::Several { .. } => {
                "send exactly one Idempotency-Key header per request".to_string()
            }
            KeyError::TooLong { max, .. } => {
                format!("send a key of at most {max} bytes, for example a UUID")
            }
            _ => "send a unique key per operation, quoted as an RFC 8941 string \
                  (Idempotency-Key: \"8e03978e-40d5-43e8-bc93-6894a57f9324\") \
                  or bare (Idempotency-Key: 8e03978e-40d5-43e8-bc93-6894a57f9324), \
                  printable ASCII only"
                .to_string(),
        }
    }
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.detail())
    }
}

impl std::error::Error for KeyError {}

/// The key one `Idempotency-Key` value carries: `None` when there is no header, the key
/// when it is a valid sf-string or bare token of at most `max_len` bytes, the reason
/// otherwise.
pub fn parse(value: Option<&HeaderValue>, max_len: usize) -> Result<Option<String>, KeyError> {
    let Some(value) = value else {
        return Ok(None);
    };
    let raw = value.as_bytes();
    // RFC 8941 parsers discard surrounding spaces, and HTTP field values never include
    // surrounding whitespace (RFC 9110 5.5); a value built by hand may still carry it.
    let (start, trimmed) = trim_ows(raw);
    if trimmed.is_empty() {
        return Err(KeyError::Empty);
    }
    let key = if trimmed[0] == b'"' {
        sf_string(trimmed, start)?
    } else {
        bare_token(trimmed, start)?
    };
    if key.is_empty() {
        return Err(KeyError::Empty);
    }
    if key.len() > max_len {
        return Err(KeyError::TooLong {
            len: key.len(),
            max: max_len,
        });
    }
    Ok(Some(key))
}

/// The request's key: `parse` of its one `Idempotency-Key` header; two or more are refused
/// (which one would the caller mean?).
pub fn parse_headers(headers: &HeaderMap, max_len: usize) -> Result<Option<String>, KeyError> {
    let mut values = headers.get_all(HEADER).iter();
    let first = values.next();
    let others = values.count();
    if others > 0 {
        return Err(KeyError::Several { count: others + 1 });
    }
    parse(first, max_len)
}

fn trim_ows(raw: &[u8]) -> (usize, &[u8]) {
    let is_ows = |b: &u8| *b == b' ' || *b == b'\t';
    let start = raw.iter().position(|b| !is_ows(b)).unwrap_or(raw.len());
    let end = raw
        .iter()
        .rposition(|b| !is_ows(b))
        .map_or(start, |i| i + 1);
    (start, &raw[start..end])
}

fn is_printable(b: u8) -> bool {
    (0x20..=0x7E).contains(&b)
}

/// RFC 8941 4.2.5 (Parsing a String), then "nothing may follow" as for a whole Item.
/// `offset` is where `input` starts in the header value, for the error positions.
fn sf_string(input: &[u8], offset: usize) -> Result<String, KeyError> {
    let mut key = String::with_capacity(input.len());
    let mut i = 1; // past the opening quote
    while i < input.len() {
        let b = input[i];
        match b {
            b'\\' => {
                let Some(&next) = input.get(i + 1) else {
                    return Err(KeyError::Unterminated);
                };
                if next != b'"' && next != b'\\' {
                    if !is_printable(next) {
                        return Err(KeyError::NotPrintableAscii { at: offset + i + 1 });
                    }
                    return Err(KeyError::BadEscape { at: offset + i });
                }
                key.push(next as char);
                i += 2;
            }
            b'"' => {
                if i + 1 < input.len() {
                    return Err(KeyError::TrailingCharacters { at: offset + i + 1 });
                }
                return Ok(key);
            }
            _ if !is_printable(b) => return Err(KeyError::NotPrintableAscii { at: offset + i }),
            _ => {
                key.push(b as char);
                i += 1;
            }
        }
    }
    Err(KeyError::Unterminated)
}

/// A key sent without quotes: visible ASCII, no space, no double quote.
fn bare_token(input: &[u8], offset: usize) -> Result<String, KeyError> {
    for (i, &b) in input.iter().enumerate() {
        if !is_printable(b) {
            return Err(KeyError::NotPrintableAscii { at: offset + i });
        }
        if b == b' ' || b == b'"' {
            return Err(KeyError::NotAToken { at: offset + i });
        }
    }
    // Every byte is ASCII, so this cannot fail.
    Ok(String::from_utf8_lossy(input).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(bytes: &[u8]) -> HeaderValue {
        HeaderValue::from_bytes(bytes).expect("a header value http accepts")
    }

    fn key(bytes: &[u8]) -> Result<Option<String>, KeyError> {
        parse(Some(&value(bytes)), 512)
    }

    fn ok(bytes: &[u8]) -> String {
        key(bytes).expect("a valid key").expect("a present header")
    }

    #[test]
    fn absent_header_is_none() {
        assert_eq!(parse(None, 512), Ok(None));
        assert_eq!(parse_headers(&HeaderMap::new(), 512), Ok(None));
    }

    #[test]
    fn sf_string_gives_the_characters_between_the_quotes() {
        assert_eq!(
            ok(b"\"8e03978e-40d5-43e8-bc93-6894a57f9324\""),
            "8e03978e-40d5-43e8-bc93-6894a57f9324"
        );
        // Spaces and every printable character are allowed inside the quotes.
        assert_eq!(ok(b"\"a b,c;d=e\""), "a b,c;d=e");
        assert_eq!(ok(b"\" x \""), " x ");
    }

    #[test]
    fn sf_string_escapes_are_undone() {
        assert_eq!(ok(br#""a\"b""#), "a\"b");
        assert_eq!(ok(br#""a\\b""#), "a\\b");
        assert_eq!(ok(br#""\\\"""#), "\\\"");
    }

    #[test]
    fn quoted_and_bare_forms_of_one_key_are_the_same_key() {
        assert_eq!(ok(b"\"abc-123\""), ok(b"abc-123"));
    }

    #[test]
    fn bare_token_is_taken_as_sent() {
        assert_eq!(
            ok(b"abc-123_XYZ.~!#$%&'()*+,/:;<=>?@[\\]^`{|}"),
            "abc-123_XYZ.~!#$%&'()*+,/:;<=>?@[\\]^`{|}"
        );
    }

    #[test]
    fn surrounding_whitespace_is_not_part_of_the_key() {
        assert_eq!(ok(b"  abc\t"), "abc");
        assert_eq!(ok(b" \"abc\" "), "abc");
    }

    #[test]
    fn unterminated_sf_string_is_refused() {
        assert_eq!(key(b"\"abc"), Err(KeyError::Unterminated));
        assert_eq!(key(b"\""), Err(KeyError::Unterminated));
        // An escaped closing quote does not close.
        assert_eq!(key(br#""abc\""#), Err(KeyError::Unterminated));
        // A backslash as the last byte escapes nothing.
        assert_eq!(key(br#""abc\"#), Err(KeyError::Unterminated));
    }

    #[test]
    fn escapes_other_than_quote_and_backslash_are_refused() {
        assert_eq!(key(br#""a\nb""#), Err(KeyError::BadEscape { at: 2 }));
        assert_eq!(key(br#""\u0041""#), Err(KeyError::BadEscape { at: 1 }));
        assert_eq!(key(br#""a\ b""#), Err(KeyError::BadEscape { at: 2 }));
    }

    #[test]
    fn characters_after_the_closing_quote_are_refused() {
        assert_eq!(
            key(b"\"abc\"x"),
            Err(KeyError::TrailingCharacters { at: 5 })
        );
        // RFC 8941 parameters: the draft defines none, so they are not silently dropped.
        assert_eq!(
            key(b"\"abc\";p=1"),
            Err(KeyError::TrailingCharacters { at: 5 })
        );
        // Two keys folded into one line by a proxy.
        assert_eq!(
            key(b"\"a\", \"b\""),
            Err(KeyError::TrailingCharacters { at: 3 })
        );
        assert_eq!(
            key(b"\"a\" \"b\""),
            Err(KeyError::TrailingCharacters { at: 3 })
        );
    }

    #[test]
    fn empty_keys_are_refused() {
        assert_eq!(key(b""), Err(KeyError::Empty));
        assert_eq!(key(b"\"\""), Err(KeyError::Empty));
        assert_eq!(key(b"   "), Err(KeyError::Empty));
        assert_eq!(key(b" \"\" "), Err(KeyError::Empty));
    }

    #[test]
    fn non_ascii_is_refused_in_both_forms() {
        // "é" in UTF-8, which http keeps as opaque bytes.
        assert_eq!(
            key("caf\u{e9}".as_bytes()),
            Err(KeyError::NotPrintableAscii { at: 3 })
        );
        assert_eq!(
            key("\"caf\u{e9}\"".as_bytes()),
            Err(KeyError::NotPrintableAscii { at: 4 })
        );
        assert_eq!(key(b"\xff"), Err(KeyError::NotPrintableAscii { at: 0 }));
    }

    #[test]
    fn control_characters_are_refused_in_both_forms() {
        // A tab inside is a control character (http lets HTAB into header values).
        assert_eq!(key(b"a\tb"), Err(KeyError::NotPrintableAscii { at: 1 }));
        assert_eq!(key(b"\"a\tb\""), Err(KeyError::NotPrintableAscii { at: 2 }));
        // A backslash before a control character: the character is what is wrong.
        assert_eq!(
            key(b"\"a\\\tb\""),
            Err(KeyError::NotPrintableAscii { at: 3 })
        );
    }

    #[test]
    fn bare_keys_cannot_hold_spaces_or_quotes() {
        assert_eq!(key(b"a b"), Err(KeyError::NotAToken { at: 1 }));
        assert_eq!(key(b"ab\"c"), Err(KeyError::NotAToken { at: 2 }));
        // Two bare keys folded by a proxy into "a, b".
        assert_eq!(key(b"a, b"), Err(KeyError::NotAToken { at: 2 }));
    }

    #[test]
    fn length_is_counted_on_the_key_not_the_header() {
        let max = 8;
        let exact = parse(Some(&value(b"12345678")), max);
        assert_eq!(exact, Ok(Some("12345678".to_string())));
        assert_eq!(
            parse(Some(&value(b"123456789")), max),
            Err(KeyError::TooLong { len: 9, max })
        );
        // Quotes and escapes do not count: 8 key bytes in 12 header bytes.
        assert_eq!(
            parse(Some(&value(br#""1234\"\\78""#)), max),
            Ok(Some("1234\"\\78".to_string()))
        );
        assert_eq!(
            parse(Some(&value(br#""1234\"\\789""#)), max),
            Err(KeyError::TooLong { len: 9, max })
        );
    }

    #[test]
    fn several_headers_are_refused() {
        let mut headers = HeaderMap::new();
        headers.append(HEADER, value(b"a"));
        assert_eq!(parse_headers(&headers, 512), Ok(Some("a".to_string())));
        headers.append(HEADER, value(b"a"));
        assert_eq!(
            parse_headers(&headers, 512),
            Err(KeyError::Several { count: 2 })
        );
        headers.append(HEADER, value(b"\"b\""));
        assert_eq!(
            parse_headers(&headers, 512),
            Err(KeyError::Several { count: 3 })
        );
    }

    #[test]
    fn parse_headers_reads_the_header_whatever_its_case() {
        let mut headers = HeaderMap::new();
        headers.insert(
            http::HeaderName::from_bytes(b"Idempotency-Key").unwrap(),
            value(b"\"k\""),
        );
        assert_eq!(parse_headers(&headers, 512), Ok(Some("k".to_string())));
        headers.insert("other", value(b"x"));
        assert_eq!(parse_headers(&headers, 512), Ok(Some("k".to_string())));
    }

    #[test]
    fn parse_headers_passes_on_the_value_errors() {
        let mut headers = HeaderMap::new();
        headers.insert(HEADER, value(b"\"open"));
        assert_eq!(parse_headers(&headers, 512), Err(KeyError::Unterminated));
    }

    #[test]
    fn every_error_has_a_detail_and_a_hint() {
        let errors = [
            KeyError::Empty,
            KeyError::NotPrintableAscii { at: 3 },
            KeyError::NotAToken { at: 1 },
            KeyError::Unterminated,
            KeyError::BadEscape { at: 2 },
            KeyError::TrailingCharacters { at: 5 },
            KeyError::TooLong { len: 600, max: 512 },
            KeyError::Several { count: 2 },
        ];
        for error in &errors {
            assert!(error.detail().contains("Idempotency-Key"), "{error:?}");
            assert!(!error.hint().is_empty(), "{error:?}");
            assert_eq!(error.to_string(), error.detail());
        }
        assert!(KeyError::TooLong { len: 600, max: 512 }
            .detail()
            .contains("600"));
        assert!(KeyError::TooLong { len: 600, max: 512 }
            .hint()
            .contains("512"));
        assert!(KeyError::Several { count: 3 }.detail().contains('3'));
        assert!(KeyError::BadEscape { at: 7 }.detail().contains('7'));
    }
}
