#!/usr/bin/env bash
# Grows a PL/Proxy proxy of pg_idempotency (sql/proxy/) from N to 2N partitions while calls
# go on, without losing a record or running a call twice (docs/scaling.md, "Resharding").
#
#   scripts/reshard.sh <proxy conninfo> <partition conninfo> ...
#
# The partitions are all 2N of them, in order: the N the proxy has now (as
# idem_proxy_configure was given them), then N new ones with the same backend installed
# and no records. Every conninfo is used as given, both by this script (as the role PGUSER
# names: a superuser) and, for the partitions, by the proxy. psql is $PSQL, or psql on the
# PATH.
#
# How (each step can be seen in the databases, none waits for a time):
#   1. each new partition p + N gets the guard (sql/proxy/reshard_guard.sql) for its keys;
#   2. each old partition p gets the guard too: from its commit on, a write of a row whose
#      key moves to p + N is refused with 40001 (the caller retries) and the moving rows
#      are frozen; they are copied to p + N, with every scope's policy;
#   3. the proxy is configured with the 2N partitions: calls of a moved key go to p + N,
#      which hands out fences above p's (each partition's range, idem_proxy_configure);
#   4. once no transaction of the proxy that began before the switch is open, the moved
#      rows' frozen copies are deleted from the old partitions, and the guard keeps
#      refusing a claim of a key that is not the partition's.
# One proxy database: with several in front of the same partitions, switch the others
# between steps 3 and 4 (idem_proxy_configure with the same list).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PSQL="${PSQL:-psql}"
GUARD="$ROOT/sql/proxy/reshard_guard.sql"

die() { printf 'reshard: %s\n' "$*" >&2; exit 1; }
say() { printf 'reshard: %s\n' "$*" >&2; }
q() { "$PSQL" -X -q -v ON_ERROR_STOP=1 "$@"; }
value() { "$PSQL" -X -q -v ON_ERROR_STOP=1 -At "$@"; }

[ $# -ge 3 ] || die "usage: $0 <proxy conninfo> <partition conninfo> ... (the N partitions now, then N new ones)"
proxy="$1"; shift
parts=("$@")
total=${#parts[@]}
n=$((total / 2))
(( total % 2 == 0 && (n & (n - 1)) == 0 && total <= 512 )) ||
    die "$total partitions given: give the N partitions the proxy has (a power of two) and N new ones, 2N at most 512"

# The proxy must have exactly the first N, in that order.
current=$(value "$proxy" -c "SELECT string_agg(substr(o.v, strpos(o.v, '=') + 1), E'\n' ORDER BY
                                   substr(o.v, 2, strpos(o.v, '=') - 2)::int)
                             FROM pg_foreign_server s, unnest(s.srvoptions) AS o(v)
                             WHERE s.srvname = 'pg_idempotency' AND o.v ~ '^p[0-9]+='")
expected=$(printf '%s\n' "${parts[@]:0:n}")
[ "$current" = "$expected" ] ||
    die "the proxy's partitions are not the first $n given, in order. The proxy has:"$'\n'"$current"
for ((p = n; p < total; p++)); do
    rows=$(value "${parts[p]}" -c "SELECT count(*) FROM idempotency.records") ||
        die "new partition $p (${parts[p]}) has no pg_idempotency installed"
    [ "$rows" = 0 ] || die "new partition $p (${parts[p]}) already holds $rows records"
    policies=$(value "${parts[p]}" -c "SELECT count(*) FROM idempotency.policies")
    [ "$policies" = 0 ] || die "new partition $p (${parts[p]}) already holds $policies policies"
done

guard() {  # guard <conninfo> <partition> <events>
    q "$1" -1 -f "$GUARD" -c "CREATE OR REPLACE TRIGGER idem_reshard_guard BEFORE $3
        ON idempotency.records FOR EACH ROW EXECUTE FUNCTION idempotency_reshard.guard('$2', '$total')"
}
moving="idempotency_reshard.routing_hash(r.scope, r.key) & ($total - 1)"

say "1. the guard on the $n new partitions"
for ((p = n; p < total; p++)); do guard "${parts[p]}" "$p" "INSERT OR UPDATE OR DELETE"; done

say "2. the moving rows of each old partition frozen and copied"
columns=$(value "${parts[0]}" -c "SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum)
                                   FROM pg_attribute WHERE attrelid = 'idempotency.records'::regclass
                                   AND attnum > 0 AND NOT attisdropped")
for ((p = 0; p < n; p++)); do
    guard "${parts[p]}" "$p" "INSERT OR UPDATE OR DELETE"
    value "${parts[p]}" -c "\\copy (SELECT $columns FROM idempotency.records r WHERE $moving <> $p) TO STDOUT" |
        q "${parts[p + n]}" -c "\\copy idempotency.records ($columns) FROM STDIN"
    q "${parts[0]}" -c "\\copy idempotency.policies TO STDOUT" | q "${parts[p + n]}" -c "\\copy idempotency.policies FROM STDIN"
    say "   partition $p: $(value "${parts[p + n]}" -c "SELECT count(*) FROM idempotency.records") records to partition $((p + n))"
done

say "3. the proxy switched to $total partitions"
array=$(printf "%s\n" "${parts[@]}" | sed "s/'/''/g; s/.*/'&'/" | paste -sd, -)
value "$proxy" -c "SELECT count(*) FROM idem_proxy_configure(ARRAY[$array])" >/dev/null
switched=$(value "$proxy" -c "SELECT clock_timestamp()")

# A call routes by the configuration its proxy session had when its transaction began (PL/Proxy
# reads the server's options through the catalog caches): once every transaction of the proxy
# that began before the switch has ended, no call can reach a moved row on its old partition.
say "4. the frozen copies removed once no proxy transaction from before the switch is open"
until [ "$(value "$proxy" -c "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
               AND pid <> pg_backend_pid() AND xact_start < '$switched'")" = 0 ]; do
    value "$proxy" -c "SELECT pg_sleep(0.05)" >/dev/null
done
for ((p = 0; p < n; p++)); do
    removed=$(value "${parts[p]}" -1 -c "SET LOCAL idempotency_reshard.cleanup = 'on'" \
        -c "WITH gone AS (DELETE FROM idempotency.records r WHERE $moving <> $p RETURNING 1) SELECT count(*) FROM gone")
    # From now on a claim of a key that is not this partition's (a proxy configured wrongly) is
    # refused; no row of another partition's is left to update.
    guard "${parts[p]}" "$p" "INSERT"
    say "   partition $p: $removed moved rows removed"
done
say "done: $total partitions"
