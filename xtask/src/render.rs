//! The `CREATE FUNCTION` text of both backends, rendered from
//! [`pg_idempotency_protocol::functions::FUNCTIONS`]: here the extension's pg_idempotency/sql/functions.sql
//! and what both share, in [`portable`] the PL/pgSQL variant's sql/pg_idempotency.sql.
//! cargo xtask render-sql writes both; tests/tests/consistency/signatures.rs holds them
//! equal to this rendering.

pub mod migration;
pub mod plain;
pub mod portable;
pub mod proxy;
pub mod psql_lex;

use std::fmt::Write;
use std::path::Path;

use pg_idempotency_protocol::functions::{
    Arg, Function, Grant, Language, Returns, Schema, Volatility, FUNCTIONS,
};

/// The first lines of the rendered file.
pub const HEADER: &str = "\
-- pg_idempotency: the SQL API's functions and who may call them.
--
-- Generated from protocol/src/functions.rs by cargo xtask render-sql: edit the declaration
-- there, not this file (tests/tests/consistency/signatures.rs fails when the two
-- differ). The bodies of the SQL functions are in sql/bodies/.
";

/// How a rendering names the two schemas: the API's and the storage schema.
#[derive(Debug, Clone, Copy)]
pub struct Schemas {
    pub api: &'static str,
    pub storage: &'static str,
}

/// The extension's script: its schema is the one `CREATE EXTENSION` picks.
pub const EXTENSION: Schemas = Schemas {
    api: "@extschema@",
    storage: "idempotency",
};

fn schema(f: &Function, names: Schemas) -> &'static str {
    match f.schema {
        Schema::Api => names.api,
        Schema::Storage => names.storage,
    }
}

fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// `schema.name(types)`, as COMMENT, GRANT and DROP name a function.
pub fn signature(f: &Function, names: Schemas) -> String {
    format!("{}.{}({})", schema(f, names), f.name, f.identity_args())
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

fn returns(out: &mut String, f: &Function, names: Schemas) {
    let storage = names.storage;
    match f.returns {
        Returns::Void => out.push_str("RETURNS void\n"),
        Returns::Scalar(t) => {
            let _ = writeln!(out, "RETURNS {}", t.sql());
        }
        Returns::Row(t) => {
            let _ = writeln!(out, "RETURNS {storage}.{t}");
        }
        Returns::SetOf(t, _) => {
            let _ = writeln!(out, "RETURNS SETOF {storage}.{t}");
        }
        Returns::InOut(_) => out.push_str("RETURNS record\n"),
        Returns::Table(cols) => {
            out.push_str("RETURNS TABLE (\n");
            columns(out, "", cols, true);
            out.push('\n');
        }
    }
}

/// Volatility, strictness, parallel safety and, for a definer, SECURITY DEFINER.
fn behaviour(f: &Function, definer: bool) -> Vec<&'static str> {
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
    if definer {
        words.push("SECURITY DEFINER");
    }
    words
}

/// ` ROWS n` for a set-returning function.
fn rows(f: &Function) -> String {
    match f.returns {
        Returns::SetOf(_, rows) => format!(" ROWS {rows}"),
        _ => String::new(),
    }
}

fn attributes(out: &mut String, f: &Function) {
    let mut words = behaviour(f, f.security_definer);
    // A SQL body resolves names when it runs: pin the path it resolves them through.
    if f.language == Language::Sql {
        words.push("SET search_path = pg_catalog, pg_temp");
    }
    let _ = writeln!(out, "{}{}", words.join(" "), rows(f));
}

/// `COMMENT ON FUNCTION`, when the declaration has a comment.
fn comment(out: &mut String, f: &Function, names: Schemas) {
    if let Some(comment) = f.comment {
        let _ = writeln!(
            out,
            "COMMENT ON FUNCTION {} IS\n    {};",
            signature(f, names),
            quoted(comment)
        );
    }
}

/// One function's `CREATE FUNCTION` and `COMMENT ON FUNCTION`; `body` gives a SQL
/// function's body.
pub fn create_function(f: &Function, body: &dyn Fn(&Function) -> String) -> String {
    let mut out = String::new();
    if let Some(note) = f.note {
        let _ = writeln!(out, "-- {note}");
    }
    let _ = write!(out, "CREATE FUNCTION {}.{}", schema(f, EXTENSION), f.name);
    arguments(&mut out, f);
    returns(&mut out, f, EXTENSION);
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
    comment(&mut out, f, EXTENSION);
    out
}

