//! A portable-variant psql script as plain SQL: what psql would send to the server, for
//! given schema names, with the psql commands the scripts use worked out here instead.
//! Migration tools (Alembic, node-pg-migrate, dbmate, sqlx, Flyway...) send SQL to the
//! server as it is, so they can apply this and not the script.
//!
//! Each command the scripts use has one translation; any other is refused, so a script that
//! starts using a new one fails here rather than producing something psql would not run:
//!
//! - `\set NAME VALUE`, `\if :{?NAME}` and `\if` on a known value: decided here (the schema
//!   names are given, as `-v schema= -v storage=` give them to psql; ON_ERROR_STOP is what a
//!   migration tool does anyway).
//! - `\ir FILE`: the file, inline.
//! - the own-transaction test (`SELECT ... AS _idem_own_transaction \gset`, then `\if
//!   :_idem_own_transaction` around `BEGIN;` or `COMMIT;`): false, so no BEGIN or COMMIT:
//!   the migration tool's transaction is the one.
//! - a guard (`SELECT ... \gset`, then `\if :VAR \else DO $$...$$; \endif`): one DO block
//!   that runs the same query and, unless VAR is true, the DO bodies of the `\else` branch.
//!
//! Variables are substituted as psql does (`:"v"` a quoted identifier, `:'v'` a quoted
//! literal) and only where psql does: never inside quotes, dollar-quoted bodies or
//! comments, which are kept byte for byte.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use super::psql_lex::{lex, Piece, VarRef};

/// `value` as psql's `:"name"` writes it (PQescapeIdentifier): always quoted.
pub fn psql_ident(value: &str) -> String {
    format!("\"{}\"", value.replace('"', "\"\""))
}

/// `value` as psql's `:'name'` writes it (PQescapeLiteral): an E'' literal when it holds a
/// backslash, with the leading space libpq writes.
pub fn psql_literal(value: &str) -> String {
    let body = value.replace('\'', "''");
    if value.contains('\\') {
        format!(" E'{}'", body.replace('\\', "\\\\"))
    } else {
        format!("'{body}'")
    }
}

/// A script's psql variables: set (`\set`, or given like `-v`), or set by a `\gset` query
/// whose result only the server knows.
#[derive(Debug, Clone)]
enum Value {
    Known(String),
    Runtime,
}

/// An open `\if`.
enum Cond {
    /// Decided here: whether the branch being read is taken, and whether one was.
    Known { active: bool, taken: bool },
    /// A guard on a `\gset` variable: its query, and the DO bodies of its `\else` branch.
    Guard {
        var: String,
        query: String,
        in_else: bool,
        bodies: Vec<String>,
    },
}

/// What the translation of one or more scripts produced.
#[derive(Default)]
pub struct Plain {
    /// The plain SQL.
    pub sql: String,
    /// The settings the scripts change with SET LOCAL: a migration gives them back at its
    /// end, since it shares its transaction with the migrations after it.
    pub set_local: BTreeSet<String>,
}

struct Interp<'a> {
    root: &'a Path,
    vars: HashMap<String, Value>,
    conds: Vec<Cond>,
    /// Comments and blank lines before the statement being read.
    lead: String,
    /// The statement being read, substituted.
    stmt: String,
    /// The last `\gset` query, while its variables are tested.
    gset: Option<String>,
    out: Plain,
}

fn is_comment(text: &str) -> bool {
    text.starts_with("--") || text.starts_with("/*")
}

fn truth(value: &str) -> Option<bool> {
    match value.to_ascii_lowercase().as_str() {
        "t" | "true" | "on" | "yes" | "1" => Some(true),
        "f" | "false" | "off" | "no" | "0" => Some(false),
        _ => None,
    }
}

impl<'a> Interp<'a> {
    fn active(&self) -> bool {
        self.conds.iter().all(|c| match c {
            Cond::Known { active, .. } => *active,
            Cond::Guard { .. } => true,
        })
    }

    fn file(&mut self, file: &str) -> Result<(), String> {
        let path = self.root.join(file);
        let text = std::fs::read_to_string(&path).map_err(|e| format!("{file}: {e}"))?;
        let dir = Path::new(file).parent().unwrap_or(Path::new(""));
        let pieces = lex(&text).map_err(|e| format!("{file}: {e}"))?;
        for piece in pieces {
            self.piece(piece, dir).map_err(|e| format!("{file}: {e}"))?;
        }
        Ok(())
    }

