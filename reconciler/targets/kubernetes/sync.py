"""One pass of the Kubernetes target: read, compare locally, dry-run what differs, apply.

``plan`` renders the desired labels and Kueue objects, reads the server (unless offline), keeps
what differs (``kubeplan.compare``) and sends only that to a server-side dry-run, whose result
gives the diff shown in the plan and catches conflicts and schema violations before any write.
``apply`` then writes in order: Node labels, the Kueue objects (Topology, ResourceFlavors,
ClusterQueues), taints/cordons, and prunes owned objects that left the intent in reverse order.
A pass with nothing to do sends no write and no dry-run.
"""

from __future__ import annotations

import datetime as dt
import difflib
import itertools
import json
import threading
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Callable, cast

import yaml

from reconciler.diagnostics import ERROR, INFO, Diagnostic
from reconciler.errors import TargetError
from reconciler.ids import ClusterUUID, Hostname
from reconciler.intent.model import Intent
from reconciler.layout.model import Layout
from reconciler.layout.nodestates import HealthHistory
from reconciler.plan.model import Action, Cause, Change
from reconciler.state.statedir import KubeRecord
from reconciler.targets.kubernetes import computedomains, nodelist, renderers
from reconciler.targets.kubernetes.client import (FIELD_MANAGER, MAX_IN_FLIGHT, KubeApi, KubeReads, LiveKubernetes,
                                                  LiveNode, read_live, read_nodes, served_groups)
from reconciler.targets.kubernetes.compare import (KubeComparison, NodePatch, compare, cordon_annotation, differences,
                                                   digest)
from reconciler.targets.kubernetes.objects import KubeObject, Served
from reconciler.targets.kubernetes.options import KubeOptions
from reconciler.targets.kubernetes.render import DesiredKubernetes, render_kubernetes
from reconciler.text import hostlist

#: metadata fields the server sets; left out of the diffs people read.
_SERVER_FIELDS = ("managedFields", "resourceVersion", "generation", "uid", "creationTimestamp")
#: Why an orphan (``Cause.ORPHAN``) is deleted.
_ORPHAN = ("carries rackctl's owner labels, not in the intent and not in rackctl's apply record (left by an apply "
           "that crashed, or made by hand with rackctl's labels)")


@dataclass
class KubePass:
    """The Kubernetes part of one run."""

    desired: DesiredKubernetes
    api: KubeApi | KubeReads | None = None  # KubeReads: a live snapshot, read-only
    live: LiveKubernetes | None = None
    comparison: KubeComparison | None = None
    applies: list[KubeObject] = field(default_factory=list)  # objects that still differ after the dry-run
    replaces: set[str] = field(default_factory=set)  # addresses of those deleted and created again
    changes: list[Change] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    drift: list[dict[str, str]] = field(default_factory=list)

    @property
    def read(self) -> bool:
        return self.live is not None

    def to_json(self) -> dict[str, Any]:
        d = self.desired
        groups: dict[tuple[tuple[str, str], ...], list[str]] = {}
        for name, labels in d.node_labels.items():
            groups.setdefault(tuple(sorted(labels.items())), []).append(name)
        firsts = {k: min(v, key=hostlist.natural_key) for k, v in groups.items()}
        label_sets = [{"labels": dict(k), "nodes": hostlist.compress(groups[k])}
                      for k in sorted(groups, key=lambda k: hostlist.natural_key(firsts[k]))]
        return {"read": self.read, "labelPrefix": d.label_prefix, **renderers.plan_fields(d.versions),
                "labelledNodes": len(d.node_labels), "labelSets": label_sets, "objects": [o.body for o in d.objects]}


class NodeRead:
    """The renderers' kinds served and every Node, being read while the inventory loads
    (``start_node_read``)."""

    def __init__(self, future: Future[tuple[KubeApi, Served, dict[Hostname, LiveNode]]],
                 listing: nodelist.NodeListing | None) -> None:
        self._future = future
        self._listing = listing

    def result(self) -> tuple[KubeApi, Served, dict[Hostname, LiveNode]]:
        """(the connection, the renderers' kinds served (``served_groups``), Node name -> Node);
        raises what reading raised (``TargetError``, ``InputError``)."""
        return self._future.result()

    def cancel(self) -> None:
        """Stop a child process still listing the Nodes (the pass failed first); a thread is a
        daemon and needs no stopping."""
        if self._listing is not None:
            self._listing.cancel()


