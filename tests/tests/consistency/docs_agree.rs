//! The pages that list the protocol's facts (docs/errors.md's SQLSTATEs, docs/settings.md's
//! settings) list every one of them as protocol/ declares it.

use pg_idempotency_protocol::settings::INT_SETTINGS;
use pg_idempotency_protocol::ErrorCode;
use pg_idempotency_tests::root;

fn page(name: &str) -> String {
    std::fs::read_to_string(root().join("docs").join(name)).unwrap()
}

/// The table row of the page that starts with `first` in its first column.
fn row<'a>(text: &'a str, first: &str) -> Option<&'a str> {
    let start = format!("| `{first}` |");
    text.lines().find(|l| l.starts_with(&start))
}

#[test]
fn errors_md_has_a_row_for_each_sqlstate() {
    let text = page("errors.md");
    for code in ErrorCode::ALL {
        assert!(
            row(&text, code.sqlstate()).is_some(),
            "docs/errors.md has no row for {} ({code:?})",
            code.sqlstate()
        );
    }
}

#[test]
fn settings_md_has_each_setting_with_its_default() {
    let text = page("settings.md");
    for s in INT_SETTINGS {
        let r = row(&text, s.name).unwrap_or_else(|| panic!("docs/settings.md lacks {}", s.name));
        let default = r.split('|').nth(2).unwrap_or_default();
        assert!(
            default.contains(&s.default.to_string()),
            "docs/settings.md gives {} the default {default:?}, protocol {}",
            s.name,
            s.default
        );
    }
    assert!(row(&text, pg_idempotency_protocol::settings::DATABASE_NAME).is_some());
}
