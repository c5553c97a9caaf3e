//! Where the SQL API lives, and the statements `PgStore` sends, every one naming the API's
//! schema and every type and catalogue function it uses.
//!
//! Why qualified: an unqualified `idem_begin(...)` resolves through the session's
//! `search_path`, and a role that may create objects in any schema listed before ours can
//! plant a function of the same name and argument types (or a better match) there, which
//! the call would then run, with the caller's scope, key and request (docs/security.md,
//! "Calling the API"). `"public".idem_begin(...)` resolves in one schema only. The schema
//! name reaches SQL only as a quoted identifier, never spliced in as given.

use std::str::FromStr;
use std::sync::{Arc, LazyLock};

use pg_idempotency_protocol::functions::IDEM_BEGIN;
use tokio_postgres::types::Type;

use crate::error::{Error, Result};

/// How `PgStore` sends its statements to the server.
///
/// A named prepared statement lives in the server's session. Behind a pooler in transaction
/// mode (PgBouncer before 1.21 or with `max_prepared_statements = 0`, Supavisor, Neon's
/// pooler on some plans) a session is lent per transaction: a statement prepared on one
/// server connection is executed on another ("prepared statement \"s1\" does not exist",
/// 26000) or meets another client's statement of the same name (42P05). docs/scaling.md,
/// "Through a connection pooler", says which to choose where.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StatementMode {
    /// Named statements, prepared once per connection and cached there (deadpool's
    /// statement cache): a call is one round trip and the server plans it once per
    /// connection. Needs the session: direct connections, or a pooler in session mode.
    #[default]
    Prepared,
    /// Unnamed statements sent with their parameters' types (Parse, Bind, Execute and Sync
    /// in one round trip): nothing outlives the call on the server, so any pooler passes
    /// them, in transaction mode too. The server parses and plans every call.
    Unnamed,
}

impl StatementMode {
    /// The word configuration files and DSNs use: `prepared` or `unnamed`.
    pub fn as_str(self) -> &'static str {
        match self {
            StatementMode::Prepared => "prepared",
            StatementMode::Unnamed => "unnamed",
        }
    }
}

impl std::fmt::Display for StatementMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for StatementMode {
    type Err = Error;

    /// `prepared` or `unnamed` (as written: no other case); anything else is
    /// `ErrorKind::InvalidArgument`.
    fn from_str(word: &str) -> Result<StatementMode> {
        match word {
            "prepared" => Ok(StatementMode::Prepared),
            "unnamed" => Ok(StatementMode::Unnamed),
            _ => Err(Error::invalid(format!(
                "the statement mode {:?} is not one of prepared, unnamed",
                word.chars().take(64).collect::<String>()
            ))
            .with_hint(
                "prepared (the default) for direct connections and session pooling; unnamed \
                 behind a pooler in transaction mode (PgBouncer, Supavisor, Neon's pooler)",
            )),
        }
    }
}

/// The parameters' types of each statement, in order: what an unnamed statement sends
/// with its Parse (every parameter is cast in the text as well, so both modes agree).
pub(crate) mod params {
    use super::Type;

    pub const BEGIN: &[Type] = &[
        Type::TEXT,
        Type::TEXT,
        Type::JSONB,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
    ];
    pub const BEGIN_BATCH: &[Type] = &[
        Type::TEXT,
        Type::TEXT_ARRAY,
        Type::JSONB_ARRAY,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT_ARRAY,
    ];
    pub const COMPLETE: &[Type] = &[
        Type::TEXT,
        Type::TEXT,
        Type::INT8,
        Type::JSONB,
        Type::BOOL,
        Type::BOOL,
    ];
    pub const COMPLETE_BATCH: &[Type] = &[
        Type::TEXT,
        Type::TEXT_ARRAY,
        Type::INT8_ARRAY,
        Type::JSONB_ARRAY,
        Type::BOOL_ARRAY,
        Type::BOOL_ARRAY,
    ];
    pub const RELEASE: &[Type] = &[Type::TEXT, Type::TEXT, Type::INT8];
    pub const EXTEND: &[Type] = &[Type::TEXT, Type::TEXT, Type::INT8, Type::TEXT];
    pub const LOOKUP: &[Type] = &[Type::TEXT, Type::TEXT];
    pub const FORGET: &[Type] = &[Type::TEXT, Type::TEXT, Type::TEXT];
    pub const INSTALLED: &[Type] = &[Type::TEXT];
    pub const NONE: &[Type] = &[];
}

