"""The callers' connections the exactly-once tests run over, one class per kind: a psycopg
Connection (blocking and asyncio), an asyncpg Connection, a SQLAlchemy Session, Connection
and AsyncSession. Each opens a connection named by its application_name (so that a test
finds its backend in pg_stat_activity), writes a row the way its users do, and begins,
commits or rolls back the caller's own transaction. Every method is awaited: a blocking
kind runs in a thread, as blocking code does beside an event loop."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from sqlalchemy import URL, BigInteger, NullPool, String, create_engine, text
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from pg_idempotency import AsyncStore, Store, idempotent

DSN = os.environ.get("PGIDEM_DSN", "")
PREPARE = os.environ.get("PGIDEM_STATEMENTS") != "unnamed"
WRITES = "py_drivers_writes"
# A statement that conflicts with another session's update of the row: a serialization
# failure under REPEATABLE READ.
TOUCH = f"UPDATE {WRITES} SET value = value WHERE scope = {{}} AND value = 'row'"
CREATE_WRITES = (f"CREATE TABLE IF NOT EXISTS {WRITES} (id bigint GENERATED ALWAYS AS "
                 "IDENTITY PRIMARY KEY, scope text NOT NULL, value text NOT NULL)")


class Base(DeclarativeBase):
    pass


class Write(Base):
    """The function's own write, as an ORM object (the Session kinds)."""

    __tablename__ = WRITES
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    scope: Mapped[str] = mapped_column(String)
    value: Mapped[str] = mapped_column(String)


def _parts() -> dict[str, Any]:
    return conninfo_to_dict(DSN)


def sa_url(driver: str) -> URL:
    p = _parts()
    return URL.create(f"postgresql+{driver}", username=p.get("user"),
                      password=p.get("password"), host=p.get("host"),
                      port=int(p["port"]) if p.get("port") else None,
                      database=p.get("dbname"))


def psycopg_args(app: str | None = None, isolation: str | None = None) -> dict[str, Any]:
    kw: dict[str, Any] = {} if PREPARE else {"prepare_threshold": None}
    if app:
        kw["application_name"] = app
    if isolation:
        kw["options"] = "-c default_transaction_isolation=" + isolation.replace(" ", "\\ ")
    return kw


def asyncpg_args(app: str | None = None, isolation: str | None = None) -> dict[str, Any]:
    """asyncpg.connect's and create_pool's arguments for the test database."""
    p = _parts()
    kw: dict[str, Any] = {"host": p.get("host"), "user": p.get("user"),
                          "password": p.get("password"), "database": p.get("dbname")}
    if p.get("port"):
        kw["port"] = int(p["port"])
    if not PREPARE:
        kw["statement_cache_size"] = 0
    kw.update(_server_settings(app, isolation))
    return kw


def sa_asyncpg_connect_args(app: str | None = None,
                            isolation: str | None = None) -> dict[str, Any]:
    kw: dict[str, Any] = {}
    if not PREPARE:
        kw.update(statement_cache_size=0, prepared_statement_cache_size=0)
    kw.update(_server_settings(app, isolation))
    return kw


def _server_settings(app: str | None, isolation: str | None) -> dict[str, Any]:
    settings = {}
    if app:
        settings["application_name"] = app
    if isolation:
        settings["default_transaction_isolation"] = isolation
    return {"server_settings": settings} if settings else {}


def in_thread(fn: Callable[..., Any], *args: Any) -> Awaitable[Any]:
    return asyncio.to_thread(fn, *args)


class Kind:
    name = ""
    is_async = False

    def connect(self, app: str, isolation: str | None = None) -> Any:
        """A connection named `app`; `isolation`: its transactions' default level."""
        raise NotImplementedError

    def store(self, h: Any) -> Any:
        return AsyncStore(h) if self.is_async else Store(h)

    async def start(self, h: Any, scope: str, isolation: str | None = None) -> None:
        """The caller's transaction begins, under `isolation`, with a write of its own."""
        raise NotImplementedError

    async def commit(self, h: Any) -> None:
        await in_thread(h.commit)

    async def rollback(self, h: Any) -> None:
        await in_thread(h.rollback)

    async def call(self, fn: Callable[..., Any], h: Any, item: str) -> Any:
        if self.is_async:
            return await fn(h, item)
        return await in_thread(fn, h, item)


class PsycopgKind(Kind):
    name = "psycopg"

    @asynccontextmanager
    async def connect(self, app: str,
                      isolation: str | None = None) -> AsyncIterator[psycopg.Connection[Any]]:
        conn = await in_thread(lambda: psycopg.connect(DSN, **psycopg_args(app, isolation)))
        try:
            yield conn
        finally:
            await in_thread(conn.close)

    def write(self, h: psycopg.Connection[Any], scope: str, value: str) -> None:
        h.execute(f"INSERT INTO {WRITES} (scope, value) VALUES (%s, %s)", (scope, value))

    def touch(self, h: psycopg.Connection[Any], scope: str) -> None:
        h.execute(TOUCH.format("%s"), (scope,))

    async def start(self, h: Any, scope: str, isolation: str | None = None) -> None:
        if isolation:
            h.isolation_level = psycopg.IsolationLevel[isolation.upper().replace(" ", "_")]
        await in_thread(self.write, h, scope, "outer")


