"""pg_idempotency for Python: idempotency keys that live in PostgreSQL.

    import pg_idempotency
    from pg_idempotency import idempotent

    pg_idempotency.configure("postgresql://app@db/app")

    @idempotent(ttl=86_400)
    def send_email(to: str, subject: str) -> dict:
        return provider.send(to, subject)

Three retries of send_email("ann@example.com", "Hi") send one email. docs/python.md says
the rest: the members, drivers, transactions, agent frameworks, errors, keys in agent loops.
"""

from .agent_keys import KeyWarning, agent_key
from .answers import BatchCompletion, BatchItem, Begin, Record
from .canonical import canonical_json, input_hash
from .context import CallContext, Lease, current_call, maybe_current_call
from .decorator import configure, idempotent, settings_of
from .errors import (
    Contention,
    GrantRoleCaller,
    IdempotencyError,
    InProgress,
    InvalidArgument,
    LeaseLost,
    Mismatch,
    NotInstalled,
    NotPermitted,
    OutcomeUnknown,
    RepeatRefused,
    ResponseTooLarge,
    StoreUnavailable,
    ToolFailed,
    Uncanonicalizable,
    Unrecorded,
)
from .settings import (
    NOT_FOUND,
    UNKNOWN,
    Idempotent,
    KeyStrategy,
    OnCacheHit,
    OnMismatch,
    Reconcile,
    UnknownOutcome,
)
from .store import AsyncStore, Store

__version__ = "0.9.0"

__all__ = [
    "NOT_FOUND",
    "UNKNOWN",
    "AsyncStore",
    "BatchCompletion",
    "BatchItem",
    "Begin",
    "CallContext",
    "Contention",
    "GrantRoleCaller",
    "IdempotencyError",
    "Idempotent",
    "InProgress",
    "InvalidArgument",
    "KeyStrategy",
    "KeyWarning",
    "Lease",
    "LeaseLost",
    "Mismatch",
    "NotInstalled",
    "NotPermitted",
    "OnCacheHit",
    "OnMismatch",
    "OutcomeUnknown",
    "Reconcile",
    "Record",
    "RepeatRefused",
    "ResponseTooLarge",
    "Store",
    "StoreUnavailable",
    "ToolFailed",
    "Uncanonicalizable",
    "UnknownOutcome",
    "Unrecorded",
    "agent_key",
    "canonical_json",
    "configure",
    "current_call",
    "idempotent",
    "input_hash",
    "maybe_current_call",
    "settings_of",
]