/// PostgreSQL keeps identifiers to NAMEDATALEN - 1 bytes and silently truncates longer
/// ones: a longer name would call a schema other than the one named.
const MAX_SCHEMA_BYTES: usize = 63;

/// The schema the SQL API's functions are in (`CREATE EXTENSION ... SCHEMA`, or the
/// portable install's `-v schema=`): `public` by default. The name is taken as stored in
/// the catalogue (case and all: `App` is not `app`), and always sent quoted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiSchema {
    name: String,
    quoted: String,
}

impl ApiSchema {
    /// The schema the API is installed in when none is named.
    pub const DEFAULT: &'static str = "public";

    /// `name`, checked: 1 to 63 bytes, no control character (NUL included), not a
    /// `pg_` schema (reserved for the system: the API cannot be installed there).
    /// Anything else is `ErrorKind::InvalidArgument`.
    pub fn new(name: &str) -> Result<ApiSchema> {
        let refused = |why: &str| {
            Error::invalid(format!("the SQL API's schema {name:?} {why}")).with_hint(
                "name the schema the API was installed in (CREATE EXTENSION ... SCHEMA, or the \
                 portable install's -v schema=), as the catalogue spells it; the default is public",
            )
        };
        if name.is_empty() {
            return Err(refused("is empty"));
        }
        if name.len() > MAX_SCHEMA_BYTES {
            return Err(refused(&format!(
                "is {} bytes; PostgreSQL names are at most {MAX_SCHEMA_BYTES}",
                name.len()
            )));
        }
        if name.chars().any(char::is_control) {
            return Err(refused("holds a control character"));
        }
        if name.starts_with("pg_") {
            return Err(refused(
                "is a system schema (pg_*), where the API cannot be installed",
            ));
        }
        Ok(ApiSchema {
            name: name.to_string(),
            quoted: quote_ident(name),
        })
    }

    /// The name as given.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The name as an SQL identifier: in double quotes, inner quotes doubled.
    pub fn quoted(&self) -> &str {
        &self.quoted
    }
}

impl Default for ApiSchema {
    fn default() -> ApiSchema {
        ApiSchema {
            name: ApiSchema::DEFAULT.to_string(),
            quoted: quote_ident(ApiSchema::DEFAULT),
        }
    }
}

impl std::fmt::Display for ApiSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.quoted)
    }
}