class PsycopgAutocommitKind(PsycopgKind):
    """An autocommit psycopg Connection: the caller's transaction is conn.transaction()."""

    name = "psycopg_autocommit"

    def __init__(self) -> None:
        self._tx: dict[int, Any] = {}

    @asynccontextmanager
    async def connect(self, app: str,
                      isolation: str | None = None) -> AsyncIterator[psycopg.Connection[Any]]:
        conn = await in_thread(lambda: psycopg.connect(DSN, autocommit=True,
                                                       **psycopg_args(app, isolation)))
        try:
            yield conn
        finally:
            await in_thread(conn.close)

    async def start(self, h: Any, scope: str, isolation: str | None = None) -> None:
        def go() -> None:
            if isolation:
                h.isolation_level = psycopg.IsolationLevel[isolation.upper().replace(" ", "_")]
            tx = self._tx[id(h)] = h.transaction()
            tx.__enter__()  # what `with conn.transaction():` does, held open across calls
            self.write(h, scope, "outer")

        await in_thread(go)

    async def commit(self, h: Any) -> None:
        await in_thread(self._tx.pop(id(h)).__exit__, None, None, None)

    async def rollback(self, h: Any) -> None:
        rollback = psycopg.Rollback()
        await in_thread(self._tx.pop(id(h)).__exit__, psycopg.Rollback, rollback, None)


class SessionKind(Kind):
    """A SQLAlchemy Session over psycopg; the function's write is an ORM object, flushed."""

    name = "sa_session"

    @asynccontextmanager
    async def connect(self, app: str,
                      isolation: str | None = None) -> AsyncIterator[Session]:
        engine = create_engine(sa_url("psycopg"), poolclass=NullPool,
                               connect_args=psycopg_args(app, isolation))
        session = Session(engine)
        try:
            yield session
        finally:
            await in_thread(session.close)
            await in_thread(engine.dispose)

    def write(self, h: Session, scope: str, value: str) -> None:
        h.add(Write(scope=scope, value=value))
        h.flush()

    def touch(self, h: Session, scope: str) -> None:
        h.execute(text(TOUCH.format(":s")), {"s": scope})

    async def start(self, h: Any, scope: str, isolation: str | None = None) -> None:
        def go() -> None:
            if isolation:
                h.connection(execution_options={"isolation_level": isolation.upper()})
            self.write(h, scope, "outer")

        await in_thread(go)


class SaConnectionKind(Kind):
    """A SQLAlchemy Connection over psycopg; Core statements."""

    name = "sa_connection"

    @asynccontextmanager
    async def connect(self, app: str,
                      isolation: str | None = None) -> AsyncIterator[Any]:
        engine = create_engine(sa_url("psycopg"), poolclass=NullPool,
                               connect_args=psycopg_args(app, isolation))
        conn = await in_thread(engine.connect)
        try:
            yield conn
        finally:
            await in_thread(conn.close)
            await in_thread(engine.dispose)

    def write(self, h: Any, scope: str, value: str) -> None:
        h.execute(text(f"INSERT INTO {WRITES} (scope, value) VALUES (:s, :v)"),
                  {"s": scope, "v": value})

    def touch(self, h: Any, scope: str) -> None:
        h.execute(text(TOUCH.format(":s")), {"s": scope})

    async def start(self, h: Any, scope: str, isolation: str | None = None) -> None:
        def go() -> None:
            if isolation:
                h.execution_options(isolation_level=isolation.upper())
            h.begin()
            self.write(h, scope, "outer")

        await in_thread(go)


class AsyncPsycopgKind(Kind):
    name = "psycopg_async"
    is_async = True

    @asynccontextmanager
    async def connect(self, app: str,
                      isolation: str | None = None) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        conn = await psycopg.AsyncConnection.connect(DSN, **psycopg_args(app, isolation))
        try:
            yield conn
        finally:
            await conn.close()

    async def write(self, h: Any, scope: str, value: str) -> None:
        await h.execute(f"INSERT INTO {WRITES} (scope, value) VALUES (%s, %s)", (scope, value))

    async def touch(self, h: Any, scope: str) -> None:
        await h.execute(TOUCH.format("%s"), (scope,))

    async def start(self, h: Any, scope: str, isolation: str | None = None) -> None:
        if isolation:
            await h.set_isolation_level(
                psycopg.IsolationLevel[isolation.upper().replace(" ", "_")])
        await self.write(h, scope, "outer")

    async def commit(self, h: Any) -> None:
        await h.commit()

    async def rollback(self, h: Any) -> None:
        await h.rollback()


