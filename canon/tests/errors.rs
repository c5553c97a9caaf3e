//! Input without a canonical form is an error, never a panic or a guess.

use canon::{canonical_text, canonical_value, CanonError, MAX_DEPTH};

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
