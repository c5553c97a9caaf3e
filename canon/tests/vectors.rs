//! RFC 8785's vectors and number lines, through the text path and the value path.

mod common;
mod gen;
use common::*;

#[test]
fn every_vector_through_the_text_path() {
    for name in VECTORS {
        let input = data(&format!("input/{name}.json"));
        assert_eq!(
            pg_idempotency_canon::canonical_text(&input).unwrap(),
            expected_lossless(name),
            "{name}"
        );
    }
}

#[test]
fn every_vector_through_the_value_path() {
    for name in VECTORS {
        let value: serde_json::Value =
            serde_json::from_str(&data(&format!("input/{name}.json"))).unwrap();
        // A Value holds 333333333.33333329 as its nearest double, so for values.json the
        // value path gives plain JCS; the text path keeps the digits (above).
        let expected = data(&format!("output/{name}.json"));
        assert_eq!(
            pg_idempotency_canon::canonical_value(&value).unwrap(),
            expected,
            "{name}"
        );
    }
}

#[test]
fn every_number_line_through_the_value_path() {
    for (d, expected) in number_lines() {
        let v = serde_json::Value::from(d);
        assert_eq!(
            pg_idempotency_canon::canonical_value(&v).unwrap(),
            expected,
            "bits {:016x}",
            d.to_bits()
        );
    }
}

#[test]
fn every_number_line_in_every_spelling_through_the_text_path() {
    for (d, expected) in number_lines() {
        for spelling in spellings(&expected) {
            assert_eq!(
                pg_idempotency_canon::canonical_text(&spelling).unwrap(),
                expected,
                "bits {:016x} as {spelling}",
                d.to_bits()
            );
        }
    }
}

#[test]
fn hashes_and_keys() {
    let fp = pg_idempotency_canon::hash_text(r#"{"b": 1, "a": [1.0, "x"]}"#).unwrap();
    assert_eq!(fp, pg_idempotency_canon::sha256(r#"{"a":[1,"x"],"b":1}"#));
    assert_eq!(pg_idempotency_canon::key_of(&fp).len(), 64);
    let v: serde_json::Value = serde_json::json!({"a": [1, "x"], "b": 1});
    assert_eq!(pg_idempotency_canon::hash_value(&v).unwrap(), fp);
}