fn privilege_list(functions: &[&Function], names: Schemas) -> String {
    functions
        .iter()
        .map(|f| format!("    {}", signature(f, names)))
        .collect::<Vec<_>>()
        .join(",\n")
}

/// EXECUTE on `functions` revoked from PUBLIC, then granted to the role each declares.
fn privileges(functions: &[&Function], names: Schemas) -> String {
    let to = |grant: Grant| -> Vec<&Function> {
        functions
            .iter()
            .copied()
            .filter(|f| f.grant == grant)
            .collect()
    };
    format!(
        "REVOKE EXECUTE ON FUNCTION\n{}\nFROM PUBLIC;\n\
         GRANT EXECUTE ON FUNCTION\n{}\nTO idempotency_user;\n\
         GRANT EXECUTE ON FUNCTION\n{}\nTO idempotency_admin;\n",
        privilege_list(functions, names),
        privilege_list(&to(Grant::User), names),
        privilege_list(&to(Grant::Admin), names),
    )
}

/// Execute is granted deliberately, never to PUBLIC.
pub fn grants() -> String {
    let all: Vec<&Function> = FUNCTIONS.iter().collect();
    format!(
        "-- Execute is granted deliberately, never to PUBLIC.\n{}",
        privileges(&all, EXTENSION)
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
pub fn extension_functions_sql(root: &Path) -> std::io::Result<String> {
    let bodies = root.join("pg_idempotency/sql/bodies");
    let mut read = std::collections::HashMap::new();
    for f in FUNCTIONS.iter().filter(|f| f.language == Language::Sql) {
        read.insert(
            f.name,
            read_source(&bodies.join(format!("{}.sql", f.name)))?,
        );
    }
    Ok(functions_sql(&|f| read[f.name].clone()))
}

/// The blocks of a rendered file, each trimmed, a blank line between them.
fn joined(blocks: &[String]) -> String {
    let mut out = blocks
        .iter()
        .map(|b| b.trim_end())
        .collect::<Vec<_>>()
        .join("\n\n");
    out.push('\n');
    out
}

/// Refuses a .sql file in `dir` that is not in `known`: it would be left out unnoticed.
/// `why` says where the list is kept.
fn refuse_unrendered(
    dir: &Path,
    known: &std::collections::BTreeSet<String>,
    why: &str,
) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if name.ends_with(".sql") && !known.contains(&name) {
            return Err(std::io::Error::other(format!(
                "{}: not rendered ({why})",
                dir.join(name).display()
            )));
        }
    }
    Ok(())
}

/// A body file's leading comment lines (said above the function, for whoever reads the
/// rendered file) and the body itself (what PostgreSQL stores as the function's source).
fn split(source: &str) -> (String, &str) {
    let mut notes = String::new();
    let mut rest = source;
    while rest.starts_with("--") {
        let end = rest.find('\n').map_or(rest.len(), |i| i + 1);
        notes.push_str(&rest[..end]);
        rest = &rest[end..];
    }
    (notes, rest)
}

/// A source file, its path named in the error.
fn read_source(path: &Path) -> std::io::Result<String> {
    std::fs::read_to_string(path)
        .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pg_idempotency_protocol::functions::IDEM_BEGIN;

    #[test]
    fn a_c_function_names_its_symbol_and_comment_signature() {
        let text = create_function(&IDEM_BEGIN, &|_| unreachable!());
        assert!(
            text.contains("CREATE FUNCTION @extschema@.idem_begin(\n    scope          text,\n")
        );
        assert!(text.contains(
            "    unresolved_ttl interval DEFAULT NULL)\nRETURNS idempotency.begin_result\n"
        ));
        assert!(text.contains("LANGUAGE c AS 'MODULE_PATHNAME', 'idem_begin';"));
        assert!(text.contains(
            "COMMENT ON FUNCTION @extschema@.idem_begin(text, text, jsonb, interval, interval, text, text, interval, uuid, interval) IS"
        ));
    }

    #[test]
    fn quotes_in_comments_are_doubled() {
        assert_eq!(quoted("the caller's"), "'the caller''s'");
    }
}
