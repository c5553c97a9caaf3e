"""A real HTTP server for the web actions' tests: it records every request it receives
(method, path, headers, body) and answers as a test scripts it, per path: by default
201 with `{"path": ..., "n": <requests to that path so far>}`, so that a replay shows the
first answer's n. A scripted answer may hold the request until the test releases it."""

from __future__ import annotations

import json
import threading
from collections import defaultdict, deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    query: str
    headers: dict[str, str]  # lower-case names
    body: bytes

    @property
    def key(self) -> str | None:
        return self.headers.get("idempotency-key")

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Reply:
    status: int = 201
    body: Any = None  # JSON; a str is sent as text/plain
    headers: dict[str, str] = field(default_factory=dict)
    hold: threading.Event | None = None  # answer only once it is set
    arrived: threading.Event = field(default_factory=threading.Event)


class Upstream:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests: list[Seen] = []
        self.scripts: dict[str, deque[Reply]] = defaultdict(deque)
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def handle_one(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                parts = urlsplit(self.path)
                seen = Seen(self.command, parts.path, parts.query,
                            {k.lower(): v for k, v in self.headers.items()}, body)
                with upstream.lock:
                    upstream.requests.append(seen)
                    n = sum(1 for r in upstream.requests if r.path == parts.path)
                    script = upstream.scripts[parts.path]
                    reply = script.popleft() if script else Reply()
                reply.arrived.set()
                if reply.hold is not None:
                    reply.hold.wait(30)
                payload = reply.body if reply.body is not None else {"path": parts.path, "n": n}
                if isinstance(payload, str):
                    data, kind = payload.encode(), "text/plain; charset=utf-8"
                else:
                    data, kind = json.dumps(payload).encode(), "application/json"
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", kind)
                    self.send_header("Content-Length", str(len(data)))
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(data)
                except OSError:
                    pass  # the client gave up waiting (a timeout): nobody reads the answer

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = handle_one
            do_OPTIONS = do_TRACE = do_PURGE = handle_one

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,),
                                       daemon=True)

    def script(self, path: str, *replies: Reply) -> None:
        """The next answers to `path`, in order (then the default)."""
        with self.lock:
            self.scripts[path].extend(replies)

    def seen(self, path: str | None = None) -> list[Seen]:
        with self.lock:
            return [r for r in self.requests if path is None or r.path == path]

    def start(self) -> Upstream:
        self.thread.start()
        return self

    def stop(self) -> None:
        if self.thread.is_alive():  # shutdown() waits for serve_forever, which must run
            self.server.shutdown()
        self.server.server_close()
