"""SQLAlchemy 2.x over psycopg (postgresql+psycopg, blocking or asyncio) or asyncpg
(postgresql+asyncpg). The statements run on SQLAlchemy's DBAPI connection as the driver's
own SQL (exec_driver_sql: its placeholders and types, no text() parsing), inside
SQLAlchemy's transaction: SQLAlchemy begins, commits and invalidates a lost connection as
for its own statements, so a Session's state stays true. (asyncpg's adapter begins its
transaction at its first statement: a statement sent on the bare asyncpg connection before
it would run outside the Session's transaction, in autocommit.)

An Engine behaves like a pool: each call on a connection of its own, committed. A
Connection or Session inside a transaction runs the call in it; an idle one commits each
call. transaction() is SQLAlchemy's begin(), or begin_nested() (a savepoint) inside one."""

from __future__ import annotations

import asyncio
import importlib.util
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

from sqlalchemy import Connection, Dialect, Engine
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.ext.asyncio import (
    AsyncConnection,
    AsyncEngine,
    AsyncSession,
    async_scoped_session,
)
from sqlalchemy.orm import Session, scoped_session

from .._sql import Statement
from ..errors import IdempotencyError, InvalidArgument, StoreUnavailable, from_sqlstate

_HINT = ("create the engine with a postgresql+psycopg:// URL (Store or AsyncStore) or a "
         "postgresql+asyncpg:// one (AsyncStore)")


def _spelling(dialect: Dialect) -> Callable[[Statement], str]:
    """The statement in the driver's own placeholders: exec_driver_sql sends it as is."""
    if dialect.name == "postgresql" and dialect.driver == "psycopg":
        return Statement.with_percent_s
    if dialect.name == "postgresql" and dialect.driver == "asyncpg":
        return lambda stmt: stmt.text
    raise InvalidArgument(
        f"pg-idempotency cannot run on SQLAlchemy's {dialect.name}+{dialect.driver} dialect",
        detail="The store runs its statements with psycopg 3 or asyncpg.",
        hint=_HINT,
    )


def translate(e: SQLAlchemyError) -> IdempotencyError:
    """The driver's error inside SQLAlchemy's, by its SQLSTATE; SQLAlchemy's own (a closed
    connection, a Session that must be rolled back first) is StoreUnavailable."""
    driver = _driver_error(e)
    if driver is not None:
        import psycopg

        if isinstance(driver, psycopg.Error):
            from .psycopg import translate as from_psycopg

            return from_psycopg(driver)
        if type(driver).__module__.startswith("asyncpg"):
            from .asyncpg import translate as from_asyncpg

            return from_asyncpg(driver)
    orig = getattr(e, "orig", None)
    if orig is not None and getattr(orig, "sqlstate", None):
        err = from_sqlstate(orig.sqlstate, str(orig), getattr(orig, "detail", None), None)
    else:
        err = StoreUnavailable(str(e).strip() or type(e).__name__,
                               hint="the connection or session cannot run statements now")
    err.__cause__ = driver or e
    return err


def _driver_error(e: BaseException) -> BaseException | None:
    # DBAPIError.orig is psycopg's error; for asyncpg, SQLAlchemy's emulated DBAPI error,
    # whose .orig (2.1) or __cause__ (2.0) is asyncpg's.
    orig = getattr(e, "orig", None) if isinstance(e, DBAPIError) else None
    for _ in range(3):
        if orig is None or type(orig).__module__.split(".")[0] in ("psycopg", "asyncpg"):
            return orig
        orig = getattr(orig, "orig", None) or orig.__cause__
    return None


