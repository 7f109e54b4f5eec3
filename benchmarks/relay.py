"""A timing relay between rackctl and the fake API server, to see requests in flight.

The fake's request log (``FakeKube.requests()``) records method, path, query, status and body
but no timestamps, and the fake serves one request at a time under a global lock, so it cannot
say how many requests a client had open at once. This relay can: it listens on 127.0.0.1,
forwards each HTTP/1.1 request of a connection to the fake in turn, and records when each
request had fully arrived and when its answer was about to go back. Requests in flight at a
moment = requests received and not yet answered; the maximum is the client's concurrency.

It adds a hop (and CPU on the same cores), so rates measured through it are lower than direct.
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Timed:
    """One relayed request: ``start`` (received), ``end`` (answered), perf_counter seconds."""

    method: str
    path: str
    start: float
    end: float


class Relay:
    """``Relay(upstream_port)``: listening at once on ``self.port``; ``log`` the relayed requests;
    ``close()`` stops it (also a context manager)."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream = upstream_port
        self.log: list[Timed] = []
        self._lock = threading.Lock()
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self._conns: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, name="relay-accept", daemon=True).start()

    def kubeconfig(self, dest: Path) -> Path:
        """Write a kubeconfig pointing at the relay to ``dest``."""
        dest.write_text(
            "apiVersion: v1\nkind: Config\n"
            f"clusters:\n- name: relay\n  cluster:\n    server: http://127.0.0.1:{self.port}\n"
            "users:\n- name: relay\n  user: {}\n"
            "contexts:\n- name: relay\n  context:\n    cluster: relay\n    user: relay\n"
            "current-context: relay\n", encoding="utf-8")
        return dest

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._conns.append(client)
            threading.Thread(target=self._serve, args=(client,), name="relay-conn", daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", self.upstream))
        except OSError:
            client.close()
            return
        upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self._lock:
            self._conns.append(upstream)
        cin, uin = client.makefile("rb"), upstream.makefile("rb")
        try:
            while True:
                head, body = _read_message(cin)
                if head is None:
                    return
                start = time.perf_counter()
                method, path = head.split(b" ", 2)[:2]
                upstream.sendall(head + body)
                rhead, rbody = _read_message(uin)
                if rhead is None:
                    return
                # Taken before the answer goes out: the client cannot send its next request (on
                # this or another connection) before this instant, so no overlap is invented.
                end = time.perf_counter()
                client.sendall(rhead + rbody)
                with self._lock:
                    self.log.append(Timed(method.decode(), path.decode().split("?", 1)[0], start, end))
        except OSError:
            return
        finally:
            client.close()
            upstream.close()

    def close(self) -> None:
        """Stop listening and close every relayed connection."""
        self._closed = True
        self._sock.close()
        with self._lock:
            for c in self._conns:
                try:
                    c.close()
                except OSError:
                    pass

    def __enter__(self) -> "Relay":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _read_message(f) -> tuple[bytes | None, bytes]:
    """One HTTP/1.1 message head and body (Content-Length bodies only: what the kubernetes
    client sends and the fake answers). ``(None, b"")`` at the end of the connection."""
    lines = []
    while True:
        line = f.readline()
        if not line:
            return None, b""
        lines.append(line)
        if line in (b"\r\n", b"\n"):
            break
    head = b"".join(lines)
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
        elif name.strip().lower() == b"transfer-encoding":
            raise OSError("chunked messages are not relayed")
    return head, f.read(length) if length else b""


def max_in_flight(log: list[Timed], method: str | None = None, prefix: str = "") -> int:
    """The most requests (of ``method``, under path ``prefix``) received and not yet answered
    at any one moment."""
    events = []
    for t in log:
        if (method is None or t.method == method) and t.path.startswith(prefix):
            events += [(t.start, 1), (t.end, -1)]
    events.sort(key=lambda e: (e[0], e[1]))  # an answer at the same instant leaves first
    peak = now = 0
    for _, d in events:
        now += d
        peak = max(peak, now)
    return peak


def span(log: list[Timed], method: str, prefix: str) -> tuple[int, float]:
    """``(count, seconds from the first such request received to the last answered)``."""
    sel = [t for t in log if t.method == method and t.path.startswith(prefix)]
    if not sel:
        return 0, 0.0
    return len(sel), max(t.end for t in sel) - min(t.start for t in sel)
