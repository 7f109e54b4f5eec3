"""The Kubernetes target's I/O: discovery, reading live state, server-side apply, node patches.

Talks to the API server through the official ``kubernetes`` client (in-cluster config, else a
kubeconfig). Lists are read as raw JSON (``_preload_content=False``) and paged: the client's
model classes cost seconds per thousand Nodes. Every failure becomes a ``TargetError`` naming
the request; a failed read is never "nothing live".

Transient failures are retried (``RETRY``: bounded attempts, backoff with jitter, Retry-After
honoured), each retry counted in ``KubeApi.retried``: 5xx InternalError/ServiceUnavailable/
gateway answers, 429, the optimistic-concurrency 409 ("the object has been modified") of a
request without a resourceVersion precondition, refused or reset connections and read timeouts.
Every rackctl write is idempotent (server-side apply, label patches with absolute values,
deletes), so a write whose answer was lost may be sent again. Never retried: 400/401/403/404/422,
a 409 from server-side apply's field ownership (another manager's fields), and a 409 on a Node
patch that carries a resourceVersion (the Node changed: the plan must be made again). A list
whose continue token expired (410) starts again from the beginning, once.

Every attempt is bounded (``httpguard``, put into the client by ``connect``): an overall
deadline from connecting to the last byte of the answer, whatever the server trickles, and a
cap on the answer's size; a body shorter than its Content-Length is retried like a reset
connection. What the server says is quoted scrubbed of credentials (``redact``), and the server
is named without ``user:password@``.

Writes follow Kubernetes' own rules:
- rackctl's objects (Kueue Topology, ResourceFlavor, ClusterQueue) go through server-side apply
  with field manager ``rackctl``; a conflict with another manager is an error unless forced.
- Nodes are never applied (server-side apply would create a Node that vanished): their labels,
  taints and ``spec.unschedulable`` are changed by a strategic-merge patch, which fails with 404
  on a missing Node. Taints are a list the patch replaces whole, so that patch carries the
  Node's ``resourceVersion`` and fails with 409 if the Node changed since it was read.
"""

from __future__ import annotations

import json
import os
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Protocol
from urllib.parse import urlsplit

from reconciler.errors import InputError, TargetError
from reconciler.guard import deadline, httpguard, redact
from reconciler.guard.retry import RetryPolicy, retry_after_seconds
from reconciler.ids import Hostname
from reconciler.targets.kubernetes import renderers
from reconciler.targets.kubernetes.objects import KubeObject, ObjectKind, Served, label_selector

FIELD_MANAGER = "rackctl"
COMPUTE_DOMAIN_GROUP = "resource.nvidia.com"
COMPUTE_DOMAIN_PLURAL = "computedomains"
APPLY = "application/apply-patch+yaml"
#: (connect, read) seconds for every request: a stalled API server must fail the run, not hang it.
#: A server that trickles its answer is stopped by each attempt's overall deadline
#: (``httpguard.REQUEST_DEADLINE_S``, less when the pass's ``--timeout`` leaves less).
REQUEST_TIMEOUT = (10, 120)
#: Longest server message quoted in an error (characters).
MAX_QUOTED_CHARS = 300
STRATEGIC = "application/strategic-merge-patch+json"
_PAGE = 500
#: Most objects one list may hold: 4 times the 36,000 Nodes of 2,000 racks. A server that hands out
#: pages without end fails the read instead of filling memory.
MAX_LIST_ITEMS = 150_000
#: Most requests rackctl has in flight at once (Node patches of a fleet's first apply): enough to
#: hide the round trip, few enough not to crowd the API server's priority-and-fairness queues.
MAX_IN_FLIGHT = 16
#: How every ``KubeApi`` request is retried (tests put a policy that does not sleep here).
RETRY = RetryPolicy()
#: 500 reasons of a server that may answer differently next time (a lost etcd leader, a slow
#: write); a 500 with another reason (e.g. a typed-patch failure) would fail the same way again.
_TRANSIENT_500 = ("InternalError", "ServerTimeout", "Timeout")


