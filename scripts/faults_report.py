#!/usr/bin/env python3
"""Writes the figures section of docs/reliability.md from the fault suite's tallies; the
hand-written part above it stays as it is.

    faults_report.py <report.tsv> <seconds> <scale> <docs/reliability.md>

Each line of report.tsv (tests/faults/src/report.rs): scenario, backend, server version,
trials, faults, operations, indeterminate, violations of I1..I6, where I5 (the expiry) is
`-` for a test that had no record monitor (nothing checked it). Lines of one scenario,
backend and version are summed (a scenario may tally several tests); I5 stays `—` only
if none of them checked it.
"""
import sys
from collections import OrderedDict

path, seconds, scale, page = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
HEADING = "## Figures of the last full run"
# Scenarios whose violations are the documented risk of the setup they run, not a product
# failure: marked in the table and explained under it.
EXPECTED = {
    "F9 async": "asynchronous replication: a failover loses what the standby had not "
                "received; the violations counted are those lost acknowledgements, found "
                "as the docs warn (F9 above). Expected, not a product failure.",
}
COLUMNS = 10  # trials, faults, operations, unknown outcome, I1..I6


def add(a, b):
    """Sums two figures; None (not checked) counts as nothing unless both are None."""
    if a is None or b is None:
        return b if a is None else a
    return a + b


rows = OrderedDict()
for line in open(path, encoding="utf-8"):
    f = line.rstrip("\n").split("\t")
    if len(f) < 3 + COLUMNS:
        continue
    key = (f[0], f[1], f[2])
    nums = [None if x == "-" else int(x) for x in f[3:3 + COLUMNS]]
    rows[key] = [add(a, b) for a, b in zip(rows.get(key, [None] * COLUMNS), nums)]

kept = open(page, encoding="utf-8").read().split(HEADING)[0].rstrip("\n")
out = [kept, "", HEADING, ""]
line = out.append
line(f"Written by `scripts/faults.sh` (trials x{scale} the test command's; {seconds // 60} min "
      f"{seconds % 60} s). The goal is 0 in every violation column, except in rows marked † "
      f"(explained under the table).")
line("")
line("| scenario | backend | PostgreSQL | trials | faults injected | operations | unknown outcome | I1 | I2 | I3 | I4 | I5 | I6 |")
line("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for (scenario, backend, version), n in rows.items():
    cells = ["—" if x is None else str(x) for x in n]
    mark = " †" if scenario in EXPECTED else ""
    line(f"| {scenario}{mark} | {backend} | {version} | " + " | ".join(cells) + " |")
line("")
if any(key[1] in ("MemoryStore", "RedisStore") for key in rows):
    line("F11, F12 and F13 run through the Rust client: their operations are the store operations a "
         "call made, and a row of MemoryStore or RedisStore names the store in the backend "
         "column and the Redis version (or —) in the PostgreSQL one (summed over the run's "
         "passes: they do not depend on the backend or the version).")
    line("")
for scenario, why in EXPECTED.items():
    if any(key[0] == scenario for key in rows):
        line(f"† {scenario}: {why}")
        line("")
line("I5 (the expiry) is checked only where a record monitor ran (—: not checked).")

with open(page, "w", encoding="utf-8") as f:
    f.write("\n".join(out) + "\n")
