//! Canonical JSON in SQL: byte for byte what the canon crate computes, on the RFC 8785
//! vectors, every number line in several spellings, and generated documents.

use crate::common::*;
use crate::gen;
use pg_idempotency_tests::*;
use proptest::prelude::*;

fn sql_canonical(c: &mut Client, json: &str) -> Result<String, postgres::Error> {
    c.query_one("SELECT idem_canonical($1::text::jsonb)", &[&json])
        .map(|r| r.get(0))
}

#[test]
fn every_vector_through_sql() {
    let mut c = connect();
    for name in VECTORS {
        let input = data(&format!("input/{name}.json"));
        assert_eq!(
            sql_canonical(&mut c, &input).unwrap(),
            expected_lossless(name),
            "{name}"
        );
    }
}

#[test]
fn every_number_line_in_every_spelling_through_sql() {
    let mut c = connect();
    let mut inputs = Vec::new();
    let mut expected = Vec::new();
    for (_, es) in number_lines() {
        for spelling in spellings(&es) {
            inputs.push(spelling);
            expected.push(es.clone());
        }
    }
    let got: Vec<String> = c
        .query("SELECT idem_canonical(x::jsonb) FROM unnest($1::text[]) WITH ORDINALITY AS t(x, i) ORDER BY i", &[&inputs])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    for ((input, want), got) in inputs.iter().zip(&expected).zip(&got) {
        assert_eq!(got, want, "{input}");
    }
    assert_eq!(got.len(), inputs.len());
}

#[test]
fn a_key_computed_in_rust_is_the_key_sql_derives() {
    let mut c = connect();
    let scope = scope("hash-input");
    let request = serde_json::json!({"to": "ann@example.com", "amount": 12.5, "id": 9007199254740993u64, "tags": ["a", "é"]});
    let rust_fingerprint = pg_idempotency_canon::hash_value(&request).unwrap();
    let rust_key = pg_idempotency_canon::key_of(&rust_fingerprint);
    let sent = serde_json::to_string(&request).unwrap();
    let sql_hash: Vec<u8> = c
        .query_one("SELECT idem_hash($1::text::jsonb)", &[&sent])
        .unwrap()
        .get(0);
    assert_eq!(sql_hash, rust_fingerprint.to_vec());
    c.execute(
        "SELECT idem_begin($1, NULL, $2::text::jsonb)",
        &[&scope, &sent],
    )
    .unwrap();
    let found: i64 = c
        .query_one(
            "SELECT count(*) FROM idem_lookup($1, $2)",
            &[&scope, &rust_key],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        found, 1,
        "SQL stored the call under another key than {rust_key}"
    );
    let fingerprint: Vec<u8> = c
        .query_one(
            "SELECT fingerprint FROM idem_lookup($1, $2)",
            &[&scope, &rust_key],
        )
        .unwrap()
        .get(0);
    assert_eq!(fingerprint, rust_fingerprint.to_vec());
}

#[test]
fn what_sql_cannot_canonicalise_is_refused_with_its_sqlstate() {
    let mut c = connect();
    let deep = format!("{}{}", "[".repeat(129), "]".repeat(129));
    assert_eq!(
        sqlstate(&sql_canonical(&mut c, &deep).unwrap_err()),
        "IK005"
    );
    let e = c
        .query_one("SELECT idem_hash($1::text::jsonb)", &[&deep])
        .unwrap_err();
    assert_eq!(sqlstate(&e), "IK005");
    let e = c
        .query_one(
            "SELECT outcome FROM idem_begin('deep', NULL, $1::text::jsonb)",
            &[&deep],
        )
        .unwrap_err();
    assert_eq!(sqlstate(&e), "IK005");
    let ok = format!("{}{}", "[".repeat(128), "]".repeat(128));
    assert_eq!(sql_canonical(&mut c, &ok).unwrap(), ok);
    // jsonb itself refuses what it cannot hold, before any of our code runs.
    assert_eq!(
        sqlstate(&sql_canonical(&mut c, r#""\ud800""#).unwrap_err()),
        "22P02"
    );
    assert_eq!(
        sqlstate(&sql_canonical(&mut c, r#""\u0000""#).unwrap_err()),
        "22P05"
    );
    // Not an error under the lossless rule.
    assert_eq!(sql_canonical(&mut c, "1e400").unwrap(), "1e+400");
    assert_eq!(
        sql_canonical(&mut c, "[-0, 1.0, 0.1, 9007199254740993]").unwrap(),
        "[0,1,0.1,9007199254740993]"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn sql_agrees_with_the_text_path_on_generated_documents(doc in gen::doc(), style in any::<u32>()) {
        let text = gen::text(&doc, style);
        let rust = pg_idempotency_canon::canonical_text(&text).unwrap();
        thread_local! { static CLIENT: std::cell::RefCell<Client> = std::cell::RefCell::new(connect()); }
        let sql = CLIENT.with(|c| sql_canonical(&mut c.borrow_mut(), &text)).unwrap();
        prop_assert_eq!(sql, rust);
    }
}
