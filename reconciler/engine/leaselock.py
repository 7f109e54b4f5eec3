"""A ``coordination.k8s.io/v1`` Lease as the lock between ``rackctl reconcile`` passes that run in
different places (the pods of a CronJob, several hosts): the Kubernetes counterpart of the state
dir's file lock (``StateDir.lock``), which only sees passes that share the state dir.

The Lease's spec is kept as client-go's leader election keeps it (``tools/leaderelection``):
``holderIdentity`` (who holds it; empty once released), ``acquireTime`` and ``renewTime``
(MicroTime: RFC 3339 in UTC with exactly six fractional digits), ``leaseDurationSeconds`` (the
hold lapses that many seconds after ``renewTime``) and ``leaseTransitions`` (how often the holder
changed).

- acquire: read the Lease; none -> create it; held by another holder whose ``renewTime`` +
  ``leaseDurationSeconds`` has not passed -> ``LeaseHeld``; expired or released -> take it over
  by an update that carries the ``resourceVersion`` read, so that of two passes taking it over at
  once the second gets 409 Conflict, which is reported as held (as a create that finds the Lease
  created meanwhile).
- renew: while the pass runs, a thread writes a new ``renewTime`` every duration/3.
- release: clear ``holderIdentity`` (an update carrying the ``resourceVersion``), unless another
  holder has it by then.

Expiry compares the holder's ``renewTime`` with this host's clock (client-go times the record's
changes itself instead, which needs a process that watches for a while; a pass is one short
process that reads once). Clocks must agree to well within the duration: the default 300 s
leaves room for ordinary NTP skew.

Requests go through the official client's ``CoordinationV1Api`` with the Kubernetes target's
timeouts; a failure is a ``TargetError`` naming the request and the server.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import socket
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from reconciler.errors import InputError, TargetError
from reconciler.guard import redact
from reconciler.targets.kubernetes.client import REQUEST_TIMEOUT, _error as request_error, bounded_answer

#: Seconds a hold lasts after its last renewal when the holder stops renewing (killed, evicted,
#: partitioned); the next pass may take the Lease over after that.
DEFAULT_DURATION_S = 300
API_VERSION = "coordination.k8s.io/v1"
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(_DNS_LABEL + r"(\." + _DNS_LABEL + r")*")
_MICRO_TIME = re.compile(r"([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2})(\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})")


@dataclass(frozen=True)
class LeaseRef:
    """Where the Lease lives: ``namespace`` (a DNS-1123 label) and ``name`` (a DNS-1123
    subdomain). ``str()`` is ``NAMESPACE/NAME``."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


def parse_ref(value: str, *, field: str = "--lease") -> LeaseRef:
    """``NAMESPACE/NAME`` -> ``LeaseRef``. Raises ``InputError`` (for ``field``) for anything else:
    no slash, or names Kubernetes would refuse (namespace: a DNS-1123 label of at most 63
    characters; name: a DNS-1123 subdomain of at most 253)."""
    namespace, slash, name = value.partition("/")
    if not slash or not namespace or not name:
        raise InputError(f"{value!r} is not NAMESPACE/NAME; expected e.g. rackctl/rackctl-reconcile", field=field)
    if len(namespace) > 63 or not re.fullmatch(_DNS_LABEL, namespace):
        raise InputError(f"namespace {namespace!r} is not a DNS-1123 label; expected at most 63 lower-case "
                         "letters, digits and '-', starting and ending with a letter or digit", field=field)
    if len(name) > 253 or not _DNS_SUBDOMAIN.fullmatch(name):
        raise InputError(f"Lease name {name!r} is not a DNS-1123 subdomain; expected at most 253 lower-case "
                         "letters, digits, '-' and '.', starting and ending with a letter or digit", field=field)
    return LeaseRef(namespace, name)


def holder_identity(environ: dict[str, str] | None = None) -> str:
    """Who holds the Lease, as other passes will be told: ``rackctl reconcile, PID N on HOST``,
    plus ``, pod NAME`` from ``$POD_NAME`` (the downward API), else from ``$HOSTNAME`` when
    running in a pod, where that differs from HOST (a pod on the host network has the node's
    host name)."""
    env = os.environ if environ is None else environ
    host = socket.gethostname()
    pod = env.get("POD_NAME") or (env.get("HOSTNAME", "") if env.get("KUBERNETES_SERVICE_HOST") else "")
    return f"rackctl reconcile, PID {os.getpid()} on {host}" + (f", pod {pod}" if pod and pod != host else "")


