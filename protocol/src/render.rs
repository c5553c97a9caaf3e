//! The extension's `CREATE FUNCTION` text, rendered from [`crate::functions::FUNCTIONS`].
//!
//! The output is pg_idempotency/sql/functions.sql: written by scripts/render-sql.sh and
//! held equal to this rendering by tests/tests/signatures.rs.

use std::fmt::Write;

use crate::functions::{Arg, Function, Grant, Language, Returns, Schema, Volatility, FUNCTIONS};

/// The first lines of the rendered file.
pub const HEADER: &str = "\
-- pg_idempotency: the SQL API's functions and who may call them.
--
-- Generated from protocol/src/functions.rs by scripts/render-sql.sh: edit the declaration
-- there, not this file (tests/tests/signatures.rs fails when the two differ). The bodies
-- of the SQL functions are in sql/bodies/.
";

fn schema(f: &Function) -> &'static str {
    match f.schema {
        Schema::Api => "@extschema@",
        Schema::Storage => "idempotency",
    }
}

fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// `schema.name(types)`, as COMMENT, GRANT and DROP name a function.
pub fn signature(f: &Function) -> String {
    format!("{}.{}({})", schema(f), f.name, f.identity_args())
}

fn columns(out: &mut String, mode: &str, args: &[Arg], last: bool) {
    let width = args.iter().map(|a| a.name.len()).max().unwrap_or(0);
    for (i, a) in args.iter().enumerate() {
        let _ = write!(out, "    {mode}{:<width$} {}", a.name, a.ty.sql());
        if let Some(d) = a.default {
            let _ = write!(out, " DEFAULT {d}");
        }
        out.push_str(if last && i + 1 == args.len() {
            ")"
        } else {
            ",\n"
        });
    }
}

fn arguments(out: &mut String, f: &Function) {
    match f.returns {
        Returns::InOut(outs) => {
            out.push_str("(\n");
            columns(out, "INOUT ", f.args, false);
            columns(out, "OUT   ", outs, true);
        }
        _ if f.args.is_empty() => out.push_str("()"),
        _ => {
            out.push_str("(\n");
            columns(out, "", f.args, true);
        }
    }
    out.push('\n');
}

fn returns(out: &mut String, f: &Function) {
    match f.returns {
        Returns::Void => out.push_str("RETURNS void\n"),
        Returns::Scalar(t) => {
            let _ = writeln!(out, "RETURNS {}", t.sql());
        }
        Returns::Row(t) => {
            let _ = writeln!(out, "RETURNS {t}");
        }
        Returns::SetOf(t, _) => {
            let _ = writeln!(out, "RETURNS SETOF {t}");
        }
        Returns::InOut(_) => out.push_str("RETURNS record\n"),
        Returns::Table(cols) => {
            out.push_str("RETURNS TABLE (\n");
            columns(out, "", cols, true);
            out.push('\n');
        }
    }
}

fn attributes(out: &mut String, f: &Function) {
    let mut words = vec![match f.volatility {
        Volatility::Immutable => "IMMUTABLE",
        Volatility::Stable => "STABLE",
        Volatility::Volatile => "VOLATILE",
    }];
    words.push(if f.strict {
        "STRICT"
    } else {
        "CALLED ON NULL INPUT"
    });
    words.push(if f.parallel_safe {
        "PARALLEL SAFE"
    } else {
        "PARALLEL UNSAFE"
    });
    if f.security_definer {
        words.push("SECURITY DEFINER");
    }
    // A SQL body resolves names when it runs: pin the path it resolves them through.
    if f.language == Language::Sql {
        words.push("SET search_path = pg_catalog, pg_temp");
    }
    let rows = match f.returns {
        Returns::SetOf(_, rows) => format!(" ROWS {rows}"),
        _ => String::new(),
    };
    let _ = writeln!(out, "{}{rows}", words.join(" "));
}

