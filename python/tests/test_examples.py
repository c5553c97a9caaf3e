"""The examples run as a user runs them (python examples/<file>.py <dsn>), by the
installed package, and show what they say."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


def run(name: str, dsn: str) -> str:
    done = subprocess.run([sys.executable, str(EXAMPLES / name), dsn], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.skipif(bool(os.environ.get("PGIDEM_THROUGH_POOLER")),
                    reason="through PgBouncer in transaction mode: the example's store "
                    "prepares its statements, as psycopg does by default (behind a pooler: "
                    "configure(dsn, prepare=False))")
def test_agent_tools_sends_one_email_and_charges_once(dsn: str) -> None:
    for _ in range(2):  # a second run starts afresh too
        out = run("agent_tools.py", dsn)
        assert "emails in the outbox: 1 " in out
        assert "charges at the provider: 1 " in out
        assert "found {'charge_id': 1}" in out, "the takeover found the dead attempt's charge"
        assert out.count("dies before recording it") == 1
