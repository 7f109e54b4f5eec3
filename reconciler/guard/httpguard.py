"""Bounds on every HTTP exchange with an API server: an overall deadline and a size cap.

The ``kubernetes`` client gives each request a connect and a read timeout, and urllib3 applies
the read timeout to each ``recv``: a server that trickles one byte every few seconds resets it
with every byte and holds rackctl (and its lock) for ever. Here each attempt of a request runs
in an ``Attempt`` (``with attempt(seconds): ...``, on the thread that makes the request): a
watchdog thread shuts the attempt's socket down when its deadline passes, whatever phase it is
in (TLS handshake, sending, the status line, headers or body), so the blocked read returns and
the request fails; ``Attempt.expired`` then says why.

``install(api_client)`` puts this into an ``ApiClient``'s connection pools (urllib3 2, which the
``kubernetes`` client requires):

- each new connection keeps a duplicate of its socket's descriptor (``shutdown`` acts on the
  socket, so the duplicate reaches it even after TLS has wrapped the original);
- a body shorter than its ``Content-Length`` is an error (``enforce_content_length``), never a
  short document; the caller retries it like a reset connection;
- an answer body (after its headers) larger than ``MAX_ANSWER_BYTES`` fails with
  ``AnswerTooLarge`` as soon as the cap is passed, before it is held in memory; an encoded body
  (``Content-Encoding: gzip``, which rackctl never asks for) is refused, so no small answer can
  inflate into a large one.

``read_answer`` reads a body in chunks under the same cap.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import socket
import threading
import time
from typing import TYPE_CHECKING, Any, Iterator

if TYPE_CHECKING:
    from urllib3.connectionpool import HTTPConnectionPool

#: Most seconds one attempt of a request may take, from connecting to the last byte of its answer.
#: A page of 500 Nodes takes well under a second on a healthy API server.
REQUEST_DEADLINE_S = 120.0
#: Largest answer body read (bytes): a page of 500 Nodes of 128 KiB each. Real Nodes take 10-30 KiB.
MAX_ANSWER_BYTES = 64 * 1024 * 1024
_CHUNK = 1024 * 1024


class AnswerTooLarge(Exception):
    """An answer body passed ``MAX_ANSWER_BYTES``."""


class Attempt:
    """One attempt of a request with a deadline (``at``: ``time.monotonic()`` seconds). The
    sockets it uses are shut down when the deadline passes; ``expired`` then is True."""

    def __init__(self, at: float) -> None:
        self.at = at
        self.expired = False
        self._done = False
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            if sock not in self._socks:
                self._socks.append(sock)
            if self.expired:
                _shutdown(sock)

    def fire(self) -> None:
        with self._lock:
            if self._done:
                return
            self.expired = True
            for sock in self._socks:
                _shutdown(sock)

    def close(self) -> None:
        with self._lock:
            self._done = True
            self._socks.clear()


def _shutdown(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:  # closed already: nothing left to stop
        pass


class _Watchdog:
    """One daemon thread firing attempts at their deadlines (a heap: a fleet's first apply makes
    36,000 requests; a timer thread each would cost more than the requests' own work)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Attempt]] = []
        self._cond = threading.Condition()
        self._order = itertools.count()
        self._thread: threading.Thread | None = None

    def add(self, attempt: Attempt) -> None:
        with self._cond:
            heapq.heappush(self._heap, (attempt.at, next(self._order), attempt))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="rackctl-request-deadlines", daemon=True)
                self._thread.start()
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._heap or self._heap[0][0] > time.monotonic():
                    self._cond.wait(self._heap[0][0] - time.monotonic() if self._heap else None)
                _, _, due = heapq.heappop(self._heap)
            due.fire()


_WATCHDOG = _Watchdog()
_current = threading.local()


@contextlib.contextmanager
def attempt(seconds: float) -> Iterator[Attempt]:
    """Run one attempt of a request (on this thread, through an ``install``ed client) that is
    stopped ``seconds`` from now."""
    current = Attempt(time.monotonic() + seconds)
    outer = getattr(_current, "attempt", None)
    _current.attempt = current
    _WATCHDOG.add(current)
    try:
        yield current
    finally:
        current.close()
        _current.attempt = outer