/// One function's `CREATE FUNCTION` and `COMMENT ON FUNCTION`; `body` gives a SQL
/// function's body.
pub fn create_function(f: &Function, body: &dyn Fn(&Function) -> String) -> String {
    let mut out = String::new();
    if let Some(note) = f.note {
        let _ = writeln!(out, "-- {note}");
    }
    let _ = write!(out, "CREATE FUNCTION {}.{}", schema(f), f.name);
    arguments(&mut out, f);
    returns(&mut out, f);
    attributes(&mut out, f);
    match f.language {
        Language::C(symbol) => {
            let _ = writeln!(out, "LANGUAGE c AS 'MODULE_PATHNAME', {};", quoted(symbol));
        }
        Language::Sql => {
            let text = body(f);
            let _ = writeln!(out, "LANGUAGE sql AS $fn$\n{}\n$fn$;", text.trim_end());
        }
    }
    if let Some(comment) = f.comment {
        let _ = writeln!(
            out,
            "COMMENT ON FUNCTION {} IS\n    {};",
            signature(f),
            quoted(comment)
        );
    }
    out
}

fn privilege_list(functions: &[&Function]) -> String {
    functions
        .iter()
        .map(|f| format!("    {}", signature(f)))
        .collect::<Vec<_>>()
        .join(",\n")
}

/// Execute is granted deliberately, never to PUBLIC.
pub fn grants() -> String {
    let all: Vec<&Function> = FUNCTIONS.iter().collect();
    let to = |grant: Grant| -> Vec<&Function> {
        FUNCTIONS.iter().filter(|f| f.grant == grant).collect()
    };
    format!(
        "-- Execute is granted deliberately, never to PUBLIC.\n\
         REVOKE EXECUTE ON FUNCTION\n{}\nFROM PUBLIC;\n\
         GRANT EXECUTE ON FUNCTION\n{}\nTO idempotency_user;\n\
         GRANT EXECUTE ON FUNCTION\n{}\nTO idempotency_admin;\n",
        privilege_list(&all),
        privilege_list(&to(Grant::User)),
        privilege_list(&to(Grant::Admin)),
    )
}

/// The whole file: every function in install order, then the privileges.
pub fn functions_sql(body: &dyn Fn(&Function) -> String) -> String {
    let mut out = String::from(HEADER);
    for f in FUNCTIONS {
        out.push('\n');
        out.push_str(&create_function(f, body));
    }
    out.push('\n');
    out.push_str(&grants());
    out
}

/// The extension's functions.sql, with the SQL bodies read from `<root>/pg_idempotency/
/// sql/bodies/` (`root`: the repository).
pub fn extension_functions_sql(root: &std::path::Path) -> std::io::Result<String> {
    let bodies = root.join("pg_idempotency/sql/bodies");
    let mut read = std::collections::HashMap::new();
    for f in FUNCTIONS.iter().filter(|f| f.language == Language::Sql) {
        let path = bodies.join(format!("{}.sql", f.name));
        let body = std::fs::read_to_string(&path)
            .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        read.insert(f.name, body);
    }
    Ok(functions_sql(&|f| read[f.name].clone()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::functions::IDEM_BEGIN;

    #[test]
    fn a_c_function_names_its_symbol_and_comment_signature() {
        let text = create_function(&IDEM_BEGIN, &|_| unreachable!());
        assert!(text.contains("CREATE FUNCTION @extschema@.idem_begin(\n    scope        text,\n"));
        assert!(text
            .contains("    claim_token  uuid DEFAULT NULL)\nRETURNS idempotency.begin_result\n"));
        assert!(text.contains("LANGUAGE c AS 'MODULE_PATHNAME', 'idem_begin';"));
        assert!(text.contains(
            "COMMENT ON FUNCTION @extschema@.idem_begin(text, text, jsonb, interval, interval, text, text, interval, uuid) IS"
        ));
    }

    #[test]
    fn quotes_in_comments_are_doubled() {
        assert_eq!(quoted("the caller's"), "'the caller''s'");
    }
}