def start_node_read(intent: Intent, options: KubeOptions, *, in_child: bool = False) -> NodeRead:
    """Connect, then discover the renderers' kinds served and list every Node in a background thread,
    while the caller reads its other inputs (the inventory): at 36,000 Nodes an API server
    spends seconds building the list, which the pass would otherwise wait for. ``in_child``:
    the Node list is read and parsed in a child process (``targets.nodelist``), so that its CPU
    does not compete with the caller's for the interpreter lock (worth it for fleet-sized
    clusters only: the child's start costs a second of CPU). ``plan`` takes the result; an
    error reading the server (down, refusing) is raised there, after any error in the
    inventory, as if read in turn. A pass that fails before then exits without waiting for the
    list: the thread is a daemon, and ``NodeRead.cancel`` stops the child. Raises
    ``InputError``/``TargetError`` for a kubeconfig that cannot be used (``connect``)."""
    assert intent.kubernetes is not None
    prefix = intent.kubernetes.label_prefix
    annotation = cordon_annotation(prefix)
    future: Future[tuple[KubeApi, Served, dict[Hostname, LiveNode]]] = Future()
    # Connected (the client imported, the kubeconfig read) here, not in the thread: importing is
    # CPU work holding the GIL, and would starve the inventory's file reads of it.
    api = options.connect()
    listing = nodelist.start(options.kubeconfig, options.context, prefix, annotation) if in_child else None

    def read() -> None:
        try:
            served = served_groups(api)
            if listing is None:
                nodes = read_nodes(api, prefix, annotation)
            else:
                nodes, retried = listing.result()
                api.count_retries(retried)
            future.set_result((api, served, nodes))
        except Exception as exc:  # noqa: BLE001 - handed to plan(), which raises it
            future.set_exception(exc)

    threading.Thread(target=read, name="rackctl-read-nodes", daemon=True).start()
    return NodeRead(future, listing)


def plan(intent: Intent, layout: Layout, domain_of: dict[Hostname, ClusterUUID], record: KubeRecord,
         history: HealthHistory, now: dt.datetime, options: KubeOptions, *, offline: bool,
         replay: KubeReads | None = None, node_read: NodeRead | None = None) -> KubePass:
    """Plan the Kubernetes target. ``replay``: read a live snapshot instead of the server (no
    dry-run then: each diff is the live object with rackctl's fields laid over it).
    ``node_read``: the connection and Nodes ``start_node_read`` began (else read here). Raises
    ``TargetError`` when the server (or snapshot) cannot be read."""
    target = intent.kubernetes
    assert target is not None
    if offline:
        versions = renderers.choose_versions(target, None)
        kpass = KubePass(render_kubernetes(intent, layout, domain_of, versions))
        kpass.changes = _against_record(kpass.desired, record, layout.held_trays)
        kpass.diagnostics.append(Diagnostic(INFO, "kubernetes-not-read", "the Kubernetes API server was not read "
                                            f"(--offline): rendered with {renderers.describe(versions)} and "
                                            "compared with what rackctl last applied (the state dir), not with the "
                                            "cluster", "kubernetes"))
        return kpass
    api: KubeApi | KubeReads
    if node_read is not None:
        api, served, nodes = node_read.result()
    else:
        api = replay or options.connect()
        served, nodes = served_groups(api), None
    versions = renderers.choose_versions(target, served)
    kpass = KubePass(render_kubernetes(intent, layout, domain_of, versions), api)
    missing = renderers.missing(target, served, versions)
    kpass.diagnostics += missing
    desired = kpass.desired
    kpass.live = read_live(api, desired.objects, desired.owner_labels, desired.label_prefix,
                           cordon_annotation(desired.label_prefix), nodes, served)
    cmp = kpass.comparison = compare(intent, desired, layout, kpass.live, record, history, now,
                                     allow_empty=options.prune_empty)
    # A kind not rendered (not served at the pinned version) is not pruned either.
    cmp.deletes = [o for o in cmp.deletes if o.type in versions]
    kpass.diagnostics += cmp.diagnostics
    kpass.drift += cmp.drift
    for p in cmp.label_patches:
        address = f"kubernetes/Node/{p.node}"
        kpass.changes.append(Change("node", address, Action.UPDATE, Cause(cmp.causes[address]),
                                    cmp.label_reasons[p.node]))
    if not missing:
        for obj in cmp.candidates:
            _dry_run(kpass, obj, options.force_conflicts, local=replay is not None)
    for obj in reversed(cmp.deletes):
        cause = Cause(cmp.causes[obj.address])
        why = _ORPHAN if cause is Cause.ORPHAN else "owned by rackctl, no longer in the intent"
        kpass.changes.append(Change("object", obj.address, Action.DELETE, cause, why,
                                    _diff(obj.address, obj.body, None)))
    for action, p, reason in cmp.health_patches:
        kpass.changes.append(Change("node", f"kubernetes/Node/{p.node}", Action(action), Cause.INTENT, reason))
    if kpass.live.compute_domains is not None:
        out = {s.tray for s in layout.tray_states}
        kpass.diagnostics += computedomains.check(kpass.live.compute_domains, layout.slice_of, out,
                                                  target.compute_domain_not_ready_s, now)
    return kpass