class AsyncpgKind(Kind):
    name = "asyncpg"
    is_async = True

    def __init__(self) -> None:
        self._tx: dict[int, Any] = {}

    @asynccontextmanager
    async def connect(self, app: str,
                      isolation: str | None = None) -> AsyncIterator[Any]:
        import asyncpg

        conn = await asyncpg.connect(**asyncpg_args(app, isolation))
        try:
            yield conn
        finally:
            await conn.close()

    async def write(self, h: Any, scope: str, value: str) -> None:
        await h.execute(f"INSERT INTO {WRITES} (scope, value) VALUES ($1, $2)", scope, value)

    async def touch(self, h: Any, scope: str) -> None:
        await h.execute(TOUCH.format("$1"), scope)

    async def start(self, h: Any, scope: str, isolation: str | None = None) -> None:
        tx = h.transaction(isolation=(isolation or "read committed").replace(" ", "_"))
        await tx.start()
        self._tx[id(h)] = tx
        await self.write(h, scope, "outer")

    async def commit(self, h: Any) -> None:
        await self._tx.pop(id(h)).commit()

    async def rollback(self, h: Any) -> None:
        await self._tx.pop(id(h)).rollback()


class AsyncSessionKind(Kind):
    """A SQLAlchemy AsyncSession, over asyncpg or psycopg's asyncio connection."""

    is_async = True

    def __init__(self, driver: str) -> None:
        self.driver = driver
        self.name = f"sa_async_session_{driver}"

    @asynccontextmanager
    async def connect(self, app: str,
                      isolation: str | None = None) -> AsyncIterator[AsyncSession]:
        args = (sa_asyncpg_connect_args(app, isolation) if self.driver == "asyncpg"
                else psycopg_args(app, isolation))
        engine = create_async_engine(sa_url(self.driver), poolclass=NullPool,
                                     connect_args=args)
        session = AsyncSession(engine)
        try:
            yield session
        finally:
            await session.close()
            await engine.dispose()

    async def write(self, h: AsyncSession, scope: str, value: str) -> None:
        h.add(Write(scope=scope, value=value))
        await h.flush()

    async def touch(self, h: AsyncSession, scope: str) -> None:
        await h.execute(text(TOUCH.format(":s")), {"s": scope})

    async def start(self, h: Any, scope: str, isolation: str | None = None) -> None:
        if isolation:
            await h.connection(execution_options={"isolation_level": isolation.upper()})
        await self.write(h, scope, "outer")

    async def commit(self, h: Any) -> None:
        await h.commit()

    async def rollback(self, h: Any) -> None:
        await h.rollback()


KINDS: dict[str, Kind] = {k.name: k for k in (
    PsycopgKind(), PsycopgAutocommitKind(), SessionKind(), SaConnectionKind(),
    AsyncPsycopgKind(), AsyncpgKind(), AsyncSessionKind("asyncpg"), AsyncSessionKind("psycopg"))}


def exactly_once(kind: Kind, scope: str, hook: Callable[[Any, str], None] | None = None,
                 **settings: Any) -> tuple[Callable[..., Any], list[str], list[Any]]:
    """A function that writes `item` on the caller's connection, exactly once per item:
    (the decorated function, the items it ran for, what it saw in its transaction). `hook`
    runs after the write (in a thread for async kinds); then an item named conflict...
    updates the scope's row 'row', and one named fail... raises."""
    runs: list[str] = []
    seen: list[Any] = []

    def after(h: Any, item: str, record: Any) -> None:
        runs.append(item)
        seen.append(None if record is None else record.state)
        if hook is not None:
            hook(h, item)

    if kind.is_async:
        @idempotent(scope=scope, exactly_once="conn", key_fields=["item"], **settings)
        async def call(conn: Any, item: str) -> dict[str, str]:
            await kind.write(conn, scope, item)  # type: ignore[attr-defined]
            # The claim as the function's own transaction sees it: in progress.
            record = await AsyncStore(conn).lookup(scope, item)
            await asyncio.to_thread(after, conn, item, record)
            if item.startswith("conflict"):
                await kind.touch(conn, scope)  # type: ignore[attr-defined]
            if item.startswith("fail"):
                raise RuntimeError(f"{item} failed")
            return {"wrote": item}
    else:
        @idempotent(scope=scope, exactly_once="conn", key_fields=["item"], **settings)
        def call(conn: Any, item: str) -> dict[str, str]:
            kind.write(conn, scope, item)  # type: ignore[attr-defined]
            after(conn, item, Store(conn).lookup(scope, item))
            if item.startswith("conflict"):
                kind.touch(conn, scope)  # type: ignore[attr-defined]
            if item.startswith("fail"):
                raise RuntimeError(f"{item} failed")
            return {"wrote": item}

    return call, runs, seen
