#!/usr/bin/env python3
"""Writes the figures section of docs/reliability.md from the fault suite's tallies; the
hand-written part above it stays as it is.

    faults_report.py <report.tsv> <seconds> <scale> <docs/reliability.md>

Each line of report.tsv (tests/faults/src/report.rs): scenario, backend, server version,
trials, faults, operations, indeterminate, violations of I1..I5. Lines of one scenario,
backend and version are summed (a scenario may tally several tests).
"""
import sys
from collections import OrderedDict

path, seconds, scale, page = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
HEADING = "## Figures of the last full run"
rows = OrderedDict()
for line in open(path, encoding="utf-8"):
    f = line.rstrip("\n").split("\t")
    if len(f) < 12:
        continue
    key = (f[0], f[1], f[2])
    nums = [int(x) for x in f[3:12]]
    rows[key] = [a + b for a, b in zip(rows.get(key, [0] * 9), nums)]

kept = open(page, encoding="utf-8").read().split(HEADING)[0].rstrip("\n")
out = [kept, "", HEADING, ""]
line = out.append
line(f"Written by `scripts/faults.sh` (trials x{scale} the test command's; {seconds // 60} min "
      f"{seconds % 60} s). The goal is 0 in every violation column.")
line("")
line("| scenario | backend | PostgreSQL | trials | faults injected | operations | unknown outcome | I1 | I2 | I3 | I4 | I5 |")
line("|---|---|---|---|---|---|---|---|---|---|---|---|")
for (scenario, backend, version), n in rows.items():
    line(f"| {scenario} | {backend} | {version} | " + " | ".join(str(x) for x in n) + " |")

with open(page, "w", encoding="utf-8") as f:
    f.write("\n".join(out) + "\n")
