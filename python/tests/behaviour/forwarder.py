"""A TCP forwarder in front of the test database whose link the test can cut and restore:
the store behind it is out of reach (its connections closed, new ones dropped) while the
database itself runs on, as after a network cut."""

from __future__ import annotations

import re
import socket
import threading


class Forwarder:
    def __init__(self, dsn: str) -> None:
        host = re.search(r"host=(\S+)", dsn)
        port = re.search(r"port=(\d+)", dsn)
        assert host and port, "a DSN with host= and port="
        # A socket directory (the private cluster) or a TCP address (PgBouncer).
        self.target: str | tuple[str, int] = (
            f"{host.group(1)}/.s.PGSQL.{port.group(1)}" if host.group(1).startswith("/")
            else (host.group(1), int(port.group(1))))
        self.rest = re.sub(r"(host|port)=\S+\s*", "", dsn).strip()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.lock = threading.Lock()
        self.links: list[socket.socket] = []
        self.is_cut = False
        self.closed = False
        self.accepted = 0  # connections made through it
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} {self.rest}"

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                if self.is_cut:
                    client.close()
                    continue
                self.accepted += 1
                if isinstance(self.target, str):
                    server = socket.socket(socket.AF_UNIX)
                    server.connect(self.target)
                else:
                    server = socket.create_connection(self.target)
                self.links += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def cut(self) -> None:
        with self.lock:
            self.is_cut = True
            links, self.links = self.links, []
        for s in links:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def restore(self) -> None:
        with self.lock:
            self.is_cut = False

    def close(self) -> None:
        self.closed = True
        self.cut()
        self.listener.close()
