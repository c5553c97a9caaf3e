//! One declaration per SQL function (protocol/src/functions.rs): both backends install what
//! it renders (the extension's functions.sql, the PL/pgSQL variant's installer), and the
//! two declare the same signatures, as PostgreSQL itself reports them.

use pg_idempotency_protocol::functions::{
    self, Function, Grant, Portable, Returns, Schema, SqlType, Volatility,
};
use pg_idempotency_tests::backends::Both;
use pg_idempotency_tests::{root, Backend, Client};
use xtask::render::{
    extension_functions_sql, portable::portable_install_sql, proxy::proxy_install_sql,
};

/// A checked-in rendered file, against what cargo xtask render-sql writes now.
fn is_current(file: &str, rendered: std::io::Result<String>) {
    let path = root().join(file);
    let installed = std::fs::read_to_string(&path).unwrap();
    let rendered = rendered.unwrap_or_else(|e| panic!("rendering {file}: {e}"));
    assert!(
        installed == rendered,
        "{} is stale: run cargo xtask render-sql",
        path.display()
    );
}

#[test]
fn the_installed_functions_sql_is_the_rendered_declarations() {
    is_current(
        "pg_idempotency/sql/functions.sql",
        extension_functions_sql(&root()),
    );
}

#[test]
fn the_portable_installer_is_rendered_from_sql_src_and_the_declarations() {
    is_current("sql/pg_idempotency.sql", portable_install_sql(&root()));
}

#[test]
fn the_proxy_layer_is_rendered_from_sql_proxy_src_and_the_declarations() {
    is_current(
        "sql/proxy/pg_idempotency_proxy.sql",
        proxy_install_sql(&root()),
    );
}

/// What PostgreSQL says of one function: the facts a caller depends on.
#[derive(Debug, Clone, PartialEq)]
struct Catalogued {
    identity: String,
    arguments: String,
    result: String,
    argument_names: Vec<String>,
    defaults: i16,
    volatility: String,
    strict: bool,
    parallel: String,
    security_definer: bool,
    returns_set: bool,
    rows: f32,
    comment: Option<String>,
    public: bool,
    user: bool,
    admin: bool,
}

fn catalogued(c: &mut Client, f: &Function) -> Catalogued {
    let schema = match f.schema {
        Schema::Api => "public",
        Schema::Storage => "idempotency",
    };
    let rows = c
        .query(
            "SELECT pg_get_function_identity_arguments(p.oid), pg_get_function_arguments(p.oid),
                    pg_get_function_result(p.oid), coalesce(p.proargnames, '{}'), p.pronargdefaults,
                    p.provolatile::text, p.proisstrict, p.proparallel::text, p.prosecdef,
                    p.proretset, p.prorows, obj_description(p.oid, 'pg_proc'),
                    has_function_privilege('public', p.oid, 'EXECUTE'),
                    has_function_privilege('idempotency_user', p.oid, 'EXECUTE'),
                    has_function_privilege('idempotency_admin', p.oid, 'EXECUTE')
             FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
             WHERE n.nspname = $1 AND p.proname = $2",
            &[&schema, &f.name],
        )
        .unwrap();
    assert_eq!(rows.len(), 1, "{schema}.{} is declared once", f.name);
    let r = &rows[0];
    // has_function_privilege('public', ...) asks about the role PUBLIC, which every role is in.
    Catalogued {
        identity: r.get(0),
        arguments: r.get(1),
        result: r.get(2),
        argument_names: r.get(3),
        defaults: r.get(4),
        volatility: r.get(5),
        strict: r.get(6),
        parallel: r.get(7),
        security_definer: r.get(8),
        returns_set: r.get(9),
        rows: r.get(10),
        comment: r.get(11),
        public: r.get(12),
        user: r.get(13),
        admin: r.get(14),
    }
}

/// A type as PostgreSQL prints it.
fn shown(ty: SqlType) -> &'static str {
    match ty {
        SqlType::Timestamptz => "timestamp with time zone",
        other => other.sql(),
    }
}

/// The catalogue of a function against its declaration.
fn check_declared(backend: Backend, f: &Function, got: &Catalogued, wrong: &mut Vec<String>) {
    let mut expect = |what: &str, same: bool| {
        if !same {
            wrong.push(format!("{backend:?}: {}: {what}: {got:?}", f.name));
        }
    };
    let mode = if matches!(f.returns, Returns::InOut(_)) {
        "INOUT "
    } else {
        ""
    };
    let mut identity: Vec<String> = f
        .args
        .iter()
        .map(|a| format!("{mode}{} {}", a.name, shown(a.ty)))
        .collect();
    if let Returns::InOut(outs) = f.returns {
        identity.extend(
            outs.iter()
                .map(|a| format!("OUT {} {}", a.name, shown(a.ty))),
        );
    }
    expect("arguments", got.identity == identity.join(", "));
    let mut names: Vec<&str> = f.args.iter().map(|a| a.name).collect();
    match f.returns {
        Returns::InOut(outs) | Returns::Table(outs) => names.extend(outs.iter().map(|a| a.name)),
        _ => {}
    }
    expect("argument names", got.argument_names == names);
    let defaults = f.args.iter().filter(|a| a.default.is_some()).count();
    expect("defaults", got.defaults as usize == defaults);
    let volatility = match f.volatility {
        Volatility::Immutable => "i",
        Volatility::Stable => "s",
        Volatility::Volatile => "v",
    };
    expect("volatility", got.volatility == volatility);
    expect("strictness", got.strict == f.strict);
    expect(
        "parallel safety",
        got.parallel == (if f.parallel_safe { "s" } else { "u" }),
    );
    // The PL/pgSQL variant runs every function it renders as its definer
    // (xtask/src/render/portable.rs): its helpers live in the storage schema, which
    // callers cannot use (the extension's helpers are C code).
    let definer = f.security_definer || backend == Backend::Portable;
    expect("security definer", got.security_definer == definer);
    expect("comment", got.comment.as_deref() == f.comment);
    expect("EXECUTE is never PUBLIC's", !got.public);
    expect("idempotency_user", got.user == (f.grant == Grant::User));
    expect(
        "idempotency_admin",
        got.admin == matches!(f.grant, Grant::User | Grant::Admin),
    );
}