def read_answer(response: Any) -> bytes:
    """The whole body of a urllib3 ``HTTPResponse`` (``_preload_content=False``), read in chunks.
    Raises ``AnswerTooLarge`` past ``MAX_ANSWER_BYTES``, else what urllib3 raises."""
    parts: list[bytes] = []
    size = 0
    try:
        while True:
            chunk = response.read(_CHUNK)
            if not chunk:
                return b"".join(parts)
            size += len(chunk)
            if size > MAX_ANSWER_BYTES:
                raise AnswerTooLarge()
            parts.append(chunk)
    finally:
        response.release_conn()


class _CappedReader:
    """The byte stream of one answer (``http.client.HTTPResponse.fp``), failing with
    ``AnswerTooLarge`` once more than ``limit`` bytes were read; a read of n bytes reads at most
    ``_CHUNK`` at a time, so a huge declared chunk is never allocated whole."""

    def __init__(self, fp: Any, limit: int) -> None:
        self._fp, self._left = fp, limit

    def _count(self, data: bytes) -> bytes:
        self._left -= len(data)
        if self._left < 0:
            raise AnswerTooLarge()
        return data

    def read(self, n: int | None = -1) -> bytes:
        if n is not None and 0 <= n <= _CHUNK:
            return self._count(self._fp.read(n))
        parts, want = [], (n if n is not None and n >= 0 else None)
        while want is None or want > 0:
            chunk = self._count(self._fp.read(_CHUNK if want is None else min(want, _CHUNK)))
            if not chunk:
                break
            parts.append(chunk)
            if want is not None:
                want -= len(chunk)
        return b"".join(parts)

    def read1(self, n: int = -1) -> bytes:
        return self._count(self._fp.read1(_CHUNK if n is None or n < 0 else min(n, _CHUNK)))

    def readinto(self, buffer: Any) -> int:
        got = self._fp.readinto(memoryview(buffer)[:_CHUNK]) or 0
        self._left -= got
        if self._left < 0:
            raise AnswerTooLarge()
        return got

    def readline(self, limit: int = -1) -> bytes:
        return self._count(self._fp.readline(_CHUNK if limit is None or limit < 0 else min(limit, _CHUNK)))

    def __getattr__(self, name: str) -> Any:  # close, closed, peek, flush, fileno
        return getattr(self._fp, name)


class _Watched:
    """Mixed into a urllib3 connection class by ``install``. Its ``super()`` is that class, which
    mypy cannot see from here: hence the ``type: ignore[misc]`` on each call to it."""

    def _new_conn(self) -> socket.socket:
        sock: socket.socket = super()._new_conn()  # type: ignore[misc]
        self._rackctl_watch = sock.dup()
        current = getattr(_current, "attempt", None)
        if current is not None:
            current.watch(self._rackctl_watch)
        return sock

    def request(self, *args: Any, **kwargs: Any) -> None:
        kwargs["enforce_content_length"] = True  # a short body is an error, whatever the default
        current = getattr(_current, "attempt", None)
        watch = getattr(self, "_rackctl_watch", None)
        if current is not None and watch is not None:
            current.watch(watch)
        super().request(*args, **kwargs)  # type: ignore[misc]

    def getresponse(self) -> Any:
        response = super().getresponse()  # type: ignore[misc]
        encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            response.release_conn()
            self.close()
            raise AnswerTooLarge(f"an answer encoded with {encoding}, which rackctl did not ask for")
        original = getattr(response, "_original_response", None)
        if original is not None and original.fp is not None:
            original.fp = _CappedReader(original.fp, MAX_ANSWER_BYTES)
        return response

    def close(self) -> None:
        super().close()  # type: ignore[misc]
        watch = self.__dict__.pop("_rackctl_watch", None)
        if watch is not None:
            watch.close()


def install(api_client: Any) -> Any:
    """Put the deadline, the Content-Length check and the size cap into ``api_client``'s (a
    ``kubernetes.client.ApiClient``) connection pools, whatever their kind (direct, proxy,
    SOCKS). Returns ``api_client``."""
    manager = api_client.rest_client.pool_manager
    manager.pool_classes_by_scheme = {scheme: _watched_pool(cls)
                                      for scheme, cls in manager.pool_classes_by_scheme.items()}
    return api_client


def _watched_pool(pool_cls: type[HTTPConnectionPool]) -> type:
    if getattr(pool_cls, "_rackctl_watched", False):
        return pool_cls
    conn = type(f"Watched{pool_cls.ConnectionCls.__name__}", (_Watched, pool_cls.ConnectionCls), {})
    return type(f"Watched{pool_cls.__name__}", (pool_cls,), {"ConnectionCls": conn, "_rackctl_watched": True})