def _against_record(desired: DesiredKubernetes, record: KubeRecord, held: frozenset[Hostname]) -> list[Change]:
    """Offline: the changes from what rackctl last applied (its record) to the desired state,
    each object with its whole rendered manifest as the diff for review; the Nodes of held racks
    (``held``) change nothing."""
    why = "not compared with the cluster (--offline)"
    changes = []
    for name in sorted((set(desired.node_labels) | set(record.labels)) - held, key=hostlist.natural_key):
        labels = desired.node_labels.get(name)
        if labels is None:
            changes.append(Change("node", f"kubernetes/Node/{name}", Action.UPDATE, Cause.INTENT,
                                  f"rackctl's labels removed; {why}"))
        elif record.labels.get(name) != digest(labels):
            shown = ", ".join(f"{k}={v}" for k, v in sorted(labels.items()))
            changes.append(Change("node", f"kubernetes/Node/{name}", Action.UPDATE, Cause.INTENT, f"{shown}; {why}"))
    wanted = set()
    for obj in desired.objects:
        wanted.add(obj.address)
        if record.objects.get(obj.address) != digest(obj.body):
            action = Action.UPDATE if obj.address in record.objects else Action.CREATE
            changes.append(Change("object", obj.address, action, Cause.INTENT, f"{obj.type.shown} {obj.version}; {why}",
                                  _diff(obj.address, None, obj.body)))
    for address in sorted(set(record.objects) - wanted):
        if renderers.by_shown(address.split("/")[1]) not in desired.versions:
            continue  # a kind not rendered (offline, or asked never) is not pruned, as online
        changes.append(Change("object", address, Action.DELETE, Cause.INTENT, f"no longer in the intent; {why}"))
    return changes


def _dry_run(kpass: KubePass, obj: KubeObject, force: bool, *, local: bool = False) -> None:
    """Dry-run one differing object: a real change, a conflict, or nothing after all. ``local``:
    no server to ask (a live snapshot), so the result is the live object with the desired fields
    laid over it; conflicts then show only at apply."""
    assert kpass.api is not None and kpass.live is not None and kpass.comparison is not None
    have = kpass.live.objects.get(obj.address)
    replaced = renderers.replaced(obj, have) if have is not None else None
    if replaced is not None:  # no dry-run: an update is refused, and a create finds the object there
        assert have is not None
        others = _other_spec_managers(have)
        if others and not force:  # deleting it would drop their fields with it
            kpass.diagnostics.append(Diagnostic(
                ERROR, "kubernetes-conflict", f"{obj.address}: {replaced}, so it would be deleted and created again, "
                f"but {', '.join(others)} also manage(s) its spec (metadata.managedFields) (pass --force-conflicts "
                "to replace it anyway, or resolve the conflict)", obj.address))
            return
        kpass.applies.append(obj)
        kpass.replaces.add(obj.address)
        kpass.changes.append(Change("object", obj.address, Action.REPLACE, Cause(kpass.comparison.causes[obj.address]),
                                    f"{replaced}: deleted and created again", _diff(obj.address, have, obj.body)))
        return
    try:
        after = _laid_over(have or {}, obj.body) if local else _writer(kpass).apply(obj, dry_run=True, force=force)
    except TargetError as exc:
        code = "kubernetes-conflict" if "HTTP 409" in exc.message else "kubernetes-rejected"
        kpass.diagnostics.append(Diagnostic(ERROR, code, exc.message + (f" ({exc.hint})" if exc.hint else ""),
                                            obj.address))
        return
    diff = _diff(obj.address, have, after)
    if have is not None and not diff:
        return  # the server holds this already (e.g. fields in another order)
    why = "; ".join(differences(obj.body, have)[:4]) if have is not None else f"{obj.kind} {obj.version}"
    kpass.applies.append(obj)
    kpass.changes.append(Change("object", obj.address, Action.CREATE if have is None else Action.UPDATE,
                                Cause(kpass.comparison.causes[obj.address]), why, diff))


