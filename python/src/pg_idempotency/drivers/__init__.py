"""The connections a store runs its statements on. Each driver module knows one library and
is imported only when a connection of that library is given: psycopg 3 is the default
dependency; asyncpg and SQLAlchemy are extras (`pip install pg-idempotency[asyncpg]`)."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import Any, Protocol

from .._sql import Statement
from ..errors import InvalidArgument


class SyncExecutor(Protocol):
    identity: object

    def fetch(self, stmt: Statement, params: Sequence[Any]) -> list[tuple[Any, ...]]: ...

    def transaction(self) -> AbstractContextManager[Any]:
        """A transaction on the one connection this executor has (a savepoint inside the
        caller's): committed when the block ends, rolled back when it raises."""
        ...

    def close(self) -> None: ...


class AsyncExecutor(Protocol):
    identity: object

    async def fetch(self, stmt: Statement, params: Sequence[Any]) -> list[tuple[Any, ...]]: ...

    def transaction(self) -> AbstractAsyncContextManager[Any]: ...

    async def close(self) -> None: ...


def _library(obj: Any) -> str:
    return type(obj).__module__.split(".")[0]


def sync_executor(connection: Any, *, prepare: bool = True) -> SyncExecutor:
    lib = _library(connection)
    if isinstance(connection, str) or lib in ("psycopg", "psycopg_pool"):
        from .psycopg import PsycopgExecutor

        return PsycopgExecutor(connection, prepare=prepare)
    if lib == "sqlalchemy":
        from .sqlalchemy import SqlAlchemyExecutor

        return SqlAlchemyExecutor(connection)
    raise InvalidArgument(
        f"Store cannot use a {type(connection).__module__}.{type(connection).__name__}",
        hint="give a conninfo string, a psycopg ConnectionPool or Connection, or a SQLAlchemy "
        "Engine, Connection or Session; for asyncio code use AsyncStore",
    )


def async_executor(connection: Any, *, prepare: bool = True) -> AsyncExecutor:
    lib = _library(connection)
    if isinstance(connection, str) or lib in ("psycopg", "psycopg_pool"):
        from .psycopg import AsyncPsycopgExecutor

        return AsyncPsycopgExecutor(connection, prepare=prepare)
    if lib == "asyncpg":
        from .asyncpg import AsyncpgExecutor

        return AsyncpgExecutor(connection)
    if lib == "sqlalchemy":
        from .sqlalchemy import AsyncSqlAlchemyExecutor

        return AsyncSqlAlchemyExecutor(connection)
    raise InvalidArgument(
        f"AsyncStore cannot use a {type(connection).__module__}.{type(connection).__name__}",
        hint="give a conninfo string, a psycopg AsyncConnectionPool or AsyncConnection, an "
        "asyncpg Pool or Connection, or a SQLAlchemy AsyncEngine, AsyncConnection or "
        "AsyncSession; for blocking code use Store",
    )
