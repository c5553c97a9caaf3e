#!/usr/bin/env bash
# A PL/Proxy proxy database in front of partition databases on one private cluster, each
# partition with a backend of the SQL API installed: what the test command runs the
# client's behaviour suite through (docs/scaling.md says how to set one up for real).
#
#   scripts/sharded.sh <pg15> <extension|portable> <proxy database> <partitions>
#
# The partitions are <proxy database>_p0, _p1, ...; every one of them is made afresh.
set -euo pipefail
source "$(dirname "$0")/env.sh"

version="${1:?usage: $0 <version> <backend> <proxy database> <partitions>}"
backend="${2:?backend}"; proxy="${3:?proxy database}"; n="${4:?partition count}"
psql=("$(bindir_of "$version")/psql" -X -q -v ON_ERROR_STOP=1)

partitions=()
for ((p = 0; p < n; p++)); do
    fresh_database "$version" "${proxy}_p$p" "$backend"
    # The extension writes the counts of answers that write nothing (replays, waits,
    # refusals) with the backend's next call after count_flush_interval_ms; PL/Proxy's
    # connection to a partition may make no next call, so the suites, which read exact
    # counts through the layer, have each answer written at once (docs/scaling.md).
    if [ "$backend" = extension ]; then
        "${psql[@]}" "$(conninfo "$version") dbname=postgres" \
            -c "ALTER DATABASE ${proxy}_p$p SET pg_idempotency.count_flush_interval_ms = 0"
    fi
    # PL/Proxy connects as the calling role when the string names no user.
    partitions+=("'host=$(socket_dir "$version") port=$(port_of "$version") dbname=${proxy}_p$p'")
done
"${psql[@]}" "$(conninfo "$version") dbname=postgres" \
    -c "DROP DATABASE IF EXISTS $proxy WITH (FORCE)" -c "CREATE DATABASE $proxy"
"${psql[@]}" "$(conninfo "$version") dbname=$proxy" --single-transaction \
    -f "$ROOT/sql/proxy/pg_idempotency_proxy.sql"
"${psql[@]}" "$(conninfo "$version") dbname=$proxy" -At \
    -c "SELECT count(*) || ' partitions' FROM idem_proxy_configure(ARRAY[$(IFS=,; echo "${partitions[*]}")])"
