//! The SQLSTATEs of the protocol (protocol/src/errors.rs), raised by both backends for the
//! same cases: each code has a case here that makes the extension and the PL/pgSQL
//! variant raise exactly it.

use pg_idempotency_protocol::ErrorCode;
use pg_idempotency_tests::backends::Both;
use pg_idempotency_tests::{scope, Backend};

/// Statements that end with the error of `code` (the ones before it set the case up); None
/// for a code no single session can cause on purpose.
fn case(code: ErrorCode, backend: Backend, sc: &str) -> Option<Vec<String>> {
    let q = |s: &str| s.replace("$sc", sc);
    Some(match code {
        ErrorCode::InvalidArgument => vec![q("SELECT idem_begin('$sc', ' ')")],
        ErrorCode::Mismatch => vec![
            q("SELECT idem_begin('$sc', 'k', '{\"a\": 1}')"),
            q("SELECT idem_begin('$sc', 'k', '{\"a\": 2}')"),
        ],
        ErrorCode::RepeatRefused => vec![
            q("SELECT idem_complete('$sc', 'k', (idem_begin('$sc', 'k')).fence, '{}')"),
            q("SELECT idem_begin('$sc', 'k', on_cache_hit => 'fail_fast')"),
        ],
        ErrorCode::LeaseLost => vec![
            q("SELECT idem_begin('$sc', 'k')"),
            q("SELECT idem_complete('$sc', 'k', -1, '{}')"),
        ],
        ErrorCode::ResponseTooLarge => {
            // The limit is a setting in the extension and a row in the PL/pgSQL variant's
            // settings table; this session only, either way (the table's change is undone
            // with the test's transaction).
            let lower = match backend {
                Backend::Extension => "SET LOCAL pg_idempotency.max_response_bytes = 16",
                Backend::Portable => "UPDATE idempotency.settings SET max_response_bytes = 16",
            };
            vec![
                lower.to_string(),
                q("SELECT idem_complete('$sc', 'k', (idem_begin('$sc', 'k')).fence, to_jsonb(repeat('x', 64)))"),
            ]
        }
        ErrorCode::Uncanonicalizable => vec![format!(
            "SELECT idem_begin('{sc}', 'k', '{}{}'::jsonb)",
            "[".repeat(200),
            "]".repeat(200)
        )],
        // Raised only when other sessions keep winning every race for a record, a thousand
        // times over: not a case one session can stage.
        ErrorCode::Contention => return None,
        // A tenant's own role (undone with the test's transaction), as docs/security.md
        // grants it: never the grant role itself.
        ErrorCode::NotPermitted => vec![
            q("CREATE ROLE \"$sc\" NOLOGIN IN ROLE idempotency_user"),
            q("SET LOCAL ROLE \"$sc\""),
            q("SELECT idem_lookup('$sc', 'k', 'postgres')"),
        ],
        ErrorCode::GrantRoleCaller => vec![
            "SET LOCAL ROLE idempotency_user".to_string(),
            q("SELECT idem_begin('$sc', 'k')"),
        ],
    })
}

#[test]
fn both_backends_raise_each_protocol_sqlstate_for_the_same_case() {
    let mut both = Both::new("sqlstates");
    let mut staged = 0;
    for code in ErrorCode::ALL {
        let mut got: Vec<(Backend, String)> = Vec::new();
        for (backend, c) in both.sessions.iter_mut() {
            let sc = scope("sqlstates");
            let mut tx = c.transaction().unwrap();
            let Some(statements) = case(code, *backend, &sc) else {
                continue;
            };
            let (last, setup) = statements.split_last().unwrap();
            for s in setup {
                tx.batch_execute(s)
                    .unwrap_or_else(|e| panic!("{backend:?} {code:?}: setting up with {s}: {e}"));
            }
            let err = tx
                .batch_execute(last)
                .expect_err(&format!("{backend:?} {code:?}: {last} succeeded"));
            let db = err.as_db_error().expect("an error of the server");
            assert!(
                !db.message().is_empty() && db.detail().is_some() && db.hint().is_some(),
                "{backend:?} {code:?}: message, detail and hint: {db:?}"
            );
            got.push((*backend, db.code().code().to_string()));
        }
        if got.is_empty() {
            continue;
        }
        staged += 1;
        for (backend, sqlstate) in &got {
            assert_eq!(
                sqlstate,
                code.sqlstate(),
                "{backend:?} raised {sqlstate} for {code:?}"
            );
        }
    }
    assert_eq!(
        staged,
        ErrorCode::ALL.len() - 1,
        "every code but Contention is staged"
    );
}

/// Every SQLSTATE the PL/pgSQL variant's source raises through `_idem_fail` is a protocol
/// code, or one of PostgreSQL's own for the few states that are not about a call.
#[test]
fn the_plpgsql_variant_raises_only_protocol_sqlstates() {
    let source =
        std::fs::read_to_string(pg_idempotency_tests::sql_file("pg_idempotency.sql")).unwrap();
    // 55000: the variant's own limits row is missing (object_not_in_prerequisite_state).
    let own = ["55000"];
    let mut seen = Vec::new();
    for (i, _) in source.match_indices("_idem_fail('") {
        let code = &source[i + "_idem_fail('".len()..][..5];
        assert!(
            ErrorCode::from_sqlstate(code).is_some() || own.contains(&code),
            "sql/pg_idempotency.sql raises {code}, which is not in the protocol"
        );
        seen.push(code.to_string());
    }
    assert!(seen.len() > 10, "found the _idem_fail calls: {seen:?}");
}