class LeaseHeld(TargetError):
    """Another holder has the Lease and its hold has not lapsed: the pass must not run. Like the
    file lock held, this is not the pass's own failure."""


class LeaseLost(TargetError):
    """The Lease this process held is now another holder's (or gone): renewing it stopped."""


class _Conflict(Exception):
    """409 from the server: someone else wrote the Lease (or created it) first."""


def micro_time(t: dt.datetime) -> str:
    """``t`` as a MicroTime: UTC, six fractional digits, ``Z``. A whole second gets 1 µs added:
    the client (pydantic models) re-serializes the time with ``isoformat()``, which leaves out a
    zero fraction, and the API server refuses a MicroTime without its six digits."""
    t = t.astimezone(dt.timezone.utc)
    if t.microsecond == 0:
        t = t.replace(microsecond=1)
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(value: Any) -> dt.datetime | None:
    """An RFC 3339 time (any fraction, ``Z`` or an offset) as an aware datetime; None when it is
    not one."""
    m = _MICRO_TIME.fullmatch(value) if isinstance(value, str) else None
    if m is None:
        return None
    fraction = (m.group(2) or ".0")[1:7].ljust(6, "0")
    zone = "+00:00" if m.group(3) == "Z" else m.group(3)
    try:
        return dt.datetime.fromisoformat(f"{m.group(1)}.{fraction}{zone}")
    except ValueError:
        return None


