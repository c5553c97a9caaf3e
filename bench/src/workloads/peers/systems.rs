//! Who is measured: every row of the peers workload, with its language, its store and what
//! runs it. Ours and the peers of one language sit side by side, so that a ratio never
//! compares one language's client with another's.

/// The caller's language: ratios are taken within one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lang {
    Python,
    Node,
    Rust,
}

impl Lang {
    pub fn name(self) -> &'static str {
        match self {
            Lang::Python => "Python",
            Lang::Node => "Node.js",
            Lang::Rust => "Rust",
        }
    }
}

/// Where a row keeps its records; every store but `Memory` is reached over the network,
/// through the delay forwarder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Store {
    /// PostgreSQL with the extension (fsync on, synchronous commit).
    PgExtension,
    /// PostgreSQL with the portable SQL variant, same server.
    PgPortable,
    /// A peer's own table in the extension's database (idemkit's, made by its `init_pg`).
    PgTable,
    /// Redis without persistence, as scripts/redis.sh runs it.
    Redis,
    /// Redis with `appendonly yes`, `appendfsync always` (scripts/redis-durable.sh).
    RedisDurable,
    /// In the process's memory: no network, nothing durable.
    Memory,
}

impl Store {
    pub fn name(self) -> &'static str {
        match self {
            Store::PgExtension => "PostgreSQL, extension",
            Store::PgPortable => "PostgreSQL, portable SQL",
            Store::PgTable => "PostgreSQL, its own table",
            Store::Redis => "Redis, no persistence",
            Store::RedisDurable => "Redis, `appendfsync always`",
            Store::Memory => "in-process memory",
        }
    }

    pub fn networked(self) -> bool {
        self != Store::Memory
    }
}

