"""Web actions: httpx requests that change something, sent once however often they are
retried, with `Idempotency-Key` for the provider (`pip install "pg-idempotency[httpx]"`).

    from pg_idempotency.http import Actions

    api = Actions(httpx.Client(headers={"Authorization": f"Bearer {token}"}),
                  store="postgresql://app@db/app")
    r = api.post("https://api.example.com/v1/emails", json={"to": "ann@example.com"},
                 ttl=86_400)

The Rust client's web executor's rules (docs/client.md, "The web executor: methods and
keys"); docs/python.md, "Web actions", says the rest."""

from ._recorded import CallInfo, StatusError, call_info
from .actions import Actions
from .async_actions import AsyncActions

__all__ = ["Actions", "AsyncActions", "CallInfo", "StatusError", "call_info"]