def _other_spec_managers(live: dict[str, Any]) -> list[str]:
    """The field managers other than rackctl that own fields of ``live``'s spec, sorted."""
    managed = (live.get("metadata") or {}).get("managedFields")
    return sorted({m["manager"] for m in managed if isinstance(m, dict) and isinstance(m.get("manager"), str)
                   and m["manager"] != FIELD_MANAGER and isinstance(m.get("fieldsV1"), dict)
                   and "f:spec" in m["fieldsV1"]}) if isinstance(managed, list) else []


def _laid_over(live: dict[str, Any], desired: dict[str, Any]) -> dict[str, Any]:
    """``live`` with ``desired``'s fields set: maps merged key by key, anything else replaced (how
    server-side apply treats rackctl's atomic lists and scalars, without field ownership)."""
    out = dict(live)
    for key, value in desired.items():
        old = out.get(key)
        out[key] = _laid_over(old, value) if isinstance(old, dict) and isinstance(value, dict) else value
    return out


def _diff(address: str, before: dict[str, Any] | None, after: dict[str, Any] | None) -> str:
    old, new = _shown(before), _shown(after)
    if old == new:
        return ""
    return "".join(difflib.unified_diff(old, new, f"a/{address}" if before else "/dev/null",
                                        f"b/{address}" if after else "/dev/null"))


def _shown(doc: dict[str, Any] | None) -> list[str]:
    if doc is None:
        return []
    doc = json.loads(json.dumps(doc))
    meta = doc.get("metadata") or {}
    for key in _SERVER_FIELDS:
        meta.pop(key, None)
    doc.pop("status", None)
    return yaml.safe_dump(doc, sort_keys=True, default_flow_style=False).splitlines(keepends=True)


@dataclass
class KubeApplied:
    """What ``apply`` did: counts, Nodes that vanished before their patch, and what is known to
    have landed: ``labels_landed``/``taints_landed`` (Nodes whose label or taint/cordon patch the
    server answered), ``objects_landed`` (addresses of objects applied or pruned), ``deleted``
    (addresses of objects being replaced whose delete was sent, and may have landed)."""

    labelled: int = 0
    applied: int = 0
    pruned: int = 0
    tainted: int = 0
    vanished: list[str] = field(default_factory=list)
    labels_landed: set[str] = field(default_factory=set)
    taints_landed: set[str] = field(default_factory=set)
    objects_landed: set[str] = field(default_factory=set)
    deleted: set[str] = field(default_factory=set)


def apply(kpass: KubePass, options: KubeOptions, *,
          on_progress: Callable[[int, int], None] | None = None, done: KubeApplied | None = None) -> KubeApplied:
    """Write what ``plan`` found, in order: taints and cordons, labels, objects, prunes. Raises ``TargetError`` on the first failed write
    (after the retries of ``targets.kubernetes``). ``on_progress(done, total)``: called with 0
    first, then after each write (a Node patch, an object applied or pruned). ``done``: filled
    in as writes land (and returned), so that after a failure the caller knows what did."""
    api, cmp = _writer(kpass), kpass.comparison
    assert cmp is not None
    done = done if done is not None else KubeApplied()
    total = len(cmp.label_patches) + len(kpass.applies) + len(cmp.health_patches) + len(cmp.deletes)
    writes = 0

    def wrote() -> None:
        nonlocal writes
        writes += 1
        if on_progress is not None:
            on_progress(writes, total)

    if on_progress is not None:
        on_progress(0, total)
    # Taints and cordons first: a taint patch replaces the list whole under the resourceVersion
    # read, which a label patch of the same Node would move on (a 409 for the taint).
    done.tainted = patch_nodes(api, [p for _, p, _ in cmp.health_patches], done.vanished, wrote,
                               landed=done.taints_landed)
    done.labelled = patch_nodes(api, cmp.label_patches, done.vanished, wrote, landed=done.labels_landed)
    for obj in kpass.applies:
        if obj.address in kpass.replaces:
            done.deleted.add(obj.address)  # before the call: its answer may be lost after it landed
            api.delete(obj, dry_run=False)
        api.apply(obj, dry_run=False, force=options.force_conflicts)
        done.applied += 1
        done.objects_landed.add(obj.address)
        wrote()
    done.vanished.sort(key=hostlist.natural_key)  # patches finish in any order
    for obj in reversed(cmp.deletes):
        api.delete(obj, dry_run=False)
        done.pruned += 1
        done.objects_landed.add(obj.address)
        wrote()
    return done


