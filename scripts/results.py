#!/usr/bin/env python3
"""Per-test results of the test command, in one file, and the summary line.

Every layer of scripts/test.sh appends one line per test to the file named by
PGIDEM_RESULTS:  <status> TAB <layer> TAB <test> TAB <reason>
where status is  pass | fail | skip | skip-missing.

  skip          the test does not apply here (the worker test on the portable variant,
                extension-only golden files, pg_cron on the embedded PostgreSQL 18)
  skip-missing  something setup installs is missing (no root, no Redis, no PostgreSQL 15);
                under CI (CI=true) such a skip counts as a failure

  results.py libtest <log> <layer> [<skips file>]   cargo test / cargo pgrx test output
  results.py regress <log> <layer>                  pg_regress / pg_isolation_regress output
  results.py junit <xml> <layer>                    JUnit XML (pytest, node --test)
  results.py add <status> <layer> <test> [reason]   one line by hand
  results.py summary                                the skips, the failures, one count line;
                                                    exits 1 on a failure
"""

import os
import re
import sys
import xml.etree.ElementTree as ET
from collections import Counter

STATUSES = ("pass", "fail", "skip", "skip-missing")


def results_file():
    path = os.environ.get("PGIDEM_RESULTS")
    if not path:
        sys.exit("results.py: PGIDEM_RESULTS is not set")
    return path


def clean(text):
    return " ".join(str(text).split())


def append(lines):
    with open(results_file(), "a", encoding="utf-8") as f:
        for status, layer, test, reason in lines:
            assert status in STATUSES, status
            f.write(f"{status}\t{clean(layer)}\t{clean(test)}\t{clean(reason)}\n")


def read_skips(path):
    """Skips a Rust test recorded itself (tests/src/skip.rs): (binary, test) -> (status, reason)."""
    skips = {}
    if path and os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                parts = line.rstrip("\n").split("\t")
                if len(parts) == 4:
                    status, binary, test, reason = parts
                    skips[(binary, test)] = (status, reason)
    return skips


# cargo prints "Running tests/operations.rs (target/debug/deps/operations-0123abcd)" before each
# binary's results, and "Doc-tests canon" before doc tests.
RUNNING = re.compile(r"^\s*Running (?:.* )?\((?:.*/)?([^/()]+)\)\s*$")
DOCTESTS = re.compile(r"^\s*Doc-tests (\S+)")
LIBTEST = re.compile(r"^test (.+?) \.\.\. (ok|FAILED|ignored(?:, (.*))?)\s*$")


def parse_libtest(log, layer, skips_path=None):
    skips = read_skips(skips_path)
    binary = "?"
    out = []
    with open(log, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = RUNNING.match(line) or DOCTESTS.match(line)
            if m:
                binary = m.group(1)
                continue
            m = LIBTEST.match(line.rstrip("\n"))
            if not m:
                continue
            test, verdict = m.group(1), m.group(2)
            name = f"{re.sub(r'-[0-9a-f]{16}$', '', binary)}: {test}"
            if verdict == "ok":
                skip = skips.get((binary, test))
                if skip:
                    out.append((skip[0], layer, name, skip[1]))
                else:
                    out.append(("pass", layer, name, ""))
            elif verdict == "FAILED":
                out.append(("fail", layer, name, ""))
            else:
                out.append(("skip", layer, name, m.group(3) or "#[ignore]"))
    append(out)


# pg_regress of PostgreSQL 16+ prints TAP ("ok 3 - name  12 ms", "not ok 4 - name");
# PostgreSQL 15 prints "test name ... ok 12 ms" (or " name ... FAILED" inside a group).
TAP = re.compile(r"^(not ok|ok)\s+\d+\s+[-+]\s+(\S+)")
OLD = re.compile(r"^(?:test\s+|\s+)(\S+)\s+\.\.\.\s+(ok|FAILED|failed|failed \(ignored\))\b")


def parse_regress(log, layer):
    out = []
    with open(log, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = TAP.match(line)
            if m:
                out.append(("pass" if m.group(1) == "ok" else "fail", layer, m.group(2), ""))
                continue
            m = OLD.match(line)
            if m:
                out.append(("pass" if m.group(2) == "ok" else "fail", layer, m.group(1), ""))
    append(out)


def parse_junit(xml, layer):
    out = []
    root = ET.parse(xml).getroot()
    for case in root.iter("testcase"):
        name = case.get("name", "?")
        cls = case.get("classname")
        if cls and cls != name:
            name = f"{cls}: {name}"
        if case.find("failure") is not None or case.find("error") is not None:
            out.append(("fail", layer, name, ""))
        elif case.find("skipped") is not None:
            s = case.find("skipped")
            out.append(("skip", layer, name, s.get("message") or s.text or "skipped"))
        else:
            out.append(("pass", layer, name, ""))
    append(out)


def summary():
    ci = os.environ.get("CI", "").lower() == "true"
    rows = []
    path = results_file()
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            rows = [l.rstrip("\n").split("\t") for l in f if l.strip()]
    counts = Counter(r[0] for r in rows)
    # Skips grouped by layer and reason: one line per reason, with the tests it covers.
    groups = {}
    for status, layer, test, reason in (r for r in rows if r[0].startswith("skip")):
        groups.setdefault((status, layer, reason), []).append(test)
    if groups:
        print("\nskipped:")
        for (status, layer, reason), tests in groups.items():
            mark = " (unexpected under CI)" if ci and status == "skip-missing" else ""
            print(f"  {layer}: {len(tests)} skipped: {reason}{mark}")
            print(f"      {', '.join(tests)}")
    fails = [r for r in rows if r[0] == "fail"]
    if fails:
        print("\nfailed:")
        for _, layer, test, reason in fails:
            print(f"  {layer}: {test}" + (f": {reason}" if reason else ""))
    failed = counts["fail"] + (counts["skip-missing"] if ci else 0)
    skipped = counts["skip"] + counts["skip-missing"]
    print(f"\n{counts['pass']} passed, {failed} failed, {skipped} skipped")
    if ci and counts["skip-missing"]:
        print(f"CI: {counts['skip-missing']} skipped for a missing part that setup installs: counted as failed")
    return 1 if failed else 0


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    cmd, args = argv[1], argv[2:]
    if cmd == "libtest" and len(args) in (2, 3):
        parse_libtest(*args)
    elif cmd == "regress" and len(args) == 2:
        parse_regress(*args)
    elif cmd == "junit" and len(args) == 2:
        parse_junit(*args)
    elif cmd == "add" and len(args) in (3, 4):
        append([(args[0], args[1], args[2], args[3] if len(args) == 4 else "")])
    elif cmd == "summary" and not args:
        return summary()
    else:
        sys.exit(__doc__)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
