"""A tiny TCP server on 127.0.0.1 that answers each connection with a test's own bytes, slowly or
badly: the attacker of the request-bounds tests. Runs in threads of the test process; ``stop``
joins them all."""

from __future__ import annotations

import socket
import threading
from typing import Callable

import yaml


class SlowServer:
    """Serves every connection with ``handle(server, conn, n)`` (``n``: 1 for the first
    connection) in a thread of its own. ``requests``: the request heads received, in order;
    ``url``: ``http://127.0.0.1:PORT``."""

    def __init__(self, handle: Callable[[SlowServer, socket.socket, int], None]) -> None:
        self._handle = handle
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self.requests: list[bytes] = []
        self.stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._accepter = threading.Thread(target=self._accept, daemon=True)
        self._accepter.start()

    def _accept(self) -> None:
        n = 0
        while not self.stopping.is_set():
            try:
                conn, _ = self._listener.accept()
            except (socket.timeout, OSError):
                continue
            n += 1
            t = threading.Thread(target=self._serve, args=(conn, n), daemon=True)
            self._threads.append(t)
            t.start()

    def _serve(self, conn: socket.socket, n: int) -> None:
        with conn:
            conn.settimeout(5)
            head = b""
            try:
                while b"\r\n\r\n" not in head:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    head += chunk
            except OSError:
                return
            self.requests.append(head)
            try:
                self._handle(self, conn, n)
            except OSError:  # the client gave up: that is what the tests want
                pass

    def trickle(self, conn: socket.socket, data: bytes, every_s: float = 1.0) -> None:
        """Send ``data`` one byte every ``every_s`` seconds (until the client hangs up or the
        server stops)."""
        for byte in data:
            if self.stopping.wait(every_s):
                return
            conn.sendall(bytes([byte]))

    def stop(self) -> None:
        self.stopping.set()
        self._accepter.join()
        self._listener.close()
        for t in self._threads:
            t.join()


def answer(status: str, body: bytes, *headers: str) -> bytes:
    """An HTTP/1.1 answer with a ``Content-Length``."""
    lines = [f"HTTP/1.1 {status}", "Content-Type: application/json", f"Content-Length: {len(body)}", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def kubeconfig(path, server: str, user: dict | None = None) -> str:
    """A kubeconfig at ``path`` for ``server`` with ``user`` (default a bearer token); returns the
    path."""
    doc = {"apiVersion": "v1", "kind": "Config", "current-context": "x",
           "clusters": [{"name": "c", "cluster": {"server": server}}],
           "users": [{"name": "u", "user": user or {"token": "t0ken-of-the-test"}}],
           "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}]}
    path.write_text(yaml.safe_dump(doc))
    return str(path)
