//! Writes pg_idempotency/sql/functions.sql from the declarations in functions.rs.
//! Run by scripts/render-sql.sh; tests/tests/signatures.rs fails when the file is stale.

fn main() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the repository");
    let text = protocol::render::extension_functions_sql(root).unwrap_or_else(|e| {
        eprintln!("render-sql: {e}");
        std::process::exit(1);
    });
    let out = root.join("pg_idempotency/sql/functions.sql");
    std::fs::write(&out, text).unwrap_or_else(|e| {
        eprintln!("render-sql: {}: {e}", out.display());
        std::process::exit(1);
    });
}