    fn flush_lead(&mut self) {
        let lead = std::mem::take(&mut self.lead);
        if !matches!(self.conds.last(), Some(Cond::Guard { .. })) {
            self.out.sql.push_str(&lead);
        }
    }

    fn var(&self, name: &str) -> Result<&str, String> {
        match self.vars.get(name) {
            Some(Value::Known(v)) => Ok(v),
            Some(Value::Runtime) => Err(format!(
                "psql variable {name} is set by a \\gset query: only \\if may test it"
            )),
            None => Err(format!("psql variable {name} is not set")),
        }
    }

    fn piece(&mut self, piece: Piece, dir: &Path) -> Result<(), String> {
        if let Piece::Meta { name, args, line } = piece {
            return self
                .meta(&name, &args, dir)
                .map_err(|e| format!("line {line}: \\{name} {args}: {e}"));
        }
        if !self.active() {
            return Ok(());
        }
        let text = match &piece {
            Piece::Code(t) | Piece::Verbatim(t) => t.clone(),
            Piece::End => ";".to_string(),
            Piece::Var(VarRef::Ident(n)) => psql_ident(self.var(n)?),
            Piece::Var(VarRef::Literal(n)) => psql_literal(self.var(n)?),
            Piece::Var(VarRef::Raw(n)) if self.vars.contains_key(n) => {
                return Err(format!(
                    ":{n} would be spliced into SQL as it is: the scripts quote their variables"
                ))
            }
            // Not a variable psql knows (an array slice such as a[1:2]): psql leaves it.
            Piece::Var(VarRef::Raw(n)) => format!(":{n}"),
            Piece::Var(VarRef::Defined(n)) => {
                return Err(format!(":{{?{n}}} is understood in \\if only"))
            }
            Piece::Meta { .. } => unreachable!(),
        };
        let mut text = text.as_str();
        if self.stmt.is_empty() {
            // Blank lines and comments before a statement are kept apart from it.
            match &piece {
                Piece::Code(_) => {
                    let start = text.len() - text.trim_start().len();
                    self.lead.push_str(&text[..start]);
                    text = &text[start..];
                    if text.is_empty() {
                        return Ok(());
                    }
                }
                Piece::Verbatim(t) if is_comment(t) => {
                    self.lead.push_str(text);
                    return Ok(());
                }
                _ => {}
            }
        }
        self.stmt.push_str(text);
        if piece == Piece::End {
            self.gset = None;
            let stmt = std::mem::take(&mut self.stmt);
            let lead = std::mem::take(&mut self.lead);
            if let Some(Cond::Guard {
                in_else, bodies, ..
            }) = self.conds.last_mut()
            {
                if !*in_else {
                    return Err(format!(
                        "a statement in a guard's \\if branch: {}",
                        stmt.trim()
                    ));
                }
                bodies.push(do_body(&stmt)?);
                return Ok(());
            }
            let words: Vec<String> = stmt
                .split_whitespace()
                .take(3)
                .map(|w| w.to_ascii_lowercase())
                .collect();
            if words.len() == 3 && words[0] == "set" && words[1] == "local" {
                self.out
                    .set_local
                    .insert(words[2].trim_end_matches(';').to_string());
            }
            self.out.sql.push_str(&lead);
            self.out.sql.push_str(&stmt);
        }
        Ok(())
    }

