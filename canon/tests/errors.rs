//! Input without a canonical form is an error, never a panic or a guess.

use pg_idempotency_canon::{
    canonical_text, canonical_value, check_nul, check_value, CanonError, MAX_DEPTH,
};
use serde_json::{json, Value};

fn nested(depth: usize) -> String {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth))
}

#[test]
fn nesting_is_limited_to_128_levels() {
    assert_eq!(
        canonical_text(&nested(MAX_DEPTH)).unwrap(),
        nested(MAX_DEPTH)
    );
    assert_eq!(
        canonical_text(&nested(MAX_DEPTH + 1)),
        Err(CanonError::TooDeep)
    );
    let deep_object = format!(
        "{}1{}",
        r#"{"a":"#.repeat(MAX_DEPTH + 1),
        "}".repeat(MAX_DEPTH + 1)
    );
    assert_eq!(canonical_text(&deep_object), Err(CanonError::TooDeep));
    // Far deeper than any stack would take: refused before it is walked.
    assert_eq!(canonical_text(&nested(1_000_000)), Err(CanonError::TooDeep));
    let mut v = serde_json::json!(1);
    for _ in 0..MAX_DEPTH {
        v = serde_json::json!([v]);
    }
    assert!(canonical_value(&v).is_ok());
    assert_eq!(
        canonical_value(&serde_json::json!([v])),
        Err(CanonError::TooDeep)
    );
}

#[test]
fn lone_surrogates_and_nul_are_refused() {
    assert!(matches!(
        canonical_text(r#""\ud800""#),
        Err(CanonError::LoneSurrogate { .. })
    ));
    assert!(matches!(
        canonical_text(r#""\udc00\ud800""#),
        Err(CanonError::LoneSurrogate { .. })
    ));
    assert!(matches!(
        canonical_text(r#""\ud800\u0041""#),
        Err(CanonError::LoneSurrogate { .. })
    ));
    assert_eq!(
        canonical_text(r#""\ud83d\ude00""#).unwrap(),
        "\"\u{1F600}\""
    );
    assert_eq!(canonical_text(r#""a\u0000b""#), Err(CanonError::Nul));
    assert_eq!(canonical_text(r#"{"\u0000": 1}"#), Err(CanonError::Nul));
    assert_eq!(
        canonical_value(&serde_json::json!("a\u{0}b")),
        Err(CanonError::Nul)
    );
    assert_eq!(
        canonical_value(&serde_json::json!({"\u{0}": 1})),
        Err(CanonError::Nul)
    );
}

#[test]
fn huge_numbers_are_kept_not_refused() {
    assert_eq!(canonical_text("1e400").unwrap(), "1e+400");
    assert_eq!(canonical_text("-1E-400").unwrap(), "-1e-400");
    assert_eq!(canonical_text("[1e400, 1e401]").unwrap(), "[1e+400,1e+401]");
}

#[test]
fn syntax_errors_are_reported() {
    for bad in [
        "",
        "[1,]",
        "{\"a\" 1}",
        "01",
        "1.",
        "-",
        "tru",
        "\"abc",
        "[1] x",
        "\"\t\"",
        "{1: 2}",
        "\"\\x\"",
    ] {
        assert!(
            matches!(canonical_text(bad), Err(CanonError::Syntax { .. })),
            "{bad:?}"
        );
    }
}

/// A value nested `depth` arrays deep around `inner`.
fn wrapped(inner: Value, depth: usize) -> Value {
    (0..depth).fold(inner, |v, _| json!([v]))
}

#[test]
fn check_value_refuses_what_canonical_value_refuses() {
    let cases = [
        json!(null),
        json!("a\u{0}b"),
        json!({"\u{0}": 1}),
        json!({"a": [1, {"b": "\u{0}"}]}),
        json!([1, 2, {"c": true}]),
        json!({"a\u{1}": "\u{7f}"}),
        wrapped(json!(1), MAX_DEPTH),
        wrapped(json!(1), MAX_DEPTH + 1),
        wrapped(json!({}), MAX_DEPTH - 1),
        wrapped(json!({}), MAX_DEPTH),
        wrapped(json!("\u{0}"), 3),
    ];
    for v in cases {
        assert_eq!(
            check_value(&v),
            canonical_value(&v).map(|_| ()),
            "{}",
            serde_json::to_string(&v)
                .unwrap()
                .chars()
                .take(80)
                .collect::<String>()
        );
    }
}

#[test]
fn check_nul_refuses_u0000_at_any_depth_and_nothing_else() {
    assert_eq!(
        check_nul(&json!({"a": ["x", "\u{0}"]})),
        Err(CanonError::Nul)
    );
    assert_eq!(check_nul(&json!({"a\u{0}": null})), Err(CanonError::Nul));
    // Deeper than a canonical form may be, which a stored response may well be.
    let deep = wrapped(json!({"k": "v"}), 10 * MAX_DEPTH);
    assert_eq!(check_nul(&deep), Ok(()));
    assert_eq!(
        check_nul(&wrapped(json!(["\u{0}"]), 10 * MAX_DEPTH)),
        Err(CanonError::Nul)
    );
    assert_eq!(check_nul(&json!("\u{1}\u{fffd}")), Ok(()));
}
