"""Which methods change something upstream (and so carry Idempotency-Key and are
deduplicated without settings of their own), as the Rust client's web executor says."""

from __future__ import annotations

from ..errors import InvalidArgument

READS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def changes_something(method: str, side_effect: bool | None) -> bool:
    """The call's own word (`side_effect=`), else its method's. Any other method is refused:
    guessing either way is wrong for some provider."""
    if side_effect is not None:
        return side_effect
    if method in READS:
        return False
    if method in WRITES:
        return True
    raise InvalidArgument(
        f"the method {method} is neither a read nor a write pg_idempotency knows",
        detail="GET, HEAD, OPTIONS and TRACE are reads (no Idempotency-Key, deduplicated only "
        "by settings of their own); POST, PUT, PATCH and DELETE change something "
        "(Idempotency-Key, deduplicated). Any other method is not guessed.",
        hint="say how to treat it: side_effect=True to treat it as POST, side_effect=False "
        "to treat it as GET",
    )