    fn meta(&mut self, name: &str, args: &str, dir: &Path) -> Result<(), String> {
        if name != "gset" && !self.stmt.trim().is_empty() {
            return Err("a psql command inside a statement".into());
        }
        match name {
            "if" | "elif" | "else" | "endif" => return self.branch(name, args),
            _ if !self.active() => return Ok(()),
            _ => {}
        }
        if matches!(self.conds.last(), Some(Cond::Guard { .. })) {
            return Err("only DO statements may stand in a guard".into());
        }
        match name {
            "set" => {
                let (var, value) = args.split_once(char::is_whitespace).unwrap_or((args, ""));
                if var.is_empty() || value.contains(':') || value.contains('\'') {
                    return Err("understood: \\set NAME plain-value".into());
                }
                self.vars
                    .insert(var.into(), Value::Known(value.trim().into()));
                self.flush_lead();
            }
            "ir" | "include_relative" => {
                let file = dir.join(args);
                let file =
                    normalize(&file).ok_or_else(|| format!("{args}: outside the repository"))?;
                self.flush_lead();
                self.file(&file)?;
            }
            "gset" if args.is_empty() => {
                let query = std::mem::take(&mut self.stmt);
                let query = query.trim().to_string();
                if query.ends_with("AS _idem_own_transaction") {
                    // Whether the script opened its own transaction: never, here (the
                    // migration's transaction is the one), and its comment goes with it.
                    self.vars
                        .insert("_idem_own_transaction".into(), Value::Known("false".into()));
                    self.lead.clear();
                } else {
                    self.flush_lead();
                    self.gset = Some(query);
                }
            }
            _ => return Err("not a psql command this translation knows".into()),
        }
        Ok(())
    }

    /// `\if` / `\elif` / `\else` / `\endif`.
    fn branch(&mut self, name: &str, args: &str) -> Result<(), String> {
        let outer = self.active();
        match name {
            // psql evaluates nothing in a branch it skips.
            "if" if !outer => self.conds.push(Cond::Known {
                active: false,
                taken: true,
            }),
            "if" => {
                let expr = args.trim();
                let known = if let Some(v) =
                    expr.strip_prefix(":{?").and_then(|v| v.strip_suffix('}'))
                {
                    Some(self.vars.contains_key(v))
                } else if let Some(v) = expr.strip_prefix(':') {
                    match self.vars.get(v) {
                        Some(Value::Known(value)) => Some(
                            truth(value).ok_or_else(|| format!("{value:?} is not a boolean"))?,
                        ),
                        _ if self.gset.is_some() => None,
                        _ => return Err(format!("{v} is set by no \\gset query before it")),
                    }
                } else {
                    return Err("understood: \\if :{?NAME} or \\if :NAME".into());
                };
                match known {
                    Some(b) => {
                        // The comment before a branch not taken describes it.
                        if b {
                            self.flush_lead()
                        } else {
                            self.lead.clear()
                        }
                        self.conds.push(Cond::Known {
                            active: b,
                            taken: b,
                        })
                    }
                    None => {
                        self.flush_lead();
                        let var = expr[1..].to_string();
                        self.vars.insert(var.clone(), Value::Runtime);
                        let query = self.gset.clone().unwrap_or_default();
                        self.conds.push(Cond::Guard {
                            var,
                            query,
                            in_else: false,
                            bodies: vec![],
                        });
                    }
                }
            }
            "elif" => match self.conds.last_mut() {
                Some(Cond::Known { .. }) => return Err("\\elif is not used by the scripts".into()),
                _ => return Err("\\elif in a guard".into()),
            },
            "else" => match self.conds.last_mut() {
                Some(Cond::Known { taken, .. }) => {
                    let t = *taken;
                    self.conds.pop();
                    let outer = self.active();
                    self.conds.push(Cond::Known {
                        active: outer && !t,
                        taken: true,
                    });
                }
                Some(Cond::Guard { in_else, .. }) if !*in_else => *in_else = true,
                _ => return Err("\\else without \\if".into()),
            },
            _ => match self.conds.pop() {
                Some(Cond::Known { .. }) => {}
                Some(Cond::Guard {
                    var, query, bodies, ..
                }) => {
                    if bodies.is_empty() {
                        return Err("a guard with nothing in its \\else branch".into());
                    }
                    self.out.sql.push_str(&guard(&var, &query, &bodies)?);
                }
                None => return Err("\\endif without \\if".into()),
            },
        }
        Ok(())
    }
}

/// `a/b/../c` as `a/c`; None when it climbs out of the repository.
fn normalize(path: &Path) -> Option<String> {
    let mut parts: Vec<String> = Vec::new();
    for c in path.components() {
        match c {
            std::path::Component::ParentDir => {
                parts.pop()?;
            }
            std::path::Component::Normal(p) => parts.push(p.to_string_lossy().into_owned()),
            std::path::Component::CurDir => {}
            _ => return None,
        }
    }
    Some(parts.join("/"))
}