/// `"name"`, with `"` doubled: PostgreSQL's quoted identifier, which takes any character
/// but NUL (refused before this).
fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Every statement `PgStore` runs, for one schema. Built once per schema (the default
/// one once per process): prepared statements are cached by their text.
#[derive(Debug)]
pub(crate) struct Statements {
    pub schema: ApiSchema,
    pub begin: String,
    pub begin_batch: String,
    pub complete: String,
    pub complete_batch: String,
    pub release: String,
    pub extend: String,
    pub lookup: String,
    pub forget: String,
    pub purge: String,
    pub metrics: String,
    /// Whether `begin_signature` names a function (one text parameter).
    pub installed: &'static str,
    /// `idem_begin`'s signature in the schema, for `to_regprocedure`.
    pub begin_signature: String,
}

static PUBLIC: LazyLock<Arc<Statements>> =
    LazyLock::new(|| Arc::new(Statements::in_schema(ApiSchema::default())));

impl Statements {
    /// The statements of the default schema, `public`.
    pub fn public() -> Arc<Statements> {
        PUBLIC.clone()
    }

    /// The statements for `schema` (the default's are shared).
    pub fn for_schema(schema: &ApiSchema) -> Arc<Statements> {
        if schema.name == ApiSchema::DEFAULT {
            Statements::public()
        } else {
            Arc::new(Statements::in_schema(schema.clone()))
        }
    }

    fn in_schema(schema: ApiSchema) -> Statements {
        let s = schema.quoted();
        // Types and catalogue functions are named in pg_catalog too: a session whose
        // search_path lists pg_catalog after another schema would otherwise look there
        // first. (`extract(... FROM ...)` is grammar that always means pg_catalog's.)
        Statements {
            begin: format!(
                "SELECT outcome, fence, attempt, recovered, upstream_key, succeeded, response, \
                        lease_until, expires_at, extract(epoch FROM retry_after)::pg_catalog.float8 \
                 FROM {s}.idem_begin($1::pg_catalog.text, $2::pg_catalog.text, $3::pg_catalog.jsonb, \
                        $4::pg_catalog.text::pg_catalog.interval, $5::pg_catalog.text::pg_catalog.interval, \
                        $6::pg_catalog.text, $7::pg_catalog.text, $8::pg_catalog.text::pg_catalog.interval, \
                        $9::pg_catalog.text::pg_catalog.uuid, $10::pg_catalog.text::pg_catalog.interval)"
            ),
            begin_batch: format!(
                "SELECT outcome, fence, attempt, recovered, upstream_key, succeeded, response, \
                        lease_until, expires_at, extract(epoch FROM retry_after)::pg_catalog.float8, item \
                 FROM {s}.idem_begin_batch($1::pg_catalog.text, $2::pg_catalog.text[], $3::pg_catalog.jsonb[], \
                        $4::pg_catalog.text::pg_catalog.interval, $5::pg_catalog.text::pg_catalog.interval, \
                        $6::pg_catalog.text, $7::pg_catalog.text, $8::pg_catalog.text[]::pg_catalog.uuid[])"
            ),
            complete: format!(
                "SELECT state FROM {s}.idem_complete($1::pg_catalog.text, $2::pg_catalog.text, \
                        $3::pg_catalog.int8, $4::pg_catalog.jsonb, $5::pg_catalog.bool, $6::pg_catalog.bool)"
            ),
            complete_batch: format!(
                "SELECT item, outcome, state \
                 FROM {s}.idem_complete_batch($1::pg_catalog.text, $2::pg_catalog.text[], \
                        $3::pg_catalog.int8[], $4::pg_catalog.jsonb[], $5::pg_catalog.bool[], $6::pg_catalog.bool[])"
            ),
            release: format!(
                "SELECT {s}.idem_release($1::pg_catalog.text, $2::pg_catalog.text, $3::pg_catalog.int8)"
            ),
            extend: format!(
                "SELECT lease_until FROM {s}.idem_extend($1::pg_catalog.text, $2::pg_catalog.text, \
                        $3::pg_catalog.int8, $4::pg_catalog.text::pg_catalog.interval)"
            ),
            lookup: format!(
                "SELECT state, fence, attempt, fingerprint, upstream_key, response, created_at, \
                        completed_at, lease_until, expires_at \
                 FROM {s}.idem_lookup($1::pg_catalog.text, $2::pg_catalog.text)"
            ),
            // The role's name as it is, whatever characters it has (a missing role is an
            // error, never NULL: NULL would name the caller).
            forget: format!(
                "SELECT {s}.idem_forget($1::pg_catalog.text, $2::pg_catalog.text, \
                        pg_catalog.quote_ident($3::pg_catalog.text)::pg_catalog.regrole)"
            ),
            purge: format!("SELECT {s}.idem_purge_expired()"),
            metrics: format!(
                "SELECT pg_catalog.pg_get_userbyid(owner::pg_catalog.oid)::pg_catalog.text, scope, \
                        in_progress, succeeded, failed, lapsed, expired, \
                        extract(epoch FROM oldest_in_progress)::pg_catalog.float8, claimed_total, \
                        replay_total, in_progress_total, mismatch_total, note \
                 FROM {s}.idem_metrics()"
            ),
            installed:
                "SELECT pg_catalog.to_regprocedure($1::pg_catalog.text) IS NOT NULL",
            begin_signature: format!("{s}.idem_begin({})", IDEM_BEGIN.identity_args()),
            schema,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    #[test]
    fn names_are_always_quoted() {
        assert_eq!(ApiSchema::default().quoted(), "\"public\"");
        assert_eq!(ApiSchema::new("App").unwrap().quoted(), "\"App\"");
        assert_eq!(
            ApiSchema::new("my \"odd\" schema").unwrap().quoted(),
            "\"my \"\"odd\"\" schema\""
        );
        // What would end the identifier early stays inside it.
        let hostile = ApiSchema::new("x\".idem_begin(); DROP TABLE t; --").unwrap();
        assert_eq!(hostile.quoted(), "\"x\"\".idem_begin(); DROP TABLE t; --\"");
    }

    #[test]
    fn bad_names_are_refused_as_arguments() {
        let long = "s".repeat(64);
        for name in [
            "",
            long.as_str(),
            "a\0b",
            "line\nbreak",
            "pg_catalog",
            "pg_temp",
        ] {
            let e = ApiSchema::new(name).unwrap_err();
            assert_eq!(e.kind, ErrorKind::InvalidArgument, "{name:?}");
            assert!(e.hint().is_some(), "{name:?}");
        }
        assert!(ApiSchema::new(&"s".repeat(63)).is_ok());
    }

    #[test]
    fn every_statement_names_the_schema() {
        let sql = Statements::in_schema(ApiSchema::new("app api").unwrap());
        for (name, text) in [
            ("begin", &sql.begin),
            ("begin_batch", &sql.begin_batch),
            ("complete", &sql.complete),
            ("complete_batch", &sql.complete_batch),
            ("release", &sql.release),
            ("extend", &sql.extend),
            ("lookup", &sql.lookup),
            ("forget", &sql.forget),
            ("purge", &sql.purge),
            ("metrics", &sql.metrics),
            ("begin_signature", &sql.begin_signature),
        ] {
            let calls = text.matches("idem_").count();
            let qualified = text.matches("\"app api\".idem_").count();
            assert!(calls == 1 && qualified == 1, "{name}: {text}");
        }
    }

    #[test]
    fn statement_modes_have_words() {
        for mode in [StatementMode::Prepared, StatementMode::Unnamed] {
            assert_eq!(mode.as_str().parse::<StatementMode>().unwrap(), mode);
        }
        assert_eq!(StatementMode::default(), StatementMode::Prepared);
        for word in ["", "Unnamed", "simple", "unnamed ", &"x".repeat(10_000)] {
            let e = word.parse::<StatementMode>().unwrap_err();
            assert_eq!(e.kind, ErrorKind::InvalidArgument, "{word:?}");
            assert!(e.hint().is_some() && e.message.len() < 200, "{word:?}");
        }
    }

    /// Each statement's text has exactly as many parameters as its types list.
    #[test]
    fn every_statement_lists_its_parameters_types() {
        let sql = Statements::in_schema(ApiSchema::default());
        for (name, text, types) in [
            ("begin", sql.begin.as_str(), params::BEGIN),
            ("begin_batch", &sql.begin_batch, params::BEGIN_BATCH),
            ("complete", &sql.complete, params::COMPLETE),
            (
                "complete_batch",
                &sql.complete_batch,
                params::COMPLETE_BATCH,
            ),
            ("release", &sql.release, params::RELEASE),
            ("extend", &sql.extend, params::EXTEND),
            ("lookup", &sql.lookup, params::LOOKUP),
            ("forget", &sql.forget, params::FORGET),
            ("purge", &sql.purge, params::NONE),
            ("metrics", &sql.metrics, params::NONE),
            ("installed", sql.installed, params::INSTALLED),
        ] {
            let highest = (1..=20).filter(|n| text.contains(&format!("${n}::"))).max();
            assert_eq!(highest.unwrap_or(0), types.len(), "{name}: {text}");
        }
    }

    #[test]
    fn the_default_schema_shares_its_statements() {
        let a = Statements::for_schema(&ApiSchema::default());
        let b = Statements::public();
        assert!(Arc::ptr_eq(&a, &b));
        assert!(a.begin.contains("FROM \"public\".idem_begin("));
    }
}
