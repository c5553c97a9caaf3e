//! pg_idempotency's own tools, kept out of the published crates: the renderer of both
//! backends' SQL from the declarations in `protocol` ([`render`]), and the writer of the
//! portable variant's plain-SQL migrations. `cargo xtask` (xtask/src/main.rs) lists them.

use std::path::{Path, PathBuf};

pub mod render;

/// The repository this crate is built from: every tool reads and writes files in it.
pub fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask/ is a folder of the repository")
        .to_path_buf()
}
