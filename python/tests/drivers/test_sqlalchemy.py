"""What is SQLAlchemy's own: the Session's state after the store's calls, ORM objects the
function adds, a scoped_session, the dialects it runs on, and what an Engine cannot do."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from drivers_kinds import Write, psycopg_args, sa_url
from drivers_support import writes
from sqlalchemy import Engine, create_engine, select
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session, scoped_session, sessionmaker

from pg_idempotency import (
    AsyncStore,
    InvalidArgument,
    Mismatch,
    Store,
    StoreUnavailable,
    idempotent,
)

pytestmark = pytest.mark.usefixtures("writes_table")


@pytest.fixture
def engine(dsn: str) -> Iterator[Engine]:
    e = create_engine(sa_url("psycopg"), connect_args=psycopg_args())
    yield e
    e.dispose()


def test_an_idle_session_commits_each_call_and_stays_idle(engine: Engine, scope: str,
                                                            store: Store) -> None:
    with Session(engine) as session:
        claim = Store(session).begin(scope, "k", ttl=60)
        assert not session.in_transaction()
        assert claim.fence is not None
        found = store.lookup(scope, "k")  # another connection sees it: committed
        assert found is not None and found.state == "in_progress"


def test_a_call_in_the_sessions_transaction_is_rolled_back_with_it(
        engine: Engine, scope: str, store: Store) -> None:
    with Session(engine) as session:
        session.begin()
        Store(session).begin(scope, "k", ttl=60)
        assert session.in_transaction()
        assert store.lookup(scope, "k") is None
        session.rollback()
    assert store.lookup(scope, "k") is None


def test_orm_objects_the_function_adds_are_written_with_the_call(
        engine: Engine, scope: str, sql: psycopg.Connection[Any]) -> None:
    runs: list[str] = []

    @idempotent(scope=scope, exactly_once="session", key_fields=["item"])
    def call(session: Session, item: str) -> str:
        session.add(Write(scope=scope, value=item))  # flushed when the function's block ends
        runs.append(item)
        return item

    with Session(engine) as session:
        assert call(session, "a") == "a"
        assert call(session, "a") == "a"
        assert session.scalars(select(Write.value).where(Write.scope == scope)).all() == ["a"]
    assert runs == ["a"] and writes(sql, scope) == ["a"]


def test_a_refusal_inside_the_sessions_transaction_leaves_it_usable(
        engine: Engine, scope: str, sql: psycopg.Connection[Any]) -> None:
    @idempotent(scope=scope, exactly_once="session", key_fields=["order"],
                fingerprint="input")
    def call(session: Session, order: str, qty: int) -> int:
        session.add(Write(scope=scope, value=f"{order}x{qty}"))
        return qty

    with Session(engine) as session:
        assert call(session, "o1", 1) == 1
        session.add(Write(scope=scope, value="outer"))
        session.flush()
        with pytest.raises(Mismatch):
            call(session, "o1", 2)  # refused in a savepoint: the transaction goes on
        session.commit()
    assert writes(sql, scope) == ["o1x1", "outer"]


def test_a_scoped_session_is_the_current_one(engine: Engine, scope: str, store: Store) -> None:
    registry = scoped_session(sessionmaker(engine))
    try:
        s = Store(registry)
        claim = s.begin(scope, "k", ttl=60)
        assert claim.fence is not None
        assert s.complete(scope, "k", claim.fence, {"ok": 1}) == "succeeded"
        assert not registry().in_transaction()
    finally:
        registry.remove()


def test_other_dialects_are_refused_with_what_to_use() -> None:
    with pytest.raises(InvalidArgument, match=r"sqlite\+pysqlite") as refused:
        Store(create_engine("sqlite://"))
    assert refused.value.hint and "postgresql+psycopg://" in refused.value.hint


def test_blocking_and_asyncio_objects_go_to_their_own_store(engine: Engine) -> None:
    with pytest.raises(InvalidArgument, match="AsyncStore cannot use") as refused:
        AsyncStore(engine)
    assert refused.value.hint and "Store" in refused.value.hint
    async_engine = create_async_engine(sa_url("asyncpg"))
    with pytest.raises(InvalidArgument, match="Store cannot use a SQLAlchemy AsyncEngine"):
        Store(async_engine)


def test_exactly_once_needs_a_session_not_an_engine(engine: Engine, scope: str) -> None:
    @idempotent(scope=scope, exactly_once="session")
    def call(session: Any, item: str) -> str:
        return item

    with pytest.raises(InvalidArgument, match="not an Engine") as refused:
        call(engine, "a")
    assert refused.value.hint and "Session" in refused.value.hint


def test_asyncio_without_greenlet_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "greenlet", None)  # as if it were not installed
    with pytest.raises(InvalidArgument, match="greenlet") as refused:
        AsyncStore(create_async_engine(sa_url("asyncpg")))
    assert refused.value.hint == 'pip install "sqlalchemy[asyncio]"'


async def test_an_idle_async_session_commits_each_call(scope: str, store: Store) -> None:
    engine = create_async_engine(sa_url("asyncpg"))
    try:
        async with AsyncSession(engine) as session:
            claim = await AsyncStore(session).begin(scope, "k", ttl=60)
            assert claim.fence is not None and not session.in_transaction()
        found = store.lookup(scope, "k")
        assert found is not None and found.state == "in_progress"
    finally:
        await engine.dispose()


def test_a_lost_connection_is_store_unavailable_and_the_session_recovers(
        engine: Engine, scope: str, sql: psycopg.Connection[Any]) -> None:
    with Session(engine) as session:
        session.begin()
        pid = session.connection().exec_driver_sql("SELECT pg_backend_pid()").scalar()
        sql.execute("SELECT pg_terminate_backend(%s, 60000)", (pid,))
        with pytest.raises(StoreUnavailable):
            Store(session).begin(scope, "k")
        session.rollback()
        assert Store(session).begin(scope, "k").outcome == "claimed"
