//! `cargo xtask render-sql`: writes the rendered SQL of both backends:
//! pg_idempotency/sql/functions.sql (the extension's functions), sql/pg_idempotency.sql (the
//! PL/pgSQL variant's installer) and sql/proxy/pg_idempotency_proxy.sql (the PL/Proxy layer),
//! from the declarations in protocol/src/functions.rs and the hand-written SQL beside them;
//! then the PL/pgSQL variant's plain-SQL migrations for the default schemas,
//! sql/migrations/, from that installer and the upgrade scripts.
//! tests/tests/consistency/signatures.rs and plain_migrations.rs fail when a file is stale.

use std::path::Path;

use xtask::render;

pub fn run() {
    let root = &xtask::repository();
    write(
        root,
        "pg_idempotency/sql/functions.sql",
        render::extension_functions_sql(root),
    );
    write(
        root,
        "sql/pg_idempotency.sql",
        render::portable::portable_install_sql(root),
    );
    write(
        root,
        "sql/proxy/pg_idempotency_proxy.sql",
        render::proxy::proxy_install_sql(root),
    );
    let migrations = render::migration::committed(root).map_err(std::io::Error::other);
    let migrations = migrations.unwrap_or_else(|e| {
        eprintln!("render-sql: {e}");
        std::process::exit(1);
    });
    for (file, text) in migrations {
        if let Some(dir) = root.join(&file).parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        write(root, &file, Ok(text));
    }
}

fn write(root: &Path, file: &str, text: std::io::Result<String>) {
    let fail = |e: &dyn std::fmt::Display| -> ! {
        eprintln!("render-sql: {e}");
        std::process::exit(1);
    };
    let text = text.unwrap_or_else(|e| fail(&e));
    let out = root.join(file);
    std::fs::write(&out, text).unwrap_or_else(|e| fail(&format!("{}: {e}", out.display())));
    println!("wrote {file}");
}
