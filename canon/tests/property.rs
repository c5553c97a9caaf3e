//! Generated documents: every spelling of a document has one canonical form; the text path
//! and the value path agree wherever a Value can hold the document; distinct numbers never
//! share a form.

mod gen;

use gen::*;
use proptest::prelude::*;

proptest! {
    #[test]
    fn every_spelling_has_one_canonical_form(doc in doc(), a in any::<u32>(), b in any::<u32>()) {
        let one = pg_idempotency_canon::canonical_text(&text(&doc, a)).unwrap();
        let two = pg_idempotency_canon::canonical_text(&text(&doc, b)).unwrap();
        prop_assert_eq!(&one, &two);
        // The canonical form is its own canonical form.
        prop_assert_eq!(pg_idempotency_canon::canonical_text(&one).unwrap(), one.clone());
    }

    #[test]
    fn distinct_numbers_never_collide(x in num(), y in num(), sx in any::<u32>(), sy in any::<u32>()) {
        let cx = pg_idempotency_canon::canonical_text(&spell(&x, sx)).unwrap();
        let cy = pg_idempotency_canon::canonical_text(&spell(&y, sy)).unwrap();
        prop_assert_eq!(cx == cy, x == y, "{:?} {:?} -> {} {}", x, y, cx, cy);
    }

    #[test]
    fn nearby_numbers_never_collide(digits in "[1-9][0-9]{15,30}", point in -30i64..30) {
        // Numbers one unit in the last place apart, which plain JCS rounds to one double.
        let a = format!("0.{digits}1e{point}");
        let b = format!("0.{digits}2e{point}");
        prop_assert_ne!(pg_idempotency_canon::canonical_text(&a).unwrap(), pg_idempotency_canon::canonical_text(&b).unwrap());
    }

    #[test]
    fn text_and_value_paths_agree_where_a_value_holds_the_document(doc in doc(), style in any::<u32>()) {
        // What a client holds: the document with every number as a double (or an integer);
        // serde_json refuses numbers beyond a double's range, so they are brought within.
        let doc = within_doubles(&doc);
        let value = to_value(&doc);
        let from_value = pg_idempotency_canon::canonical_value(&value).unwrap();
        // What SQL sees: the JSON the client sends.
        let sent = serde_json::to_string(&value).unwrap();
        prop_assert_eq!(pg_idempotency_canon::canonical_text(&sent).unwrap(), from_value.clone());
        // And the document written any other way, once its numbers are what a Value holds.
        let held = text(&from_doubles(&doc), style);
        prop_assert_eq!(pg_idempotency_canon::canonical_text(&held).unwrap(), from_value);
    }
}

#[test]
fn keys_sort_by_utf16_code_units() {
    // U+10000 is a surrogate pair (D800 DC00) in UTF-16, so it sorts before U+E000,
    // although its code point is larger.
    let out = pg_idempotency_canon::canonical_text("{\"\u{e000}\": 1, \"\u{10000}\": 2, \"a\": 3}")
        .unwrap();
    assert_eq!(out, "{\"a\":3,\"\u{10000}\":2,\"\u{e000}\":1}");
}