def _writer(kpass: KubePass) -> KubeApi:
    """The pass's connection, for dry-runs and writes: only a pass that connected makes them (a
    live snapshot's replay, ``KubeReads``, is read and never written)."""
    assert kpass.api is not None
    return cast(KubeApi, kpass.api)


def patch_nodes(api: KubeApi, patches: list[NodePatch], vanished: list[str], wrote: Callable[[], None], *,
                landed: set[str] | None = None) -> int:
    """Send ``patches`` (``kubeplan`` Node patches), at most ``MAX_IN_FLIGHT`` at a time: a fleet's
    first apply patches 36,000 Nodes, one round trip each. Returns how many were patched; the
    Nodes that no longer exist are added to ``vanished``, those patched to ``landed`` (when
    given). After a failed patch no new one is sent; those in flight finish, then the first
    failure (``TargetError``) is raised."""
    patched, failure = 0, None
    queue = iter(patches)
    with ThreadPoolExecutor(max_workers=MAX_IN_FLIGHT) as pool:
        flying = {pool.submit(api.patch_node, p.node, p.body()): p for p in itertools.islice(queue, MAX_IN_FLIGHT)}
        while flying:
            finished, _ = wait(flying, return_when=FIRST_COMPLETED)
            for future in finished:
                p = flying.pop(future)
                try:
                    found = future.result()
                except TargetError as exc:
                    failure = failure or exc
                    continue
                if found:
                    patched += 1
                    if landed is not None:
                        landed.add(p.node)
                else:
                    vanished.append(p.node)
                wrote()
            if failure is None:
                flying.update((pool.submit(api.patch_node, p.node, p.body()), p)
                              for p in itertools.islice(queue, len(finished)))
    if failure is not None:
        raise failure
    return patched


def record_of(kpass: KubePass, vanished: list[str]) -> KubeRecord:
    """The record to keep after a successful apply: what rackctl set on each Node and object."""
    assert kpass.live is not None
    gone = set(vanished)
    d = kpass.desired
    return KubeRecord({n: digest(labels) for n, labels in d.node_labels.items()
                       if n in kpass.live.nodes and n not in gone},
                      {o.address: digest(o.body) for o in d.objects})


def partial_record(kpass: KubePass, done: KubeApplied, before: KubeRecord) -> KubeRecord:
    """The record to keep after an apply that failed part-way: ``record_of`` for what held
    already or is known to have landed (``done``), ``before``'s entry (what the last apply set,
    or none) for every Node label patch, object apply and prune that did not land, or whose
    answer never came. So the record never claims a write that did not land: an offline plan
    still shows it, and a later edit of it is not taken for drift."""
    assert kpass.comparison is not None
    full = record_of(kpass, done.vanished)
    labels, objects = dict(full.labels), dict(full.objects)
    for p in kpass.comparison.label_patches:
        if p.node not in done.labels_landed:
            labels.pop(p.node, None)
            if p.node in before.labels and p.node not in done.vanished:
                labels[p.node] = before.labels[p.node]
    for obj in [*kpass.applies, *kpass.comparison.deletes]:
        if obj.address not in done.objects_landed:
            objects.pop(obj.address, None)
            # A replace whose delete landed: the object is gone by rackctl's hand, not drift.
            if obj.address in before.objects and obj.address not in done.deleted:
                objects[obj.address] = before.objects[obj.address]
    return KubeRecord(labels, objects)


def partial_note(kpass: KubePass, done: KubeApplied) -> str:
    """One line on an apply that stopped part-way: what landed of what was planned."""
    assert kpass.comparison is not None
    cmp = kpass.comparison
    return (f"Kubernetes: stopped part-way: labelled {len(done.labels_landed)} of {len(cmp.label_patches)} Node(s), "
            f"applied {done.applied} of {len(kpass.applies)} object(s), {len(done.taints_landed)} of "
            f"{len(cmp.health_patches)} taint/cordon change(s), pruned {done.pruned} of {len(cmp.deletes)} "
            "object(s); `rackctl plan` shows what is left")


def retry_note(kpass: KubePass) -> str | None:
    """One line on the retries of this pass's requests (``KubeApi.retried``), or None when there
    were none: ``"Kubernetes: 7 retries after transient failures (HTTP 500 x3, HTTP 429 x2, timed
    out x2)"``."""
    retried = getattr(kpass.api, "retried", None)
    if not retried:
        return None
    total = sum(retried.values())
    parts = ", ".join(f"{why} x{n}" for why, n in sorted(retried.items(), key=lambda kv: (-kv[1], kv[0])))
    return f"Kubernetes: {total} retr{'y' if total == 1 else 'ies'} after transient failures ({parts})"
