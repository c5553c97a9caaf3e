//! Both backends side by side: for the tests that compare the extension with the PL/pgSQL
//! variant directly (their signatures, their SQLSTATEs), whichever backend the suite runs
//! against.

use crate::{connect_to, fresh_database, install_backend, Backend, Client};

/// A fresh database with `backend` installed, named for the test and the process; its DSN.
pub fn installed(backend: Backend, test: &str) -> String {
    let db = format!(
        "pgidem_{test}_{}_{}",
        match backend {
            Backend::Extension => "ext",
            Backend::Portable => "port",
        },
        std::process::id()
    );
    let dsn = fresh_database(&db);
    install_backend(&dsn, backend);
    dsn
}

/// A session on each backend: `[extension, portable]`, each in a database of its own that
/// is dropped when the pair is.
pub struct Both {
    pub sessions: [(Backend, Client); 2],
    databases: Vec<String>,
}

impl Both {
    pub fn new(test: &str) -> Both {
        let mut databases = Vec::new();
        let mut open = |b| {
            let dsn = installed(b, test);
            databases.push(dsn.clone());
            (b, connect_to(&dsn))
        };
        let sessions = [open(Backend::Extension), open(Backend::Portable)];
        Both {
            sessions,
            databases,
        }
    }
}

impl Drop for Both {
    fn drop(&mut self) {
        for dsn in &self.databases {
            if let Some(db) = dsn
                .split_whitespace()
                .find_map(|p| p.strip_prefix("dbname="))
            {
                // Best effort: a failed test leaves its databases for a look, and the next
                // run drops them first.
                let _ = std::panic::catch_unwind(|| crate::drop_database(db));
            }
        }
    }
}