/// The body of `DO $tag$ body $tag$;` (the only statement a guard's branch may hold).
fn do_body(stmt: &str) -> Result<String, String> {
    let pieces = lex(stmt)?;
    let mut code = pieces.iter().filter(|p| match p {
        Piece::Code(t) => !t.trim().is_empty(),
        Piece::Verbatim(t) => !is_comment(t),
        _ => true,
    });
    match (code.next(), code.next(), code.next(), code.next()) {
        (Some(Piece::Code(d)), Some(Piece::Verbatim(body)), Some(Piece::End), None)
            if d.trim().eq_ignore_ascii_case("do") && body.starts_with('$') =>
        {
            let tag_end = body[1..].find('$').map(|i| i + 2).unwrap_or(1);
            Ok(body[tag_end..body.len() - tag_end].trim().to_string())
        }
        _ => Err(format!(
            "a guard's branch may hold DO $$ ... $$; statements only, not: {}",
            stmt.trim()
        )),
    }
}

const GUARD_TAG: &str = "$idem_guard$";

/// One DO block for `SELECT ... \gset` + `\if :var \else DO ...; \endif`: the query, its
/// one row in a record (STRICT: psql's \gset fails on no row too), the bodies unless the
/// variable is true (psql's \if treats an unset or non-boolean variable as an error; here
/// the bodies run, and they raise).
fn guard(var: &str, query: &str, bodies: &[String]) -> Result<String, String> {
    if query.is_empty() {
        return Err(format!("\\if :{var} tests no \\gset query"));
    }
    if !var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(format!("{var}: not a column name"));
    }
    if query.contains(GUARD_TAG) || bodies.iter().any(|b| b.contains(GUARD_TAG)) {
        return Err(format!("the guard's text holds {GUARD_TAG}"));
    }
    let indent = |text: &str, by: &str| {
        text.lines()
            .map(|l| {
                if l.is_empty() {
                    String::new()
                } else {
                    format!("{by}{l}")
                }
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    let mut out = format!(
        "DO {GUARD_TAG}\nDECLARE\n    gset record;\nBEGIN\n    SELECT * INTO STRICT gset FROM (\n{}\n    ) AS q;\n    IF gset.{var} IS NOT TRUE THEN\n",
        indent(query, "        ")
    );
    for body in bodies {
        out.push_str(&indent(body, "        "));
        out.push_str(";\n");
    }
    out.push_str(&format!("    END IF;\nEND\n{GUARD_TAG};"));
    Ok(out)
}

/// `files` (paths from `root`) in order, as plain SQL for the API schema `api` and the
/// storage schema `storage` (not checked here: see [`super::migration::check_name`]).
pub fn plain_sql(root: &Path, files: &[&str], api: &str, storage: &str) -> Result<Plain, String> {
    let mut interp = Interp {
        root,
        vars: HashMap::from([
            ("schema".to_string(), Value::Known(api.to_string())),
            ("storage".to_string(), Value::Known(storage.to_string())),
        ]),
        conds: vec![],
        lead: String::new(),
        stmt: String::new(),
        gset: None,
        out: Plain::default(),
    };
    for file in files {
        interp.out.sql.push_str(&format!("\n-- ---- {file} ----\n"));
        interp.file(file)?;
        if !interp.conds.is_empty() {
            return Err(format!("{file}: \\if without \\endif"));
        }
        if !interp.stmt.trim().is_empty() {
            return Err(format!("{file}: ends inside a statement"));
        }
        let lead = std::mem::take(&mut interp.lead);
        interp.out.sql.push_str(&lead);
        if !interp.out.sql.ends_with('\n') {
            interp.out.sql.push('\n');
        }
    }
    Ok(interp.out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `files` written under a fresh folder, translated for the schemas `app` and `st`.
    fn translate(files: &[(&str, &str)]) -> Result<String, String> {
        let dir = std::env::temp_dir().join(format!(
            "pgidem-plain-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        for (name, text) in files {
            let path = dir.join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        let out = plain_sql(&dir, &[files[0].0], "My app", "St\"x").map(|p| p.sql);
        let _ = std::fs::remove_dir_all(&dir);
        out
    }

    #[test]
    fn variables_are_quoted_as_psql_quotes_them() {
        assert_eq!(psql_ident("my \"app\""), "\"my \"\"app\"\"\"");
        assert_eq!(psql_literal("it's"), "'it''s'");
        assert_eq!(psql_literal("a\\b"), " E'a\\\\b'");
        let out = translate(&[(
            "a.sql",
            "CREATE SCHEMA :\"storage\"; SELECT :'schema', a[1:2];\n",
        )])
        .unwrap();
        assert!(
            out.contains("CREATE SCHEMA \"St\"\"x\"; SELECT 'My app', a[1:2];\n"),
            "{out}"
        );
    }

    #[test]
    fn defaults_and_the_own_transaction_leave_no_psql_and_no_begin_or_commit() {
        let script = "\\set ON_ERROR_STOP 1\n\\if :{?schema}\n\\else\n\\set schema public\n\\endif\n\
            -- the trick\nSELECT now() = now()\n    AS _idem_own_transaction \\gset\n\
            \\if :_idem_own_transaction\nBEGIN;\n\\endif\nSELECT 1;\n\\if :_idem_own_transaction\nCOMMIT;\n\\endif\n";
        let out = translate(&[("a.sql", script)]).unwrap();
        assert!(
            !out.contains('\\') && !out.contains("BEGIN") && !out.contains("COMMIT"),
            "{out}"
        );
        assert!(
            !out.contains("the trick") && !out.contains("_idem_own_transaction"),
            "{out}"
        );
        assert!(out.contains("SELECT 1;"), "{out}");
    }

    #[test]
    fn a_guard_becomes_one_do_block_running_the_else_bodies() {
        let script = "\\ir inc/g.sql\n";
        let inc = "SELECT set_config('x.y', v, true) AS found, v = '1' AS ok FROM :\"storage\".t \\gset\n\
            \\if :ok\n\\else\nDO $$ BEGIN\n    RAISE EXCEPTION 'no';\nEND $$;\n\\endif\n";
        let out = translate(&[("a.sql", script), ("inc/g.sql", inc)]).unwrap();
        assert!(out.contains("SELECT * INTO STRICT gset FROM (\n        SELECT set_config('x.y', v, true) AS found, v = '1' AS ok FROM \"St\"\"x\".t\n    ) AS q;\n    IF gset.ok IS NOT TRUE THEN\n        BEGIN\n            RAISE EXCEPTION 'no';\n        END;\n    END IF;"), "{out}");
    }

    #[test]
    fn dollar_quoted_bodies_and_comments_are_kept_byte_for_byte() {
        let body = "$fn$\n  x := :\"storage\" || ':''y'; -- :schema\n  \\not a command\n$fn$";
        let out = translate(&[(
            "a.sql",
            &format!(
                "CREATE FUNCTION f() RETURNS int LANGUAGE plpgsql AS {body};\n-- :\"schema\" \\x\n"
            ),
        )])
        .unwrap();
        assert!(
            out.contains(body) && out.contains("-- :\"schema\" \\x\n"),
            "{out}"
        );
    }

    #[test]
    fn what_the_translation_does_not_know_is_refused() {
        for (script, says) in [
            ("\\echo hi\n", "not a psql command this translation knows"),
            ("SELECT :schema;\n", "spliced into SQL"),
            ("SELECT :\"nope\";\n", "nope is not set"),
            ("\\if :x\n\\endif\n", "set by no \\gset query"),
            (
                "SELECT 1 AS v \\gset\n\\if :v\nSELECT 2;\n\\endif\n",
                "a statement in a guard's \\if branch",
            ),
            (
                "SELECT 1 AS v \\gset\n\\if :v\n\\else\nSELECT 2;\n\\endif\n",
                "DO $$ ... $$; statements only",
            ),
            ("\\if :{?schema}\nSELECT 1;\n", "\\if without \\endif"),
        ] {
            let err = translate(&[("a.sql", script)]).unwrap_err();
            assert!(err.contains(says), "{script:?}: {err}");
        }
    }
}
