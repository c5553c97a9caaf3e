"""Fixtures of the driver tests: the table the exactly-once functions write to."""

from __future__ import annotations

import psycopg
import pytest
from drivers_kinds import CREATE_WRITES, WRITES


@pytest.fixture(scope="session")
def writes_table(dsn: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(CREATE_WRITES)
    return WRITES