/// What runs a row: a driver process (bench/peers/) with its peer's name, or the bench's
/// own Rust code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runner {
    Python(&'static str),
    Node(&'static str),
    Rust(RustKind),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RustKind {
    /// The client crate's `PgStore` (begin, the body, complete).
    PgStore,
    /// The client crate's `RedisStore` (feature `redis`).
    RedisStore,
    /// The hand-written SELECT, INSERT, UPDATE (bench/src/workloads/calls.rs's).
    Naive,
}

pub struct System {
    /// Short and stable: names a row in the report's cross-references.
    pub id: &'static str,
    pub name: &'static str,
    pub lang: Lang,
    pub store: Store,
    pub runner: Runner,
    /// The row remembers a failure when asked to (the failure case is run on every row
    /// that has failure handling; `false` here means it has none at all to measure).
    pub failure_case: bool,
}

pub const SYSTEMS: &[System] = &[
    System {
        id: "py-ours",
        name: "ours: SQL API from psycopg 3",
        lang: Lang::Python,
        store: Store::PgExtension,
        runner: Runner::Python("sql"),
        failure_case: true,
    },
    System {
        id: "py-pkg-psycopg",
        name: "ours: `@idempotent` on a `def`, `Store` over a psycopg `ConnectionPool`",
        lang: Lang::Python,
        store: Store::PgExtension,
        runner: Runner::Python("pkg-psycopg"),
        failure_case: true,
    },
    System {
        id: "py-pkg-asyncpg",
        name: "ours: `@idempotent` on an `async def`, `AsyncStore` over an asyncpg pool",
        lang: Lang::Python,
        store: Store::PgExtension,
        runner: Runner::Python("pkg-asyncpg"),
        failure_case: true,
    },
    System {
        id: "py-sql-asyncpg",
        name: "ours: SQL API from asyncpg",
        lang: Lang::Python,
        store: Store::PgExtension,
        runner: Runner::Python("sql-asyncpg"),
        failure_case: true,
    },
    System {
        id: "py-powertools",
        name: "AWS Powertools `@idempotent_function`",
        lang: Lang::Python,
        store: Store::Redis,
        runner: Runner::Python("powertools"),
        failure_case: true,
    },
    System {
        id: "py-powertools-durable",
        name: "AWS Powertools `@idempotent_function`",
        lang: Lang::Python,
        store: Store::RedisDurable,
        runner: Runner::Python("powertools"),
        failure_case: true,
    },
    System {
        id: "py-naive",
        name: "naive: SELECT, INSERT, UPDATE (psycopg 3)",
        lang: Lang::Python,
        store: Store::PgExtension,
        runner: Runner::Python("naive"),
        failure_case: false,
    },
    System {
        id: "py-idemkit",
        name: "idemkit `@idempotent` on an `async def` (asyncpg)",
        lang: Lang::Python,
        store: Store::PgTable,
        runner: Runner::Python("idemkit"),
        failure_case: true,
    },
    System {
        id: "node-ours",
        name: "ours: SQL API from node-postgres",
        lang: Lang::Node,
        store: Store::PgExtension,
        runner: Runner::Node("sql"),
        failure_case: true,
    },
    System {
        id: "node-idempotency",
        name: "`@node-idempotency/core`",
        lang: Lang::Node,
        store: Store::Redis,
        runner: Runner::Node("node-idempotency"),
        failure_case: true,
    },
    System {
        id: "node-idempotency-durable",
        name: "`@node-idempotency/core`",
        lang: Lang::Node,
        store: Store::RedisDurable,
        runner: Runner::Node("node-idempotency"),
        failure_case: true,
    },
    System {
        id: "node-ours-express",
        name: "ours: SQL API in an express route, over HTTP",
        lang: Lang::Node,
        store: Store::PgExtension,
        runner: Runner::Node("sql-express"),
        failure_case: true,
    },
    System {
        id: "node-express-idempotency",
        name: "express-idempotency middleware, over HTTP",
        lang: Lang::Node,
        store: Store::Memory,
        runner: Runner::Node("express-idempotency"),
        failure_case: true,
    },
    System {
        id: "node-naive",
        name: "naive: SELECT, INSERT, UPDATE (node-postgres)",
        lang: Lang::Node,
        store: Store::PgExtension,
        runner: Runner::Node("naive"),
        failure_case: false,
    },
    System {
        id: "rust-pgstore",
        name: "ours: `PgStore`",
        lang: Lang::Rust,
        store: Store::PgExtension,
        runner: Runner::Rust(RustKind::PgStore),
        failure_case: true,
    },
    System {
        id: "rust-pgstore-portable",
        name: "ours: `PgStore`",
        lang: Lang::Rust,
        store: Store::PgPortable,
        runner: Runner::Rust(RustKind::PgStore),
        failure_case: true,
    },
    System {
        id: "rust-redisstore",
        name: "ours: `RedisStore`",
        lang: Lang::Rust,
        store: Store::Redis,
        runner: Runner::Rust(RustKind::RedisStore),
        failure_case: true,
    },
    System {
        id: "rust-redisstore-durable",
        name: "ours: `RedisStore`",
        lang: Lang::Rust,
        store: Store::RedisDurable,
        runner: Runner::Rust(RustKind::RedisStore),
        failure_case: true,
    },
    System {
        id: "rust-naive",
        name: "naive: SELECT, INSERT, UPDATE (tokio-postgres)",
        lang: Lang::Rust,
        store: Store::PgExtension,
        runner: Runner::Rust(RustKind::Naive),
        failure_case: false,
    },
];

/// Each peer beside the row of ours it is compared with: same language, and for the
/// express middleware the same HTTP route shape. Every Rust row of ours is compared with
/// the naive pattern. The Python package's rows stand beside the peer of their kind
/// (asyncio over asyncpg: idemkit; blocking: Powertools) and beside the SQL API by hand
/// from the same driver, whose calls they make.
pub const PAIRS: &[(&str, &str)] = &[
    ("py-ours", "py-powertools"),
    ("py-ours", "py-powertools-durable"),
    ("py-ours", "py-naive"),
    ("py-pkg-asyncpg", "py-idemkit"),
    ("py-pkg-asyncpg", "py-sql-asyncpg"),
    ("py-pkg-psycopg", "py-powertools"),
    ("py-pkg-psycopg", "py-powertools-durable"),
    ("py-pkg-psycopg", "py-ours"),
    ("node-ours", "node-idempotency"),
    ("node-ours", "node-idempotency-durable"),
    ("node-ours-express", "node-express-idempotency"),
    ("node-ours", "node-naive"),
    ("rust-pgstore", "rust-naive"),
    ("rust-pgstore-portable", "rust-naive"),
    ("rust-redisstore", "rust-naive"),
    ("rust-redisstore-durable", "rust-naive"),
];

pub fn by_id(id: &str) -> Option<&'static System> {
    SYSTEMS.iter().find(|s| s.id == id)
}
