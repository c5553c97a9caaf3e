"""The package's tests run against a real PostgreSQL with the SQL API installed (the
extension or the portable variant): PGIDEM_DSN names the database (scripts/test-python.sh
makes a fresh one per version and backend), PGIDEM_BACKEND says which backend it holds.
Without PGIDEM_DSN every test that needs the database is skipped, with that reason."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator

import psycopg
import pytest

from pg_idempotency import AsyncStore, Store

DSN = os.environ.get("PGIDEM_DSN")
BACKEND = os.environ.get("PGIDEM_BACKEND", "extension")
# Behind a pooler in transaction mode no statement is prepared (PGIDEM_STATEMENTS=unnamed).
PREPARE = os.environ.get("PGIDEM_STATEMENTS") != "unnamed"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if DSN:
        return
    skip = pytest.mark.skip(reason="PGIDEM_DSN is not set: no database to test against "
                            "(scripts/test-python.sh sets it)")
    for item in items:
        if "needs_db" not in item.keywords and "dsn" not in getattr(item, "fixturenames", ()):
            continue
        item.add_marker(skip)


@pytest.fixture(scope="session")
def dsn() -> str:
    assert DSN
    return DSN


@pytest.fixture
def scope(request: pytest.FixtureRequest) -> str:
    """A scope no other test (or earlier run) uses."""
    return f"py-{request.node.name[:60]}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def store(dsn: str) -> Iterator[Store]:
    s = Store(dsn, prepare=PREPARE)
    yield s
    s.close()


@pytest.fixture
async def astore(dsn: str) -> AsyncIterator[AsyncStore]:
    s = AsyncStore(dsn, prepare=PREPARE)
    yield s
    await s.close()


@pytest.fixture
def conn(dsn: str) -> Iterator[psycopg.Connection]:
    """A connection of its own (not autocommit), for transactions and inspection."""
    kw = {} if PREPARE else {"prepare_threshold": None}
    with psycopg.connect(dsn, **kw) as c:
        yield c


@pytest.fixture
def sql(dsn: str) -> Iterator[psycopg.Connection]:
    """An autocommit connection to look at the records with plain SQL."""
    kw = {} if PREPARE else {"prepare_threshold": None}
    with psycopg.connect(dsn, autocommit=True, **kw) as c:
        yield c