@dataclass(frozen=True)
class LiveNode:
    """A Node as rackctl needs it. ``labels``: only the keys under rackctl's prefix;
    ``taints``: the whole ``spec.taints`` list; ``ready``: the Ready condition is True;
    ``cordon_reason``: rackctl's cordon annotation (empty when rackctl did not cordon it)."""

    name: Hostname
    labels: dict[str, str]
    unschedulable: bool
    taints: tuple[dict[str, Any], ...]
    ready: bool
    resource_version: str
    cordon_reason: str = ""


@dataclass(frozen=True)
class LiveKubernetes:
    """What the server holds. ``served``: group -> kind -> versions offered, for the renderers'
    groups; ``objects``: address (``kubernetes/SHOWN/NAME``, ``objects``) -> object rackctl owns; ``unowned``: desired addresses that exist
    without rackctl's ownership labels; ``compute_domains``: every ComputeDomain (None when the
    server does not serve the API)."""

    served: Served
    nodes: dict[Hostname, LiveNode]
    objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    unowned: dict[str, dict[str, Any]] = field(default_factory=dict)
    compute_domains: list[dict[str, Any]] | None = None


def connect(kubeconfig: str | None = None, context: str | None = None, *, client_retries: bool = True) -> Any:
    """An ``ApiClient``: ``kubeconfig`` when given, else in-cluster config (a pod's
    ServiceAccount), else ``$KUBECONFIG`` / ``~/.kube/config``. ``client_retries``: False when
    the caller retries itself (``KubeApi``): the transport then makes one attempt per request
    (urllib3 would otherwise repeat reads and 429s unseen and unpaced). The client's pools get
    ``httpguard``'s bounds, and its credentials are remembered for ``redact.scrub``. Raises
    ``InputError`` for a ``kubeconfig`` that does not exist, else ``TargetError``."""
    import yaml
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    if kubeconfig is not None and not os.path.exists(kubeconfig):
        # the client reads a missing file as an empty config ("No configuration found")
        raise InputError("kubeconfig not found; expected a kubeconfig file (--kubeconfig)", file=kubeconfig)
    cfg = client.Configuration()
    # One pooled connection per request in flight (Node patches go out MAX_IN_FLIGHT at a time).
    cfg.connection_pool_maxsize = MAX_IN_FLIGHT
    if not client_retries:
        cfg.retries = False
    source = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
    try:
        loaded = False
        if kubeconfig is None and context is None:
            try:
                config.load_incluster_config(client_configuration=cfg)
                loaded, source = True, "the in-cluster config"
            except ConfigException:
                pass
        if not loaded:
            # $KUBECONFIG read now: the client's own default is $KUBECONFIG as it was at its import.
            config.load_kube_config(config_file=kubeconfig or os.environ.get("KUBECONFIG", "~/.kube/config"),
                                    context=context, client_configuration=cfg)
    except (ConfigException, OSError, ValueError, TypeError, AttributeError, KeyError, yaml.YAMLError) as exc:
        why = redact.scrub(str(exc).splitlines()[0]) if str(exc) else type(exc).__name__
        if not isinstance(exc, (ConfigException, OSError)):
            why = f"not a kubeconfig: {type(exc).__name__}: {why}"
        hint = ("check the name against `kubectl config get-contexts`" if context and "context" in why.lower()
                else "pass --kubeconfig FILE, set KUBECONFIG, or run in a pod with a ServiceAccount; "
                "without one, only `plan --offline` works (a snapshot reads the API server)")
        raise TargetError(f"{source}: no usable Kubernetes configuration ({why})", hint=hint) from None
    _guard_credentials(cfg, source)
    return httpguard.install(client.ApiClient(cfg))


def _guard_credentials(cfg: Any, source: str) -> None:
    """Remember ``cfg``'s credentials for ``redact.scrub``, drop ``user:password@`` from its server
    URL (urllib3 never sends it), and trim a token's surrounding white space (a token file or
    field written with a stray newline), also when the client reloads it before each request.
    Raises ``TargetError``, never quoting the token, for one with a control character inside."""
    redact.remember(cfg.password, cfg.username and cfg.password and f"{cfg.username}:{cfg.password}")
    for name in ("key_file", "cert_file"):  # client-key-data lands in a temporary file
        path = getattr(cfg, name, None)
        if path and os.path.isfile(path) and os.path.getsize(path) < 1024 * 1024:
            with open(path, "rb") as f:
                redact.remember(f.read())
    try:
        url = urlsplit(cfg.host or "")
        userinfo = url.netloc.rpartition("@")[0]
    except ValueError:  # not a URL: the request fails, saying so
        userinfo = ""
    if userinfo:
        redact.remember(userinfo, url.password)
        cfg.host = redact.without_userinfo(cfg.host)
    _trim_token(cfg, source)
    hook = cfg.refresh_api_key_hook
    if hook is not None:
        def refreshed(c: Any) -> None:
            hook(c)
            c.refresh_api_key_hook = refreshed  # the client's hook puts itself back each time
            _trim_token(c, source)
        cfg.refresh_api_key_hook = refreshed