class SqlAlchemyExecutor:
    """An Engine, a Connection, or a Session (or a scoped_session: the current one)."""

    def __init__(self, source: Any) -> None:
        if isinstance(source, (AsyncEngine, AsyncConnection, AsyncSession,
                               async_scoped_session)):
            raise InvalidArgument(
                f"Store cannot use a SQLAlchemy {type(source).__name__}",
                hint="give it to AsyncStore, or give Store an Engine, Connection or Session",
            )
        if not isinstance(source, (Engine, Connection, Session, scoped_session)):
            raise InvalidArgument(
                f"Store cannot use a SQLAlchemy {type(source).__name__}",
                hint="give an Engine, a Connection or a Session",
            )
        if isinstance(source, (Engine, Connection)):
            _spelling(source.dialect)  # refused now rather than at the first call
        elif isinstance(source, Session) and isinstance(source.bind, (Engine, Connection)):
            _spelling(source.bind.dialect)
        self._source = source
        self.identity: object = source
        self._texts: dict[tuple[str, str], str] = {}
        # One call at a time on a connection or session (the heartbeat's thread and the
        # caller's): neither is safe to share between threads.
        self._lock = threading.RLock()

    def _run(self, conn: Connection, stmt: Statement,
             params: Sequence[Any]) -> list[tuple[Any, ...]]:
        dialect = conn.dialect
        text = self._texts.get((stmt.name, dialect.driver))
        if text is None:
            text = self._texts[(stmt.name, dialect.driver)] = _spelling(dialect)(stmt)
        return [tuple(row) for row in conn.exec_driver_sql(text, tuple(params)).all()]

    def fetch(self, stmt: Statement, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        source = self._source
        try:
            if isinstance(source, Engine):
                with source.begin() as conn:
                    return self._run(conn, stmt, params)
            with self._lock:
                if isinstance(source, Connection):
                    if source.in_transaction():
                        return self._run(source, stmt, params)
                    with source.begin():
                        return self._run(source, stmt, params)
                session = source() if isinstance(source, scoped_session) else source
                if session.in_transaction():
                    return self._run(session.connection(), stmt, params)
                with session.begin():
                    return self._run(session.connection(), stmt, params)
        except SQLAlchemyError as e:
            raise translate(e) from e

    def transaction(self) -> AbstractContextManager[Any]:
        source = self._source
        if isinstance(source, Engine):
            raise InvalidArgument(
                "a transaction needs one connection, not an Engine",
                hint="give exactly_once= the Session (or Connection) your writes use",
            )
        if isinstance(source, scoped_session):
            source = source()
        return source.begin_nested() if source.in_transaction() else source.begin()

    def close(self) -> None:
        pass  # the engine, connection or session is the caller's


class AsyncSqlAlchemyExecutor:
    """An AsyncEngine, an AsyncConnection, or an AsyncSession (or an async_scoped_session)."""

    def __init__(self, source: Any) -> None:
        if isinstance(source, (Engine, Connection, Session, scoped_session)):
            raise InvalidArgument(
                f"AsyncStore cannot use a SQLAlchemy {type(source).__name__}",
                hint="give it to Store, or give AsyncStore an AsyncEngine "
                "(create_async_engine), AsyncConnection or AsyncSession",
            )
        if not isinstance(source, (AsyncEngine, AsyncConnection, AsyncSession,
                                   async_scoped_session)):
            raise InvalidArgument(
                f"AsyncStore cannot use a SQLAlchemy {type(source).__name__}",
                hint="give an AsyncEngine, an AsyncConnection or an AsyncSession",
            )
        if importlib.util.find_spec("greenlet") is None:  # SQLAlchemy's asyncio runs on it
            raise InvalidArgument(
                "SQLAlchemy's asyncio support needs the greenlet package",
                hint='pip install "sqlalchemy[asyncio]"',
            )
        if isinstance(source, (AsyncEngine, AsyncConnection)):
            _spelling(source.dialect)
        elif isinstance(source, AsyncSession) and isinstance(
                source.bind, (AsyncEngine, AsyncConnection)):
            _spelling(source.bind.dialect)
        self._source = source
        self.identity: object = source
        self._texts: dict[tuple[str, str], str] = {}
        self._lock = asyncio.Lock()

    async def _run(self, conn: AsyncConnection, stmt: Statement,
                   params: Sequence[Any]) -> list[tuple[Any, ...]]:
        dialect = conn.dialect
        text = self._texts.get((stmt.name, dialect.driver))
        if text is None:
            text = self._texts[(stmt.name, dialect.driver)] = _spelling(dialect)(stmt)
        result = await conn.exec_driver_sql(text, tuple(params))
        return [tuple(row) for row in result.all()]

    async def fetch(self, stmt: Statement, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        source = self._source
        try:
            if isinstance(source, AsyncEngine):
                async with source.begin() as conn:
                    return await self._run(conn, stmt, params)
            async with self._lock:
                if isinstance(source, AsyncConnection):
                    if source.in_transaction():
                        return await self._run(source, stmt, params)
                    async with source.begin():
                        return await self._run(source, stmt, params)
                session = source() if isinstance(source, async_scoped_session) else source
                if session.in_transaction():
                    return await self._run(await session.connection(), stmt, params)
                async with session.begin():
                    return await self._run(await session.connection(), stmt, params)
        except SQLAlchemyError as e:
            raise translate(e) from e

    def transaction(self) -> Any:
        source = self._source
        if isinstance(source, AsyncEngine):
            raise InvalidArgument(
                "a transaction needs one connection, not an AsyncEngine",
                hint="give exactly_once= the AsyncSession (or AsyncConnection) your writes use",
            )
        if isinstance(source, async_scoped_session):
            source = source()
        return source.begin_nested() if source.in_transaction() else source.begin()

    async def close(self) -> None:
        pass