class LeaseLock:
    """One process's hold on the Lease ``ref`` through ``api_client`` (a
    ``kubernetes.client.ApiClient``, e.g. from ``targets.kubernetes.connect``).

    ``identity``: the holder's name (default ``holder_identity()``); ``duration_s``: whole
    seconds the hold lasts after each renewal (>= 1; renewed every ``duration_s / 3``);
    ``clock``: the current time, aware (tests). ``problems``: what went wrong while holding it
    (failed renewals, the Lease lost), one line each, for the pass's record.
    """

    def __init__(self, api_client: Any, ref: LeaseRef, *, identity: str | None = None,
                 duration_s: int = DEFAULT_DURATION_S,
                 clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.timezone.utc)) -> None:
        from kubernetes import client

        if duration_s < 1:
            raise ValueError(f"a Lease lasts 1 s or more, not {duration_s}")
        self.ref, self.duration_s, self.clock = ref, int(duration_s), clock
        self.identity = identity or holder_identity()
        self.server = redact.without_userinfo(getattr(api_client.configuration, "host", "") or "the API server")
        self.problems: list[str] = []
        self._api = client.CoordinationV1Api(api_client)
        self._lease: dict[str, Any] | None = None  # as last written by this process, while held

    # -- the three operations -----------------------------------------------------------------

    def acquire(self) -> None:
        """Take the Lease. Raises ``LeaseHeld`` ("lease NS/NAME is held by HOLDER since
        ACQUIRETIME (renewed RENEWTIME)") when another holder has it, ``TargetError`` when a
        request fails (403: the account may not read or write Leases; 404: no such namespace)."""
        lease = self._get()
        now = self.clock()
        if lease is None:
            body = {"apiVersion": API_VERSION, "kind": "Lease",
                    "metadata": {"name": self.ref.name, "namespace": self.ref.namespace},
                    "spec": self._spec(acquired=now, transitions=0)}
            try:
                self._lease = self._write("create", body)
            except _Conflict:  # another pass created it between our read and our create
                raise self._held(self._get()) from None
            return
        spec = _spec_of(lease)
        holder = spec.get("holderIdentity") or ""
        # The same identity (same PID on the same host) cannot be alive twice: a record of it is
        # a process that ended without releasing, and is taken over at once.
        if holder and holder != self.identity and not self._lapsed(spec, now):
            raise self._held(lease)
        transitions = spec.get("leaseTransitions")
        transitions = transitions + 1 if isinstance(transitions, int) and transitions >= 0 else 1
        lease["spec"] = {**spec, **self._spec(acquired=now, transitions=transitions)}
        try:
            self._lease = self._write("update", lease)  # carries the resourceVersion read
        except _Conflict:  # another pass took it over first
            raise self._held(self._get()) from None
        except _Missing:
            raise TargetError(f"kubernetes: update Lease {self.ref}: it was deleted while being taken over",
                              hint="run the pass again") from None

    def renew(self) -> None:
        """Write a new ``renewTime`` (from the Lease as this process last wrote it; on 409 read
        again and retry once if it is still ours). Raises ``LeaseLost`` when another holder has
        it or it is gone, ``TargetError`` when a request fails, ``RuntimeError`` when not held."""
        if self._lease is None:
            raise RuntimeError("renew() of a Lease this process does not hold")
        lease = self._lease
        for attempt in range(2):
            spec = _spec_of(lease)
            if spec.get("holderIdentity") != self.identity:
                self._lease = None
                held = f"held by {spec.get('holderIdentity')}" if spec.get("holderIdentity") else "released"
                raise LeaseLost(f"lease {self.ref} was lost: it is now {held}")
            lease["spec"] = {**spec, "renewTime": micro_time(self.clock())}
            try:
                self._lease = self._write("renew", lease)
                return
            except _Missing:
                self._lease = None
                raise LeaseLost(f"lease {self.ref} was lost: it was deleted") from None
            except _Conflict:
                if attempt:
                    raise TargetError(f"kubernetes: renew Lease {self.ref}: {self.server} answered 409 Conflict "
                                      "twice (someone else keeps writing it)") from None
                stored = self._get()
                if stored is None:
                    self._lease = None
                    raise LeaseLost(f"lease {self.ref} was lost: it was deleted") from None
                lease = stored

    def release(self) -> None:
        """Clear ``holderIdentity`` (and stamp ``renewTime``) if this process still holds the
        Lease; nothing when it does not. Raises ``TargetError`` when a request fails."""
        lease, self._lease = self._lease, None
        for _ in range(2):
            if lease is None or _spec_of(lease).get("holderIdentity") != self.identity:
                return
            lease["spec"] = {**_spec_of(lease), "holderIdentity": "", "renewTime": micro_time(self.clock())}
            try:
                self._write("release", lease)
                return
            except _Missing:  # deleted: nothing left to release
                return
            except _Conflict:  # written meanwhile: read it again; release only if still ours
                lease = self._get()

    @contextlib.contextmanager
    def held(self, report: Callable[[str, str], None]) -> Iterator[LeaseLock]:
        """Acquire (raising as ``acquire``), renew every ``duration_s / 3`` from a daemon thread
        while the body runs, release afterwards.

        A renewal that fails does not stop the body: a pass that is half-way through an apply is
        better finished than abandoned, and the Lease still holds until it lapses (the next
        renewal may succeed). Instead ``report(event, message)`` is called (from the renewing
        thread) with ``lease-renew-failed`` or ``lease-lost`` (renewing stops: another holder
        has it), and the message is kept in ``problems`` for the pass's record. A release that
        fails is reported as ``lease-release-failed`` only: the hold lapses by itself.
        """
        self.acquire()
        stop = threading.Event()
        keeper = threading.Thread(target=self._keep, args=(stop, report), name=f"lease {self.ref}", daemon=True)
        keeper.start()
        try:
            yield self
        finally:
            stop.set()
            keeper.join()  # at most one request in flight, bounded by REQUEST_TIMEOUT
            try:
                self.release()
            except TargetError as exc:
                report("lease-release-failed", _one_line(exc))

    def _keep(self, stop: threading.Event, report: Callable[[str, str], None]) -> None:
        while not stop.wait(self.duration_s / 3):
            try:
                self.renew()
            except LeaseLost as exc:
                self.problems.append(_one_line(exc))
                report("lease-lost", _one_line(exc))
                return
            except TargetError as exc:
                message = f"lease {self.ref} not renewed: {_one_line(exc)}"
                self.problems.append(message)
                report("lease-renew-failed", message)

    # -- the Lease record -----------------------------------------------------------------------

    def _spec(self, *, acquired: dt.datetime, transitions: int) -> dict[str, Any]:
        return {"holderIdentity": self.identity, "leaseDurationSeconds": self.duration_s,
                "acquireTime": micro_time(acquired), "renewTime": micro_time(self.clock()),
                "leaseTransitions": transitions}

    def _lapsed(self, spec: dict[str, Any], now: dt.datetime) -> bool:
        """Whether the holder's hold has lapsed: ``renewTime`` (else ``acquireTime``) plus
        ``leaseDurationSeconds`` (else this lock's duration) is past. A record with neither
        time shows no hold at all and counts as lapsed."""
        since = parse_time(spec.get("renewTime")) or parse_time(spec.get("acquireTime"))
        seconds = spec.get("leaseDurationSeconds")
        if not isinstance(seconds, int) or isinstance(seconds, bool) or seconds < 1:
            seconds = self.duration_s
        return since is None or now >= since + dt.timedelta(seconds=seconds)

    def _held(self, lease: dict[str, Any] | None) -> LeaseHeld:
        spec = _spec_of(lease) if lease is not None else {}
        holder = spec.get("holderIdentity") or "another pass"
        since = spec.get("acquireTime") or "an unknown time"
        renewed = spec.get("renewTime") or "never"
        seconds = spec.get("leaseDurationSeconds")
        lapse = f"{seconds} s" if isinstance(seconds, int) else "its duration"
        return LeaseHeld(f"lease {self.ref} is held by {holder} since {since} (renewed {renewed})",
                         hint=f"wait for that pass to finish; an abandoned hold lapses {lapse} after its last renewal")

    # -- requests -------------------------------------------------------------------------------

    def _get(self) -> dict[str, Any] | None:
        """The Lease as stored, or None when there is none."""
        try:
            return self._request(f"get Lease {self.ref}", lambda: self._api.read_namespaced_lease(
                self.ref.name, self.ref.namespace, _preload_content=False, _request_timeout=REQUEST_TIMEOUT),
                missing_ok=True)
        except _Missing:
            return None

    def _write(self, verb: str, body: dict[str, Any]) -> dict[str, Any]:
        """Create (``verb`` "create") or replace the Lease; the stored object. Raises
        ``_Conflict`` on 409 (AlreadyExists or a stale resourceVersion), ``_Missing`` when the
        Lease to replace was deleted since it was read."""
        what = f"{verb} Lease {self.ref}"
        kwargs: dict[str, Any] = {"_preload_content": False, "_request_timeout": REQUEST_TIMEOUT}
        # The client serialises a dict body as it is; its annotations ask for a V1Lease.
        if verb == "create":  # 404 here is a missing namespace: an error, not "no Lease"
            return self._request(what, lambda: self._api.create_namespaced_lease(
                self.ref.namespace, body, **kwargs))  # type: ignore[arg-type]
        return self._request(what, lambda: self._api.replace_namespaced_lease(
            self.ref.name, self.ref.namespace, body, **kwargs), missing_ok=True)  # type: ignore[arg-type]

    def _request(self, what: str, fn: Callable[[], Any], *, missing_ok: bool = False) -> dict[str, Any]:
        """``fn()``'s answer as a Lease document. Raises ``_Missing`` on 404 when ``missing_ok``,
        ``_Conflict`` on 409, else ``TargetError`` naming ``what`` and the server."""
        try:
            data = bounded_answer(what, self.server, fn)
        except TargetError:
            raise
        except Exception as exc:
            status = getattr(exc, "status", None)
            if status is None and not type(exc).__module__.startswith(("kubernetes", "urllib3")):
                raise  # not the client's: a bug, shown as one
            if status == 404 and missing_ok:
                raise _Missing() from None
            if status == 409:
                raise _Conflict() from None
            raise request_error(what, exc, self.server) from None
        try:
            doc = json.loads(data)
        except (ValueError, TypeError, AttributeError, RecursionError):
            doc = None
        if not isinstance(doc, dict) or not isinstance(doc.get("metadata"), dict):
            raise TargetError(f"kubernetes: {what}: {self.server} answered with something that is not a Lease")
        return doc


class _Missing(Exception):
    """404 where it means "no such Lease" (get, replace)."""


def _spec_of(lease: dict[str, Any]) -> dict[str, Any]:
    spec = lease.get("spec")
    return dict(spec) if isinstance(spec, dict) else {}


def _one_line(exc: Exception) -> str:
    return "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
