"""Keys for the tool calls of an agent loop.

An agent loop repeats a tool call when a turn is retried, a step is re-planned, or a run
crashes and resumes. Each time, the model names the call with a new tool-call id
(`call_...`, `toolu_...`), so a key made of that id deduplicates nothing. The key that an
agent loop keeps is the run's (or workflow's) id + the tool + a digest of the arguments:
`agent_key(run_id, tool, arguments)`.

An EXPLICIT key in which a part looks like a per-turn tool-call id gets a `KeyWarning`,
once per scope. The ids recognised (a part of the key split at `: / | # @ , ; = .` and
white space):

- OpenAI and the providers that copy its format (Groq, DeepSeek, xAI, Together, Fireworks,
  vLLM, LiteLLM): `call_` + at least 8 id characters;
- the OpenAI Responses API's function-call items: `fc_` + at least 16;
- Anthropic (Vertex `toolu_vrtx_`, Bedrock `toolu_bdrk_`, server tools `srvtoolu_`):
  `toolu_` + at least 8;
- Amazon Bedrock's Converse API: `tooluse_` + at least 8;
- Pydantic AI's own ids (for Gemini, Mistral calls without an id, TestModel): `pyd_ai_...`.

For all but the last, the id part must look random (hold a digit, or both cases), so that
`call_center` is not taken for one. Not recognised, because they look like keys people
choose: Mistral's 9-character ids, uuids (LangChain's ids for Gemini), JSON-RPC ids."""

from __future__ import annotations

import re
import threading
import warnings
from typing import Any

from .canonical import input_hash
from .errors import InvalidArgument

MAX_KEY_BYTES = 512  # the server's limit on a key


class KeyWarning(UserWarning):
    """An EXPLICIT key looks like a per-turn tool-call id: a retried turn gets a new one,
    so the key deduplicates nothing. Use `pg_idempotency.agent_key(run_id, tool, args)`."""


_PROVIDERS: tuple[tuple[str, re.Pattern[str], bool], ...] = (
    ("an OpenAI tool-call id", re.compile(r"call_([A-Za-z0-9_-]{8,})"), True),
    ("an OpenAI Responses function-call item id", re.compile(r"fc_([A-Za-z0-9]{16,})"), True),
    ("an Anthropic tool-use id", re.compile(r"(?:srv)?toolu_([A-Za-z0-9_-]{8,})"), True),
    ("an Amazon Bedrock tool-use id", re.compile(r"tooluse_([A-Za-z0-9_-]{8,})"), True),
    ("a Pydantic AI tool-call id", re.compile(r"pyd_ai_([A-Za-z0-9_]+)"), False),
)
_SEPARATORS = re.compile(r"[:/|#@,;=.\s]+")
# What every id above holds: a key without any of these is not split and matched (most
# keys; the check runs on every call).
_PREFIXES = re.compile("call_|fc_|toolu|pyd_ai_")


def _random_looking(s: str) -> bool:
    return any(c.isdigit() for c in s) or (s.lower() != s and s.upper() != s)


def tool_call_id_in(key: str) -> tuple[str, str] | None:
    """(the part, what it looks like) when a part of the key looks like a per-turn
    tool-call id; None otherwise."""
    if _PREFIXES.search(key) is None:
        return None
    for part in _SEPARATORS.split(key):
        for what, pattern, must_look_random in _PROVIDERS:
            m = pattern.fullmatch(part)
            if m and (not must_look_random or _random_looking(m.group(1))):
                return part, what
    return None


_WARNED: set[str] = set()
_WARNED_LOCK = threading.Lock()


def warn_if_tool_call_id(scope: str | None, key: str, source: str) -> None:
    """The KeyWarning, once per scope (per source where the scope is not known yet)."""
    found = tool_call_id_in(key)
    if found is None:
        return
    with _WARNED_LOCK:
        seen = scope or source
        if seen in _WARNED:
            return
        _WARNED.add(seen)
    part, what = found
    warnings.warn(
        f"the key {key!r} of scope {scope or '?'!r} ({source}) holds {part!r}, which looks like "
        f"{what}. A retried turn, a re-planned step or a resumed run gets a new tool-call id, "
        "so this key deduplicates nothing. Key the call on the run's id, the tool and its "
        "arguments: pg_idempotency.agent_key(run_id, tool, arguments)",
        KeyWarning,
        stacklevel=2,
    )


def agent_key(run_id: str, tool: str, arguments: Any) -> str:
    """The key of a tool call that an agent loop keeps across retries:
    `"{run_id}:{tool}:{digest}"`, where digest is the HASH_INPUT key of the arguments (the
    hex SHA-256 of their canonical JSON, `encode(idem_hash(arguments), 'hex')`), so the
    same arguments in any spelling or member order give the same key.

    `run_id`: what stays the same when the run is retried or resumed (a workflow id, a
    LangGraph thread id, your request id), never the model's tool-call id. `tool` must not
    hold ':' (the key reads unambiguously from the right)."""
    if not isinstance(run_id, str) or not run_id.strip():
        raise InvalidArgument(
            "agent_key needs a run id",
            detail=f"run_id is {run_id!r}.",
            hint="pass what stays the same when the run is retried or resumed: the "
            "workflow's, thread's or request's id",
        )
    if not isinstance(tool, str) or not tool.strip() or ":" in tool:
        raise InvalidArgument(
            "agent_key needs the tool's name, without ':'",
            detail=f"tool is {tool!r}.",
            hint="pass the tool's name as the framework knows it (send_email)",
        )
    key = f"{run_id}:{tool}:{input_hash(arguments)}"
    if len(key.encode("utf-8")) > MAX_KEY_BYTES:
        raise InvalidArgument(
            f"the key is longer than {MAX_KEY_BYTES} bytes",
            detail=f"The run id is {len(run_id.encode('utf-8'))} bytes and the tool's name "
            f"{len(tool.encode('utf-8'))}; the digest takes 66.",
            hint="use a shorter run id (a uuid, or a hash of a long one)",
        )
    return key