#[test]
fn both_backends_declare_every_function_as_the_protocol_does() {
    let mut both = Both::new("signatures");
    let mut api_of = Vec::new();
    let mut wrong = Vec::new();
    for (backend, c) in both.sessions.iter_mut() {
        let mut catalogue = Vec::new();
        for f in functions::FUNCTIONS {
            // The extension's internal helpers (the PL/pgSQL variant has others).
            if f.portable == Portable::Absent && *backend == Backend::Portable {
                continue;
            }
            let got = catalogued(c, f);
            check_declared(*backend, f, &got, &mut wrong);
            if f.schema == Schema::Api {
                catalogue.push((f.name, got));
            }
        }
        // Nothing more: an API function that is not declared would escape this test.
        let extra: Vec<String> = c
            .query(
                "SELECT p.proname::text FROM pg_proc p
                 WHERE p.pronamespace = 'public'::regnamespace AND p.proname LIKE 'idem\\_%'",
                &[],
            )
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .filter(|n: &String| functions::named(n).is_none())
            .collect();
        assert!(
            extra.is_empty(),
            "{backend:?}: undeclared functions {extra:?}"
        );
        api_of.push(catalogue);
    }
    assert!(wrong.is_empty(), "not as declared:\n{}", wrong.join("\n"));
    // The two backends, as PostgreSQL prints them: arguments with their defaults, results.
    let (extension, portable) = (&api_of[0], &api_of[1]);
    assert_eq!(extension.len(), functions::api().count());
    for ((name, e), (_, p)) in extension.iter().zip(portable) {
        // Whether each runs as its definer is checked against the declaration above.
        let p = Catalogued {
            security_definer: e.security_definer,
            ..p.clone()
        };
        assert_eq!(
            *e, p,
            "{name}: the extension and the PL/pgSQL variant differ"
        );
    }
}

/// The PL/pgSQL variant's uninstall (and its migration to the extension) drops every API
/// function by the signature protocol declares.
#[test]
fn the_portable_uninstall_drops_every_declared_signature() {
    let text = std::fs::read_to_string(root().join("sql/include/drop-api.sql")).unwrap();
    for f in functions::api() {
        let named = format!(":\"schema\".{}({})", f.name, f.identity_args());
        assert!(
            text.contains(&named),
            "sql/include/drop-api.sql does not drop {named}"
        );
    }
}

/// The columns of an API function's composite result (`Returns::Row`, `Returns::SetOf`), as
/// PostgreSQL reports them: name and type, in order. `pg_get_function_result` prints only
/// the type's name, so a column added to one backend's type alone would pass the test above.
fn result_columns(c: &mut Client, name: &str) -> Vec<(String, String)> {
    c.query(
        "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod)
         FROM pg_proc p JOIN pg_type t ON t.oid = p.prorettype
         JOIN pg_attribute a ON a.attrelid = t.typrelid
         WHERE p.pronamespace = 'public'::regnamespace AND p.proname = $1
           AND a.attnum > 0 AND NOT a.attisdropped
         ORDER BY a.attnum",
        &[&name],
    )
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

#[test]
fn both_backends_return_the_same_columns_from_each_result_type() {
    let mut both = Both::new("result_types");
    let composite: Vec<&Function> = functions::api()
        .filter(|f| matches!(f.returns, Returns::Row(_) | Returns::SetOf(..)))
        .collect();
    assert!(!composite.is_empty());
    let mut differ = Vec::new();
    for f in composite {
        let mut of_backend = Vec::new();
        for (backend, c) in both.sessions.iter_mut() {
            let columns = result_columns(c, f.name);
            assert!(
                !columns.is_empty(),
                "{backend:?}: {} returns no composite type's columns",
                f.name
            );
            of_backend.push((*backend, columns));
        }
        let (e, p) = (&of_backend[0], &of_backend[1]);
        if e.1 != p.1 {
            differ.push(format!(
                "{}: {:?} {:?}\n    {:?} {:?}\n  (pg_idempotency/sql/storage.sql and sql/src/types.sql declare the type)",
                f.name, e.0, e.1, p.0, p.1
            ));
        }
    }
    assert!(
        differ.is_empty(),
        "the backends' result types differ:\n{}",
        differ.join("\n")
    );
}
