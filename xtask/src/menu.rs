//! What `cargo xtask` prints: every tool of the project, in one place.

/// The verbs `cargo xtask` runs itself.
pub const VERBS: &[(&str, &str)] = &[
    (
        "render-sql",
        "write the SQL rendered from protocol/src/functions.rs: the extension's functions.sql, the portable installer, the PL/Proxy layer, sql/migrations/",
    ),
    (
        "portable-migration [--schema S] [--storage T] [--from A] [--to B]",
        "print the portable variant's install or an upgrade as one plain-SQL migration (also scripts/portable-migration.sh)",
    ),
];

/// The files of scripts/, each with what it is for, grouped as the menu shows them.
pub const SCRIPTS: &[(&str, &[(&str, &str)])] = &[
    (
        "the README's commands",
        &[
            (
                "demo.sh",
                "set up what is missing and run the demo (PostgreSQL 18)",
            ),
            (
                "test.sh [pg18|pg15 ...]",
                "set up what is missing and run every test layer",
            ),
            (
                "bench.sh [--smoke] [--only W ...]",
                "the benchmarks, each beside its baseline: docs/benchmarks.md",
            ),
            ("faults.sh", "the full fault suite: docs/reliability.md"),
            (
                "example-server.sh",
                "serve the example HTTP API behind the idempotency layer",
            ),
            ("mcp-demo.sh", "the MCP proxy's demo"),
            ("python-demo.sh", "the Python package's demo"),
            (
                "portable-migration.sh",
                "the portable variant as one plain-SQL migration, for other schemas",
            ),
        ],
    ),
    (
        "provisioning and private servers (all under target/)",
        &[
            ("setup.sh", "take a fresh machine to a working state"),
            (
                "cluster.sh pg18|pg15 start|stop|status|psql|conninfo",
                "a private PostgreSQL cluster",
            ),
            (
                "install-extension.sh pg18|pg15",
                "build the extension (release) and install it for a cluster",
            ),
            (
                "stage-extension.sh",
                "build the extension with plain cargo and lay out what CREATE EXTENSION needs",
            ),
            (
                "pgbouncer.sh start|stop|conninfo VERSION",
                "a private PgBouncer in transaction mode",
            ),
            (
                "redis.sh start|stop|url",
                "a private Redis for RedisStore's tests",
            ),
            (
                "redis-durable.sh start|stop|port",
                "a second Redis, appendfsync always, for the peers benchmark",
            ),
            (
                "sharded.sh VERSION BACKEND DB N",
                "a PL/Proxy proxy in front of N partitions",
            ),
            (
                "reshard.sh",
                "grow a PL/Proxy proxy from N to 2N partitions while calls go on",
            ),
            ("package.sh", "build the Debian package of the extension"),
            (
                "package-mcp.sh [--binary PATH]",
                "build the Debian package of the MCP proxy",
            ),
            (
                "mcp-parts.sh",
                "install the MCP SDKs and servers the proxy is tested with",
            ),
            (
                "migration-tools.sh",
                "install the migration tools the plain-SQL migrations are tested with",
            ),
            (
                "peers.sh",
                "install the peers the benchmark measures against",
            ),
            (
                "upstream-node.sh",
                "install the Node.js provider the web executor is tested against",
            ),
        ],
    ),
    (
        "steps of the test command",
        &[
            (
                "test-sql.sh VERSION BACKEND",
                "golden SQL files and isolation specs",
            ),
            (
                "test-examples.sh VERSION BACKEND",
                "the Python and Node.js examples",
            ),
            (
                "test-python.sh checks | VERSION BACKEND",
                "the Python package: lint, types, wheel and sdist; its tests on a backend",
            ),
            (
                "test-typescript.sh checks | VERSION BACKEND",
                "the TypeScript package: ESLint, tsc, npm pack into a fresh project; its tests on a backend",
            ),
            (
                "test-package.sh",
                "the Debian package: build, dpkg -i, smoke test, purge",
            ),
            (
                "test-package-mcp.sh [--binary PATH]",
                "the MCP proxy's Debian package: build, lintian, dpkg -i, a call through it, purge",
            ),
            (
                "test-staging.sh pg18",
                "the demo's build against cargo pgrx package's, byte for byte",
            ),
            (
                "test-cluster-port.sh",
                "a private cluster whose port another program holds",
            ),
        ],
    ),
    (
        "used by the others",
        &[
            (
                "debian.sh",
                "sourced by the Debian package scripts and their tests: changelog, dependencies, archive, checks",
            ),
            (
                "env.sh",
                "sourced by every script: paths, ports, conninfo, fresh_database",
            ),
            (
                "results.py",
                "the test command's per-test results and its summary line",
            ),
            (
                "port.py",
                "whether a private cluster may take a port, and who holds it",
            ),
            (
                "install-script.py",
                "the extension's install script, as cargo pgrx package writes it",
            ),
            (
                "faults_report.py",
                "the figures section of docs/reliability.md",
            ),
            ("send_email.psql", "the demo's send_email in plain SQL"),
            (
                "mcp_demo_agent.py",
                "the MCP demo's agent (the official Python SDK)",
            ),
        ],
    ),
];

/// The menu's text.
pub fn text() -> String {
    let mut out = String::from("cargo xtask <verb>: pg_idempotency's own tools\n\n");
    for (verb, what) in VERBS {
        out.push_str(&format!("  cargo xtask {verb}\n      {what}\n"));
    }
    for (group, scripts) in SCRIPTS {
        out.push_str(&format!("\nscripts/: {group}\n"));
        for (script, what) in *scripts {
            out.push_str(&format!("  scripts/{script}\n      {what}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// Every file in scripts/ is on the menu, and the menu names no file that is not there.
    #[test]
    fn the_menu_covers_every_script() {
        let dir = xtask::repository().join("scripts");
        let files: BTreeSet<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        let listed: BTreeSet<String> = SCRIPTS
            .iter()
            .flat_map(|(_, scripts)| scripts.iter())
            .map(|(script, _)| script.split(' ').next().unwrap().to_string())
            .collect();
        assert_eq!(
            files.difference(&listed).collect::<Vec<_>>(),
            Vec::<&String>::new(),
            "in scripts/, not on the menu (xtask/src/menu.rs)"
        );
        assert_eq!(
            listed.difference(&files).collect::<Vec<_>>(),
            Vec::<&String>::new(),
            "on the menu, not in scripts/"
        );
    }
}