def _trim_token(cfg: Any, source: str) -> None:
    """Trim each of ``cfg.api_key``'s tokens and remember it for ``redact.scrub`` (as sent, and
    the token alone: ``redact.remember`` keeps both). Raises ``TargetError`` (see
    ``_guard_credentials``)."""
    for key, value in list(cfg.api_key.items()):
        if not isinstance(value, str):
            continue
        scheme, _, token = value.partition(" ")
        trimmed = f"{scheme} {token.strip()}" if token else value.strip()
        redact.remember(value, trimmed)
        if any(ord(c) < 32 or ord(c) == 127 for c in trimmed):
            raise TargetError(f"{source}: the user's credential (a {scheme} token) holds a control character; "
                              "expected one line of printable text", hint="write the token again without line breaks")
        cfg.api_key[key] = trimmed


class KubeApi:
    """The requests rackctl makes, over one ``ApiClient`` (best made by ``connect(...,
    client_retries=False)``). Every request has a timeout (``REQUEST_TIMEOUT``: connect, read
    seconds), is retried by ``retry`` (default ``RETRY``) when its failure is transient, and
    every answer is checked for the shape rackctl reads; a failure is a ``TargetError`` naming
    the request and the server (and the attempts, when more than one). ``retried``: why -> how
    many retries (e.g. ``"HTTP 429"``, ``"timed out"``), over every request; thread-safe."""

    def __init__(self, api_client: Any, retry: RetryPolicy | None = None) -> None:
        from kubernetes import client

        self.server = redact.without_userinfo(getattr(api_client.configuration, "host", "") or "the API server")
        self.retry = retry or RETRY
        self.retried: Counter[str] = Counter()
        self._retried_lock = threading.Lock()
        self._core = client.CoreV1Api(api_client)
        self._custom = client.CustomObjectsApi(api_client)
        self._apis = client.ApisApi(api_client)

    def count_retries(self, retried: dict[str, int]) -> None:
        """Add retries made elsewhere on this API server's behalf (why -> how many; a child
        process listing the Nodes, ``targets.nodelist``) to ``retried``."""
        with self._retried_lock:
            self.retried.update(retried)

    # -- discovery --------------------------------------------------------------------------

    def served_kinds(self, group: str) -> dict[str, tuple[str, ...]]:
        """Kind -> versions of ``group`` the server offers, from ``/apis`` and
        ``/apis/GROUP/VERSION``; empty when the group is absent."""
        groups = self._json("discover API groups", lambda: self._apis.get_api_versions(
            _preload_content=False, _request_timeout=REQUEST_TIMEOUT))
        entries = _list_of(groups.get("groups"), "discover API groups: groups", self.server)
        versions: tuple[Any, ...] = next(  # as the server wrote them
            (tuple(v.get("version") for v in g.get("versions") or [] if isinstance(v, dict))
             for g in entries if g.get("name") == group), ())
        kinds: dict[str, list[str]] = {}
        for version in versions:
            what = f"discover {group}/{version}"
            def resources(v: Any = version) -> Any:
                return self._custom.get_api_resources(group, v, _preload_content=False,
                                                      _request_timeout=REQUEST_TIMEOUT)
            doc = self._json(what, resources)
            for r in _list_of(doc.get("resources"), f"{what}: resources", self.server):
                if isinstance(r.get("name"), str) and "/" not in r["name"] and isinstance(r.get("kind"), str):
                    kinds.setdefault(r["kind"], []).append(version)
        return {k: tuple(v) for k, v in kinds.items()}

    # -- reads ------------------------------------------------------------------------------

    def list_nodes(self, selector: str | None = None) -> Iterator[dict[str, Any]]:
        """Every Node (matching label selector ``selector``, when given), as API JSON, page by page."""
        extra: dict[str, Any] = {"label_selector": selector} if selector else {}
        yield from self._pages("list Nodes", lambda **kw: self._core.list_node(_preload_content=False, **extra,
                                                                               **kw))

    def list_owned(self, kind: ObjectKind, version: str, selector: str) -> Iterator[dict[str, Any]]:
        """Every cluster-scoped object of ``kind`` at ``version`` matching ``selector``."""
        yield from self._pages(f"list {kind.shown} objects", lambda **kw: self._custom.list_cluster_custom_object(
            kind.group, version, kind.plural, label_selector=selector, _preload_content=False, **kw))

    def get(self, obj: KubeObject) -> dict[str, Any] | None:
        """The live object at ``obj``'s name, or None when there is none."""
        try:
            return self._json(f"get {obj.address}", lambda: self._custom.get_cluster_custom_object(
                obj.group, obj.version, obj.plural, obj.name, _preload_content=False,
                _request_timeout=REQUEST_TIMEOUT), missing_ok=True)
        except _Missing:
            return None

    def list_compute_domains(self, version: str) -> list[dict[str, Any]]:
        """Every ComputeDomain in every namespace."""
        return list(self._pages("list ComputeDomains", lambda **kw: self._custom.list_custom_object_for_all_namespaces(
            COMPUTE_DOMAIN_GROUP, version, COMPUTE_DOMAIN_PLURAL, _preload_content=False, **kw)))

    def _pages(self, what: str, call: Callable[..., Any]) -> Iterator[dict[str, Any]]:
        """Every item of a paged list. When a continue token has expired (410: the server no
        longer holds the list's snapshot) the list starts again from the beginning, once; the
        items already handed out are not handed out again (each is as the first snapshot saw
        it), so no object is listed twice. Raises ``TargetError``."""
        token, restarted, count = None, False, 0
        seen: set[str] = set()
        given: set[tuple[Any, Any]] = set()
        while True:
            kwargs: dict[str, Any] = {"limit": _PAGE, "_request_timeout": REQUEST_TIMEOUT}
            if token:
                kwargs["_continue"] = token
            try:
                doc = self._json(what, lambda: call(**kwargs), expired_ok=bool(token))
            except _Expired:
                if restarted:
                    raise TargetError(f"kubernetes: {what}: {self.server} let the list's continue token expire "
                                      "twice (HTTP 410); the list cannot be read consistently",
                                      hint="retry later; a server under heavy write load compacts old snapshots "
                                           "quickly") from None
                token, seen, restarted = None, set(), True
                continue
            # A list answer always holds an items list; anything else (a Status, null) is a
            # failed read, never an empty cluster.
            items = _list_of(doc.get("items"), f"{what}: items", self.server)
            count += len(items)
            if count > MAX_LIST_ITEMS:
                raise TargetError(f"kubernetes: {what}: {self.server} listed more than {MAX_LIST_ITEMS} objects (the "
                                  "most rackctl reads of one kind); the list was not read")
            for item in items:
                meta: dict[str, Any] = item["metadata"] if isinstance(item.get("metadata"), dict) else {}
                key = (meta.get("namespace"), meta.get("name"))
                if isinstance(key[1], str) and isinstance(key[0], (str, type(None))):  # else parse_node says so
                    if restarted and key in given:
                        continue
                    given.add(key)
                yield item
            token = (doc.get("metadata") or {}).get("continue") if isinstance(doc.get("metadata"), dict) else None
            if not token:
                return
            if not isinstance(token, str):
                raise TargetError(f"kubernetes: {what}: {self.server} answered with a continue token that is a JSON "
                                  f"{type(token).__name__}, not a string; the list was not read")
            if token in seen:
                raise TargetError(f"kubernetes: {what}: {self.server} repeated a continue token; the list never ends")
            seen.add(token)

    # -- writes -----------------------------------------------------------------------------

    def apply(self, obj: KubeObject, *, dry_run: bool, force: bool) -> dict[str, Any]:
        """Server-side apply of ``obj`` as field manager ``rackctl``; returns the resulting object."""
        kwargs: dict[str, Any] = {"field_manager": FIELD_MANAGER, "_content_type": APPLY,
                                  "_preload_content": False, "_request_timeout": REQUEST_TIMEOUT}
        if force:
            kwargs["force"] = True
        if dry_run:
            kwargs["dry_run"] = "All"
        return self._json(("dry-run apply " if dry_run else "apply ") + obj.address, lambda:
                          self._custom.patch_cluster_custom_object(obj.group, obj.version, obj.plural, obj.name,
                                                                   obj.body, **kwargs))

    def delete(self, obj: KubeObject, *, dry_run: bool) -> None:
        """Delete ``obj`` (already gone is fine)."""
        try:
            self._call(f"delete {obj.address}", lambda: self._custom.delete_cluster_custom_object(
                obj.group, obj.version, obj.plural, obj.name, dry_run="All" if dry_run else None,
                _preload_content=False, _request_timeout=REQUEST_TIMEOUT), missing_ok=True)
        except _Missing:
            pass

    def patch_node(self, name: str, body: dict[str, Any]) -> bool:
        """Strategic-merge patch of Node ``name``; False when the Node does not exist (never
        created). Raises ``TargetError`` otherwise, e.g. 409 when ``body`` carries a stale
        ``metadata.resourceVersion`` (not retried: the Node changed since it was read)."""
        meta = body.get("metadata")
        precondition = isinstance(meta, dict) and bool(meta.get("resourceVersion"))
        try:
            self._call(f"patch Node {name}", lambda: self._core.patch_node(
                name, body, field_manager=FIELD_MANAGER, _content_type=STRATEGIC, _preload_content=False,
                _request_timeout=REQUEST_TIMEOUT), missing_ok=True, precondition=precondition)
            return True
        except _Missing:
            return False

    # -- plumbing ---------------------------------------------------------------------------

    def _call(self, what: str, fn: Callable[[], Any], *, missing_ok: bool = False, expired_ok: bool = False,
              precondition: bool = False) -> bytes:
        """The body of ``fn()``'s answer (bytes; ``fn`` asks with ``_preload_content=False``), tried
        again while it fails transiently (see the module docstring) and ``self.retry`` allows.
        Each attempt, its body read included, is bounded by ``httpguard``: a deadline (not
        retried: the server answers, too slowly) and a size. ``missing_ok``: raise ``_Missing``
        on 404; ``expired_ok``: raise ``_Expired`` on 410; ``precondition``: the request carries
        a resourceVersion, so a 409 means the object changed (never retried). Raises
        ``TargetError``."""
        attempt, started = 0, self.retry.clock()
        while True:
            attempt += 1
            try:
                return bounded_answer(what, self.server, fn)
            except TargetError:
                raise
            except Exception as exc:
                status = getattr(exc, "status", None)
                if status is None and not type(exc).__module__.startswith(("kubernetes", "urllib3")):
                    raise
                if status == 404 and missing_ok:
                    raise _Missing() from None
                if status == 410 and expired_ok:
                    raise _Expired() from None
                if status == 409 and precondition:
                    raise _changed(what, exc, self.server, attempt) from None
                why, retry_after = _transient(exc)
                delay = self.retry.delay(attempt, retry_after) if why else 0.0
                if why is None or not self.retry.another(attempt, started, delay):
                    raise _error(what, exc, self.server, attempts=attempt) from None
            with self._retried_lock:
                self.retried[why] += 1
            self.retry.sleep(delay)

    def _json(self, what: str, fn: Callable[[], Any], *, missing_ok: bool = False,
              expired_ok: bool = False) -> dict[str, Any]:
        data = self._call(what, fn, missing_ok=missing_ok, expired_ok=expired_ok)
        try:
            doc = json.loads(data)
        except (ValueError, TypeError, RecursionError) as exc:
            raise TargetError(f"kubernetes: {what}: {self.server} answered with something that is not JSON "
                              f"({type(exc).__name__})") from None
        if not isinstance(doc, dict):
            raise TargetError(f"kubernetes: {what}: {self.server} answered with a JSON {type(doc).__name__}, "
                              "not an object")
        return doc


def bounded_answer(what: str, server: str, fn: Callable[[], Any]) -> bytes:
    """The body of ``fn()``'s answer (bytes; ``fn`` asks with ``_preload_content=False``) in one
    attempt bounded by ``httpguard``: a deadline (``REQUEST_DEADLINE_S``, or what is left of the
    pass's ``--timeout``) and a size. Raises ``TargetError`` naming ``what`` and ``server`` for an
    attempt past its deadline (not worth retrying: the server answers, too slowly) or too large,
    else what ``fn`` or reading the body raised."""
    seconds = deadline.cap(httpguard.REQUEST_DEADLINE_S, f"waiting for {what}")
    try:
        with httpguard.attempt(seconds) as watched:
            try:
                return httpguard.read_answer(fn())
            except Exception:
                if watched.expired:
                    raise _TooSlow() from None
                raise
    except _TooSlow:
        passed = (f"before the pass's deadline (--timeout {deadline.limit():g} s); nothing was written"
                  if seconds < httpguard.REQUEST_DEADLINE_S else
                  f"within {httpguard.REQUEST_DEADLINE_S:g} s (the deadline of one request); gave up")
        raise TargetError(f"kubernetes: {what}: {server} sent no complete answer {passed}",
                          hint="the API server or the network to it is too slow; check its health "
                          "(`kubectl get --raw /readyz`)") from None
    except httpguard.AnswerTooLarge as exc:
        why = exc.args[0] if exc.args else (f"an answer larger than {httpguard.MAX_ANSWER_BYTES // 2**20} MiB, the "
                                            "most rackctl reads")
        raise TargetError(f"kubernetes: {what}: {server} sent {why}; not read") from None


class _Missing(Exception):
    """A 404 where absence is an answer (get, delete, patch of a vanished Node)."""


class _TooSlow(Exception):
    """An attempt that passed its deadline (``httpguard.Attempt.expired``)."""


class _Expired(Exception):
    """A 410 on a list page: its continue token is too old (the list must start again)."""


def _status_doc(exc: Exception) -> dict[str, Any]:
    """The metav1.Status an ``ApiException`` carries (empty when its body is not one: not JSON,
    not an object, or nested too deeply to decode)."""
    try:
        doc = json.loads(getattr(exc, "body", "") or "{}")
    except (ValueError, TypeError, RecursionError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _transient(exc: Exception) -> tuple[str | None, float | None]:
    """Whether a failed request may succeed if sent again: (why, for ``KubeApi.retried``, or
    None when not; the server's Retry-After in seconds, or None)."""
    status = getattr(exc, "status", None)
    if status is None:  # no answer: urllib3's exception, perhaps wrapped in MaxRetryError
        text = str(getattr(exc, "reason", None) or exc).lower()
        # A body shorter than its Content-Length, or a chunked one cut off: a reset, in effect.
        for words, why in (("incompleteread", "short answer"), ("ended prematurely", "short answer"),
                           ("timed out", "timed out"), ("refused", "connection refused"),
                           ("reset", "connection reset"), ("aborted", "connection reset"),
                           ("closed connection", "connection reset"), ("broken pipe", "connection reset")):
            if words in text:
                return why, None
        return None, None
    headers = getattr(exc, "headers", None)
    retry_after = retry_after_seconds(headers.get("Retry-After") if headers is not None else None)
    doc = _status_doc(exc)
    if status in (429, 502, 503, 504):
        return f"HTTP {status}", retry_after
    if status == 500 and (not doc or doc.get("reason") in _TRANSIENT_500):
        return "HTTP 500", retry_after
    if status == 409 and doc.get("reason") == "Conflict":
        causes = (doc.get("details") or {}).get("causes") if isinstance(doc.get("details"), dict) else None
        ownership = any(isinstance(c, dict) and c.get("type") == "FieldManagerConflict" for c in causes or [])
        if not ownership and "the object has been modified" in str(doc.get("message", "")):
            return "HTTP 409", None  # lost a race with another writer; nothing was written
    return None, None


def _changed(what: str, exc: Exception, server: str, attempt: int) -> TargetError:
    """The 409 of a request with a resourceVersion precondition: the object changed since read
    (perhaps by this very write, when an earlier ``attempt`` got no clear answer)."""
    first = _error(what, exc, server).message
    maybe = (" (an earlier attempt got no clear answer and may have applied it: the next plan shows whether it did)"
             if attempt > 1 else "")
    return TargetError(f"{first}; not retried: the object changed since rackctl read it{maybe}",
                       hint="run plan (or apply) again: the change is then computed from the object as it is now")


def _list_of(value: Any, what: str, server: str) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise TargetError(f"kubernetes: {what}: {server} answered without a list of objects")
    return value


class KubeReads(Protocol):
    """The reads ``read_live`` makes: ``KubeApi``'s, or a live snapshot's replay of them."""

    server: str

    def served_kinds(self, group: str) -> dict[str, tuple[str, ...]]: ...

    def list_nodes(self) -> Iterator[dict[str, Any]]: ...

    def list_owned(self, kind: ObjectKind, version: str, selector: str) -> Iterator[dict[str, Any]]: ...

    def get(self, obj: KubeObject) -> dict[str, Any] | None: ...

    def list_compute_domains(self, version: str) -> list[dict[str, Any]]: ...


def read_live(api: KubeReads, desired_objects: list[KubeObject], owner_labels: dict[str, str], label_prefix: str,
              cordon_annotation: str, nodes: dict[Hostname, LiveNode] | None = None,
              served: Served | None = None) -> LiveKubernetes:
    """Read what rackctl compares: the renderers' kinds served (``served``: already discovered,
    ``served_groups``), every Node (rackctl's labels only; ``nodes``: already read by
    ``read_nodes``), rackctl's objects of every registered kind served (listed by
    ``owner_labels`` and checked here too: a server that ignored the selector must not make
    others' objects look owned), desired objects that exist unowned, and the ComputeDomains when
    their API is served. Raises ``TargetError``."""
    if served is None:
        served = served_groups(api)
    if nodes is None:
        nodes = read_nodes(api, label_prefix, cordon_annotation)
    objects: dict[str, dict[str, Any]] = {}
    versions_used = {o.type: o.version for o in desired_objects}
    selector = label_selector(owner_labels)
    for kind in renderers.KINDS:
        versions = served.get(kind.group, {}).get(kind.kind)
        if not versions:
            continue
        version = versions_used.get(kind) or next(v for v in kind.versions + versions if v in versions)
        for doc in api.list_owned(kind, version, selector):
            meta = doc.get("metadata")
            if isinstance(meta, dict) and isinstance(meta.get("name"), str) and owned(doc, owner_labels):
                objects[f"kubernetes/{kind.shown}/{meta['name']}"] = doc
    unowned = {}
    for obj in desired_objects:
        if obj.address not in objects:
            held = api.get(obj)
            if held is not None:
                unowned[obj.address] = held
    domains = None
    cd_versions = api.served_kinds(COMPUTE_DOMAIN_GROUP).get("ComputeDomain", ())
    if cd_versions:
        domains = api.list_compute_domains(cd_versions[0])
    return LiveKubernetes(served, nodes, objects, unowned, domains)


def served_groups(api: KubeReads) -> Served:
    """Group -> kind -> versions served, for every renderer's group (``renderers.GROUPS``)."""
    return {group: api.served_kinds(group) for group in renderers.GROUPS}


def read_nodes(api: KubeReads, label_prefix: str, cordon_annotation: str) -> dict[Hostname, LiveNode]:
    """Every Node by name, parsed (``parse_node``). Raises ``TargetError``."""
    nodes: dict[Hostname, LiveNode] = {}
    for doc in api.list_nodes():
        node = parse_node(doc, label_prefix, cordon_annotation, api.server)
        nodes[node.name] = node
    return nodes


def owned(doc: dict[str, Any], owner_labels: dict[str, str]) -> bool:
    """Whether ``doc`` carries every one of ``owner_labels``."""
    labels = (doc.get("metadata") or {}).get("labels")
    return isinstance(labels, dict) and all(labels.get(k) == v for k, v in owner_labels.items())


def parse_node(doc: dict[str, Any], label_prefix: str, cordon_annotation: str, server: str = "the API server"
               ) -> LiveNode:
    """A Node document -> ``LiveNode`` (labels: rackctl's keys only, ``is_rackctl_label``).
    Raises ``TargetError`` naming the Node and field for a document of the wrong shape."""
    meta = doc.get("metadata")
    if not isinstance(meta, dict):
        meta = {}
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise TargetError(f"kubernetes: list Nodes: {server} returned a Node without metadata.name")

    def field_of(parent: Any, key: str, kind: type, where: str) -> Any:
        value = parent.get(key) if isinstance(parent, dict) else None
        if value is None:
            return kind()
        if not isinstance(value, kind):
            raise TargetError(f"kubernetes: Node {name}: {where} is a {type(value).__name__}, expected a "
                              f"{kind.__name__} (from {server})")
        return value

    spec, status = field_of(doc, "spec", dict, "spec"), field_of(doc, "status", dict, "status")
    all_labels = field_of(meta, "labels", dict, "metadata.labels")
    annotations = field_of(meta, "annotations", dict, "metadata.annotations")
    taints = field_of(spec, "taints", list, "spec.taints")
    conditions = field_of(status, "conditions", list, "status.conditions")
    if not all(isinstance(t, dict) for t in taints) or not all(isinstance(c, dict) for c in conditions):
        raise TargetError(f"kubernetes: Node {name}: spec.taints and status.conditions must be lists of objects "
                          f"(from {server})")
    labels = {k: v for k, v in all_labels.items() if is_rackctl_label(k, label_prefix) and isinstance(v, str)}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    reason = annotations.get(cordon_annotation, "")
    return LiveNode(Hostname(name), labels, spec.get("unschedulable") is True, tuple(taints), ready,
                    str(meta.get("resourceVersion", "")), reason if isinstance(reason, str) else "")


#: The Node label names rackctl renders under its prefix (``tier.<name>`` for tiers).
NODE_LABELS = ("cluster", "rack", "nvlink-domain", "slice")


def is_rackctl_label(key: str, prefix: str) -> bool:
    """Whether ``key`` is one of the Node labels rackctl renders (and so may change or remove):
    only these, never another key that happens to share the prefix."""
    if not key.startswith(prefix):
        return False
    name = key[len(prefix):]
    return name in NODE_LABELS or (name.startswith("tier.") and len(name) > 5)


def _error(what: str, exc: Exception, server: str, *, attempts: int = 1) -> TargetError:
    """One line for a failed request: the status and the server's own message (and how many
    attempts were made, when more than one)."""
    status = getattr(exc, "status", None)
    tries = f"; gave up after {attempts} attempts" if attempts > 1 else ""
    if status is None:
        return TargetError(f"kubernetes: {what}: cannot reach {server} ({_network_why(exc)}){tries}",
                           hint="check the kubeconfig's server address and the network")
    doc = _status_doc(exc)
    message = doc.get("message") or getattr(exc, "reason", "") or ""
    details = doc.get("details")
    causes = details.get("causes") if isinstance(details, dict) else None
    causes = [c.get("message", "") for c in causes if isinstance(c, dict)] if isinstance(causes, list) else []
    hint = {401: "the credentials were refused", 403: "rackctl's account lacks a permission (see "
            "examples/kubernetes/reconciler-rbac.yaml)", 409: "another field manager owns these fields: pass "
            "--force-conflicts to take them over, or resolve the conflict" if "conflict" in str(message).lower()
            else None}.get(status)
    detail = f" ({'; '.join(str(c) for c in causes if c)})" if any(causes) and status == 409 else ""
    return TargetError(f"kubernetes: {what}: HTTP {status} from {server}: {quoted(f'{message}{detail}')}{tries}",
                       hint=hint)


def quoted(text: str) -> str:
    """A server's message as rackctl quotes it: one line, at most ``MAX_QUOTED_CHARS``
    characters, credentials removed (a server may echo the request's Authorization header)."""
    line = " ".join(redact.scrub(str(text)).split())
    return line if len(line) <= MAX_QUOTED_CHARS else line[:MAX_QUOTED_CHARS - 3] + "..."


def _network_why(exc: Exception) -> str:
    """Why a request got no answer, in words (urllib3 wraps the cause in ``MaxRetryError``)."""
    cause = getattr(exc, "reason", None) or exc
    text = str(cause).lower()
    for words, said in (("refused", "connection refused"), ("timed out", "timed out"),
                        ("name or service not known", "unknown host name"), ("nodename nor servname", "unknown host name"),
                        ("certificate", "TLS certificate not accepted"), ("ssl", "TLS handshake failed"),
                        ("reset", "connection reset"), ("aborted", "connection closed without an answer"),
                        ("closed connection", "connection closed without an answer")):
        if words in text:
            return said
    return "no answer"
