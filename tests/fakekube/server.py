#!/usr/bin/env python3
"""A fake Kubernetes API server for rackctl's tests, talked to by the real ``kubernetes`` client.

    python tests/fakekube/server.py --port-file FILE [--crd FILE ...] [--seed FILE ...]
                                    [--state-dump FILE] [--git-version v1.31.0-fake]

Listens on 127.0.0.1 only, on a port the kernel picks, and writes that port to ``--port-file``
once it is listening. Plain HTTP, no authentication. On SIGTERM it writes every stored object
and every recorded request to ``--state-dump`` (JSON) and exits. Test infrastructure only.

Faithful to kube-apiserver (1.31) where rackctl depends on it:
  * discovery (/version, /api, /api/v1, /apis, /apis/G, /apis/G/V) built from the loaded CRDs;
    a group's versions in Kubernetes priority order (v1 > v1beta2 > v1beta1 > v1alpha1) and its
    preferredVersion the highest served one, as the real CRD discovery does;
  * core ``nodes`` and ``namespaces`` (cluster-scoped, with /status), ``coordination.k8s.io/v1``
    ``leases`` (namespaced; MicroTimes need their six fractional digits, as the real decoder
    parses them, and are served back in UTC) and every served version of every CRD (cluster or
    namespaced, /status when declared); one stored object per name, seen at every version with
    only apiVersion changed;
  * GET, LIST (labelSelector in full syntax, fieldSelector, limit/continue over a consistent
    snapshot, 410 Expired for a forgotten token), POST, PUT (stale resourceVersion -> 409),
    PATCH, DELETE (finalizers hold the object with a deletionTimestamp), deletecollection;
  * PATCH: json-patch (a failed ``test`` is 422 Invalid with the generic message and empty
    details, like the real server), merge-patch, strategic merge for built-in kinds only (415
    for custom resources), apply; every type but apply is 404 on a missing object, apply
    creates it (201);
  * server-side apply with per-manager ownership in metadata.managedFields (fieldsets.py);
    an applied field the schema does not declare is the real server's 500 "failed to create
    typed patch object ... field not declared in schema";
  * dryRun=All (a dry-run create returns uid and creationTimestamp but no resourceVersion, a
    dry-run update the old resourceVersion; nothing is stored, the counter does not move),
    fieldManager (defaulted from the User-Agent up to its first "/"), force, fieldValidation;
    a missing fieldManager on apply or a force on another patch type is 422 Invalid
    PatchOptions, as the real option validation answers (not 400);
  * resourceVersion (one counter) and generation move only when the object really changes,
    managedFields times only when the manager's write changed something;
  * CRD pruning of unknown fields (warning, or 400 under fieldValidation=Strict), schema
    defaults, jsonschema validation (kubeschema.py); name, label and annotation syntax;
    namespaced creates need an existing namespace (404, as NamespaceLifecycle answers);
  * errors as metav1.Status with the real reasons, codes, details and causes.

Knowingly simplified: no watch (400), no authentication, authorization or admission webhooks,
no CEL rules (x-kubernetes-validations) and no validation ratcheting, no conversion (webhook or
otherwise), no table or protobuf output, no garbage collection, resourceVersion query
parameters are ignored; deleting a Namespace removes it and its objects at once; strategic
merge knows the merge keys of Node fields only; a write to /status keeps nothing but status
(metadata changes through it are dropped); built-in kinds use short hand-written schemas
(kubeschema.py); error messages are paraphrased where clients do not parse them.
Test-only endpoints live under /_fake/ (see ``fake_endpoint``). Faults (500, 429, 409,
timeouts, a forgotten continue token) can be injected into a seeded share of API requests, from
the start (``--faults``) or at run time (``/_fake/faults``); see ``faults.py``.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import copy
import datetime
import gc
import json
import os
import random
import re
import signal
import sys
import threading
import time
import traceback
import uuid
from collections import OrderedDict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fieldsets as fs  # noqa: E402
from faults import FaultPlanError, Faults  # noqa: E402
import kubeschema as ks  # noqa: E402
from labelselect import (field_value, labels_match, parse_field_selector,  # noqa: E402
                         parse_label_selector)
from patches import json_patch, merge_patch, strategic_merge  # noqa: E402
from registry import (ApiError, Resource, Version, bad_request, builtin_resources,  # noqa: E402
                      crd_resource, discovery, invalid, method_not_allowed, option_errors,
                      path_not_found, unsupported_media)

APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"
JSONPATCH = "application/json-patch+json"
SMP = "application/strategic-merge-patch+json"


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- the store --------------------------------------------------------------------------------

class State:
    def __init__(self, git_version: str):
        self.lock = threading.RLock()
        self.git_version = git_version
        self.rv = 1000
        self.resources: dict[tuple[str, str], Resource] = {}
        self.objects: dict[tuple, dict] = {}
        self.requests: list[dict] = []
        self.snapshots: OrderedDict = OrderedDict()
        self.port = 0
        self.faults = Faults()

    def bump(self) -> str:
        self.rv += 1
        return str(self.rv)

    def add_resource(self, res: Resource) -> None:
        for key, old in list(self.resources.items()):
            if old.group == res.group and old.kind == res.kind and key != (res.group, res.plural):
                del self.resources[key]
        self.resources[(res.group, res.plural)] = res

    def by_kind(self, api_version: str, kind: str) -> Resource:
        group = api_version.rpartition("/")[0] if "/" in api_version else ""
        for res in self.resources.values():
            if res.group == group and res.kind == kind:
                return res
        raise bad_request(f"no resource for {api_version} {kind}")

    def put_raw(self, res: Resource, obj: dict) -> dict:
        """Store ``obj`` as is, filling uid, creationTimestamp and resourceVersion."""
        meta = obj.setdefault("metadata", {})
        if res.namespaced:
            meta.setdefault("namespace", "default")
        else:
            meta.pop("namespace", None)
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", now())
        if res.crd:
            meta.setdefault("generation", 1)
        meta["resourceVersion"] = self.bump()
        self.objects[key_of(res, meta.get("namespace"), meta["name"])] = obj
        return obj

    def register_crd(self, doc: dict) -> None:
        res = crd_resource(doc)
        self.add_resource(res)
        crds = self.resources[("apiextensions.k8s.io", "customresourcedefinitions")]
        stored = copy.deepcopy(doc)
        stored["status"] = {
            "acceptedNames": doc["spec"]["names"],
            "storedVersions": [v.name for v in res.versions.values() if v.storage],
            "conditions": [{"type": t, "status": "True", "lastTransitionTime": now(),
                            "reason": r, "message": m} for t, r, m in (
                ("NamesAccepted", "NoConflicts", "no conflicts found"),
                ("Established", "InitialNamesAccepted", "the initial names have been accepted"))]}
        self.put_raw(crds, stored)


def key_of(res: Resource, namespace, name) -> tuple:
    return (res.group, res.plural, namespace if res.namespaced else None, name)


STATE: State | None = None


META_ORDER = ["name", "generateName", "namespace", "uid", "resourceVersion", "generation",
              "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels",
              "annotations", "ownerReferences", "finalizers", "managedFields"]
META_RANK = {k: i for i, k in enumerate(META_ORDER)}


def render(res: Resource, version: str, obj: dict, *, typed_items: bool = True) -> dict:
    """``obj`` as served at ``version`` (no conversion: only apiVersion changes), a copy."""
    return copy.deepcopy(served(res, version, obj, typed_items=typed_items))


def served(res: Resource, version: str, obj: dict, *, typed_items: bool = True) -> dict:
    """``render`` without the copy: the answer shares ``obj``'s values, so it must be serialized
    before the lock is let go (a list snapshot keeps each item as JSON text)."""
    out = {"apiVersion": res.gv(version), "kind": res.kind} if typed_items else {}
    for key, value in obj.items():
        if key not in ("apiVersion", "kind"):
            out[key] = value
    meta = out.get("metadata")
    if isinstance(meta, dict):
        out["metadata"] = dict(sorted(meta.items(), key=lambda kv: META_RANK.get(kv[0], 99)))
    return out


# --- request handling -------------------------------------------------------------------------

class Request:
    def __init__(self, method, path, query, raw, ctype, user_agent):
        self.method, self.path, self.query, self.raw = method, path, query, raw
        self.ctype, self.user_agent = ctype, user_agent
        self.warnings: list[str] = []
        self.body = None
        self.body_dry_run = False

    def parse(self, yaml_ok: bool):
        if not self.raw:
            raise bad_request("the request body is empty")
        try:
            text = self.raw.decode("utf-8")
            self.body = yaml.safe_load(text) if yaml_ok else json.loads(text)
        except (ValueError, yaml.YAMLError) as exc:
            raise bad_request(f"error decoding request body: {exc}")
        return self.body

    def manager(self) -> str:
        fm = self.query.get("fieldManager")
        if fm:
            return fm
        return "".join(c for c in self.user_agent.split("/")[0] if c.isprintable())[:128]

    def dry_run(self) -> bool:
        return self.query.get("dryRun") == "All" or self.body_dry_run


def check_options(req: Request, kind: str, patch_type: str | None = None) -> None:
    errs = []
    dry = req.query.get("dryRun")
    if dry is not None and dry != "All":
        errs.append(ks.FieldError("Unsupported value", "dryRun", [dry], 'supported values: "All"'))
    fm = req.query.get("fieldManager")
    if fm is not None and len(fm) > 128:
        errs.append(ks.FieldError("Too long", "fieldManager", fm,
                                  "may not be more than 128 bytes"))
    elif fm is not None and not fm.isprintable():
        errs.append(ks.FieldError("Invalid value", "fieldManager", fm,
                                  "must only contain printable characters"))
    fv = req.query.get("fieldValidation", "")
    if fv not in ("", "Ignore", "Warn", "Strict"):
        errs.append(ks.FieldError("Unsupported value", "fieldValidation", fv,
                                  'supported values: "Ignore", "Strict", "Warn"'))
    if patch_type is not None:
        if patch_type != APPLY and "force" in req.query:
            errs.append(ks.FieldError("Forbidden", "force",
                                      detail="may not be specified for non-apply patch"))
        if patch_type == APPLY and not fm:
            errs.append(ks.FieldError("Required value", "fieldManager",
                                      detail="is required for apply patch"))
    if errs:
        raise option_errors(kind, errs)


def read_object(req: Request, res: Resource, version: str) -> dict:
    if req.ctype not in ("", "application/json", "application/yaml", "*/*"):
        raise unsupported_media(["application/json", "application/yaml",
                                 "application/vnd.kubernetes.protobuf"])
    body = req.parse(yaml_ok=req.ctype == "application/yaml")
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    check_type(res, version, body)
    if not isinstance(body.get("metadata", {}), dict):
        raise bad_request("metadata must be an object")
    return copy.deepcopy(body)


def check_type(res: Resource, version: str, body: dict) -> None:
    api_version, kind = body.get("apiVersion"), body.get("kind")
    short = json.dumps(body, separators=(",", ":"))[:200]
    if res.crd and not kind:
        raise bad_request(f"Object 'Kind' is missing in '{short}'")
    if res.crd and not api_version:
        raise bad_request(f"Object 'apiVersion' is missing in '{short}'")
    if api_version and api_version != res.gv(version):
        raise bad_request(f"the API version in the data ({api_version}) does not match the "
                          f"expected API version ({res.gv(version)})")
    if kind and kind != res.kind:
        raise bad_request(f"the kind in the data ({kind}) does not match the expected kind "
                          f"({res.kind})")


# metav1.MicroTime fields of the built-in kinds: decoded with the layout RFC3339Micro (exactly
# six fractional digits; a client that leaves them out gets 400), served back in UTC with "Z".
MICRO_TIMES = {("coordination.k8s.io", "Lease"): ("acquireTime", "renewTime")}
MICRO_TIME = re.compile(r"([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6})"
                        r"(Z|[+-][0-9]{2}:[0-9]{2})")


def decode_micro_times(res: Resource, version: Version, obj: dict) -> None:
    spec = obj.get("spec")
    for field in MICRO_TIMES.get((res.group, res.kind), ()):
        value = spec.get(field) if isinstance(spec, dict) else None
        if value is None:
            continue
        m = MICRO_TIME.fullmatch(value) if isinstance(value, str) else None
        if m is None:
            raise bad_request(f'{res.kind} in version "{version.name}" cannot be handled as a '
                              f'{res.kind}: spec.{field}: parsing time {json.dumps(value)} as '
                              '"2006-01-02T15:04:05.000000Z07:00"')
        zone = "+00:00" if m.group(2) == "Z" else m.group(2)
        t = datetime.datetime.fromisoformat(m.group(1) + zone).astimezone(datetime.timezone.utc)
        spec[field] = t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def decode_into(req: Request, res: Resource, version: Version, obj: dict) -> dict:
    """What the real decoder does to a written object: prune unknown fields (warn, fail or
    ignore per fieldValidation), parse MicroTimes and fill schema defaults."""
    decode_micro_times(res, version, obj)
    unknown: list[str] = []
    ks.prune(obj, version.schema, "", unknown)
    directive = req.query.get("fieldValidation") or "Warn"
    if unknown and directive == "Strict":
        raise bad_request("strict decoding error: " +
                          ", ".join(f'unknown field "{u}"' for u in unknown))
    if directive == "Warn":
        req.warnings += [f'unknown field "{u}"' for u in unknown]
    ks.apply_defaults(obj, version.schema)
    return obj


def empty_object(res: Resource, version: str) -> dict:
    out = {"apiVersion": res.gv(version), "kind": res.kind}
    if not res.crd:
        out.update({"metadata": {}, "spec": {}, "status": {}})
    return out


def ignore_for(version: Version, subresource: str):
    def ignore(path) -> bool:
        if path in fs.STRIPPED:
            return True
        in_status = bool(path) and path[0] == ("f", "status")
        if subresource == "status":
            return not in_status
        return version.status and in_status
    return ignore


def without_managed(obj: dict) -> dict:
    out = copy.deepcopy(obj)
    out.get("metadata", {}).pop("managedFields", None)
    return out


def set_managed(obj: dict, entries: dict) -> None:
    encoded = fs.encode_entries(entries)
    if encoded:
        obj["metadata"]["managedFields"] = encoded
    else:
        obj["metadata"].pop("managedFields", None)


def track_update(res, version, live, new, manager, subresource) -> None:
    """Ownership for a non-apply write (create, update, patch)."""
    try:
        live_entries = fs.decode_entries(live.get("metadata", {}).get("managedFields"))
    except ValueError:
        live_entries = {}
    sent = new["metadata"].get("managedFields")
    if subresource:
        base = live_entries
    elif isinstance(sent, list) and (sent == [] or sent == [{}]):
        base = {}
    else:
        try:
            base = fs.decode_entries(sent) if sent else {}
        except ValueError:
            base = {}
        base = base or live_entries
    entries = fs.record_update(base, without_managed(live), without_managed(new), version.schema,
                              manager=manager, api_version=res.gv(version.name),
                              subresource=subresource, ignore=ignore_for(version, subresource),
                              now=now())
    set_managed(new, entries)


def strategy_create(res: Resource, obj: dict, namespace) -> None:
    meta = obj["metadata"]
    for field in ("deletionTimestamp", "deletionGracePeriodSeconds", "selfLink", "generation"):
        meta.pop(field, None)
    meta["uid"] = str(uuid.uuid4())
    meta["creationTimestamp"] = now()
    if res.namespaced:
        meta["namespace"] = namespace
    else:
        meta.pop("namespace", None)
    if res.crd:
        meta["generation"] = 1
        if any(v.status for v in res.versions.values()):
            obj.pop("status", None)
    if res.kind == "Namespace":
        obj.setdefault("spec", {})["finalizers"] = ["kubernetes"]
        obj["status"] = {"phase": "Active"}


def strategy_update(res: Resource, version: Version, old: dict, new: dict, subresource: str):
    meta, old_meta = new.setdefault("metadata", {}), old["metadata"]
    if meta.get("uid") and meta["uid"] != old_meta.get("uid"):
        raise invalid(res.kind, res.group, old_meta["name"], [ks.FieldError(
            "Invalid value", "metadata.uid", meta["uid"], "field is immutable")])
    for field in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
                  "generation", "namespace"):
        if field in old_meta:
            meta[field] = old_meta[field]
        else:
            meta.pop(field, None)
    if subresource == "status":
        managed = meta.get("managedFields")
        status = new.get("status")
        new.clear()
        new.update(copy.deepcopy(old))
        if managed is not None:
            new["metadata"]["managedFields"] = managed
        if status is None:
            new.pop("status", None)
        else:
            new["status"] = status
    elif version.status:
        if "status" in old:
            new["status"] = copy.deepcopy(old["status"])
        else:
            new.pop("status", None)
        if res.kind == "Namespace" and not res.group:  # spec.finalizers go through /finalize
            new["spec"] = {**(new.get("spec") or {}),
                           "finalizers": (old.get("spec") or {}).get("finalizers", [])}
    if res.crd and "generation" in old_meta:
        def spec_of(o):
            return {k: v for k, v in o.items() if k not in ("metadata", "apiVersion", "kind")
                    and not (version.status and k == "status")}
        if not fs.same(spec_of(old), spec_of(new)):
            meta["generation"] = old_meta["generation"] + 1


def validate_object(res: Resource, version: Version, obj: dict) -> None:
    errs = ks.validate_metadata(obj["metadata"], name_rule=res.name_rule)
    errs += ks.validate(obj, version.schema)
    errs += ks.list_map_duplicates(obj, version.schema)
    if errs:
        raise invalid(res.kind, res.group, obj["metadata"].get("name") or "", errs)


def require_namespace(namespace: str) -> None:
    if ("", "namespaces", None, namespace) not in STATE.objects:
        raise ApiError(404, "NotFound", f'namespaces "{namespace}" not found',
                       {"name": namespace, "kind": "namespaces"})


def store(res: Resource, obj: dict, dry: bool) -> dict:
    if dry:
        return obj
    meta = obj["metadata"]
    if meta.get("deletionTimestamp") and not meta.get("finalizers"):
        STATE.objects.pop(key_of(res, meta.get("namespace"), meta["name"]), None)
        meta["resourceVersion"] = STATE.bump()
        return obj
    meta["resourceVersion"] = STATE.bump()
    STATE.objects[key_of(res, meta.get("namespace"), meta["name"])] = obj
    return obj


def deprecation(req: Request, res: Resource, version: Version) -> None:
    if version.deprecated:
        req.warnings.append(version.warning or f"{res.gv(version.name)} {res.kind} is deprecated")


# --- verbs ------------------------------------------------------------------------------------

def do_get(res, version, namespace, name):
    obj = STATE.objects.get(key_of(res, namespace, name))
    if obj is None:
        raise res.not_found(name)
    return 200, render(res, version.name, obj)


def do_list(req, res, version, namespace):
    label_reqs = parse_label_selector(req.query.get("labelSelector", ""))
    field_reqs = parse_field_selector(req.query.get("fieldSelector", ""), res)
    try:
        limit = int(req.query.get("limit") or 0)
        if limit < 0:
            raise ValueError
    except ValueError:
        raise bad_request(f"invalid limit: {req.query.get('limit')!r}")
    token = req.query.get("continue")
    if token:
        try:
            data = json.loads(base64.urlsafe_b64decode(token.encode()))
            snap_id, offset = data["s"], int(data["o"])
        except (ValueError, KeyError, TypeError):
            raise bad_request("continue key is not valid: incorrect encoded start resourceVersion")
        snapshot = STATE.snapshots.get(snap_id)
        if snapshot is None:
            raise ApiError(410, "Expired", "The provided continue parameter is too old to display "
                           "a consistent list result. You can start a new list without the "
                           "continue parameter.")
        list_rv, items = snapshot
    else:
        snap_id, offset, list_rv = None, 0, str(STATE.rv)
        items = []
        for key in sorted(k for k in STATE.objects if k[:2] == (res.group, res.plural)):
            obj = STATE.objects[key]
            if namespace is not None and key[2] != namespace:
                continue
            if not labels_match(label_reqs, obj.get("metadata", {}).get("labels") or {}):
                continue
            if not all((field_value(obj, f) == v) == (op == "=") for f, op, v in field_reqs):
                continue
            # JSON text, not a deep copy: the snapshot outlives this request (continue tokens),
            # and dumping 36,000 Nodes is ~10x cheaper than copying them.
            items.append(json.dumps(served(res, version.name, obj, typed_items=res.crd)))
    page = items[offset:offset + limit] if limit else items[offset:]
    meta = {"resourceVersion": list_rv}
    rest = len(items) - offset - len(page)
    if rest > 0:
        if snap_id is None:
            snap_id = uuid.uuid4().hex
            STATE.snapshots[snap_id] = (list_rv, items)
            while len(STATE.snapshots) > 64:
                STATE.snapshots.popitem(last=False)
        meta["continue"] = base64.urlsafe_b64encode(json.dumps(
            {"s": snap_id, "o": offset + len(page)}).encode()).decode()
        if not label_reqs and not field_reqs:
            meta["remainingItemCount"] = rest
    return 200, ListPage({"apiVersion": res.gv(version.name), "kind": res.list_kind, "metadata": meta}, page)


class ListPage:
    """A list answer whose items are JSON text already (from the list's snapshot): sent without
    decoding and encoding every item again."""

    def __init__(self, head: dict, items: list[str]):
        self.head, self.items = head, items

    def objects(self) -> list[dict]:
        return [json.loads(text) for text in self.items]

    def encode(self) -> bytes:
        head = json.dumps(self.head)
        return f'{head[:-1]}, "items": [{", ".join(self.items)}]}}'.encode()


def do_create(req, res, version, namespace):
    check_options(req, "CreateOptions")
    obj = read_object(req, res, version.name)
    meta = obj.setdefault("metadata", {})
    if res.namespaced and meta.get("namespace") not in (None, "", namespace):
        raise bad_request("the namespace of the provided object does not match the namespace "
                          "sent on the request")
    if not meta.get("name") and meta.get("generateName"):
        meta["name"] = meta["generateName"] + "".join(
            random.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))
    if res.namespaced:
        require_namespace(namespace)
    decode_into(req, res, version, obj)
    obj["apiVersion"], obj["kind"] = res.gv(version.name), res.kind
    strategy_create(res, obj, namespace)
    sent_rv = meta.pop("resourceVersion", None)
    track_update(res, version, empty_object(res, version.name), obj, req.manager(), "")
    validate_object(res, version, obj)
    if key_of(res, namespace, meta["name"]) in STATE.objects:
        raise ApiError(409, "AlreadyExists", f'{res.qualified} "{meta["name"]}" already exists',
                       res.details(meta["name"]))
    if sent_rv and not req.dry_run():
        raise ApiError(500, "", "resourceVersion should not be set on objects to be created")
    return 201, render(res, version.name, store(res, obj, req.dry_run()))


def finish_update(req, res, version, old, new, subresource, *, track=True):
    """Shared tail of PUT and PATCH: strategy, ownership, validation, storage."""
    name = old["metadata"]["name"]
    new["apiVersion"], new["kind"] = res.gv(version.name), res.kind
    sent_rv = new["metadata"].get("resourceVersion")
    if sent_rv and sent_rv != old["metadata"]["resourceVersion"]:
        raise res.conflict(name)
    strategy_update(res, version, old, new, subresource)
    if track:
        track_update(res, version, old, new, req.manager(), subresource)
    validate_object(res, version, new)
    new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
    current = render(res, version.name, old)
    if fs.same(new, current):
        return 200, current
    return 200, render(res, version.name, store(res, new, req.dry_run()))


def do_update(req, res, version, namespace, name, subresource):
    check_options(req, "UpdateOptions")
    body = read_object(req, res, version.name)
    meta = body.setdefault("metadata", {})
    if meta.get("name") != name:
        raise bad_request(f"the name of the object ({meta.get('name', '')}) does not match the "
                          f"name on the URL ({name})")
    if res.namespaced and meta.get("namespace") not in (None, "", namespace):
        raise bad_request("the namespace of the provided object does not match the namespace "
                          "sent on the request")
    old = STATE.objects.get(key_of(res, namespace, name))
    if old is None:
        raise res.not_found(name)
    decode_into(req, res, version, body)
    return finish_update(req, res, version, old, body, subresource)


def do_patch(req, res, version, namespace, name, subresource):
    accepted = [JSONPATCH, MERGE] + ([] if res.crd else [SMP]) + [APPLY]
    if req.ctype not in accepted:
        raise unsupported_media(accepted)
    check_options(req, "PatchOptions", req.ctype)
    patch = req.parse(yaml_ok=req.ctype == APPLY)
    old = STATE.objects.get(key_of(res, namespace, name))
    if req.ctype == APPLY:
        return do_apply(req, res, version, namespace, name, subresource, old, patch)
    if old is None:
        raise res.not_found(name)
    current = render(res, version.name, old)
    if req.ctype == MERGE:
        if not isinstance(patch, dict):
            raise bad_request("Invalid JSON Patch")
        new = merge_patch(current, patch)
    elif req.ctype == JSONPATCH:
        if not isinstance(patch, list):
            raise bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
        try:
            new = json_patch(current, patch)
        except ValueError:
            raise ApiError(422, "Invalid",
                           "the server rejected our request due to an error in our request", {})
    else:
        new = strategic_merge(current, patch)
    if not isinstance(new, dict) or not isinstance(new.get("metadata", {}), dict):
        raise bad_request("the patched object is not a JSON object")
    meta = new.setdefault("metadata", {})
    if meta.get("name") != name:
        raise bad_request(f"the name of the object ({meta.get('name', '')}) does not match the "
                          f"name on the URL ({name})")
    if res.namespaced and meta.get("namespace") not in (None, "", namespace):
        raise bad_request(f"the namespace of the object ({meta.get('namespace')}) does not "
                          f"match the namespace on the request ({namespace})")
    check_type(res, version.name, new)
    decode_into(req, res, version, new)
    return finish_update(req, res, version, old, new, subresource)


def do_apply(req, res, version, namespace, name, subresource, old, config):
    if not isinstance(config, dict):
        raise bad_request("error decoding YAML: the applied configuration must be an object")
    gv, kind = config.get("apiVersion") or "", config.get("kind") or ""
    if gv != res.gv(version.name) or kind != res.kind:
        shown = gv if "/" in gv else "/" + gv
        raise bad_request(f"invalid object type: {shown}, Kind={kind}")
    meta = config.get("metadata") if isinstance(config.get("metadata"), dict) else {}
    if meta.get("managedFields") is not None:
        raise bad_request("metadata.managedFields must be nil")
    if (meta.get("name") or (old or {}).get("metadata", {}).get("name")) != name:
        raise bad_request(f"the name of the object ({meta.get('name', '')}) does not match the "
                          f"name on the URL ({name})")
    if res.namespaced and meta.get("namespace") not in (None, "", namespace):
        raise bad_request(f"the namespace of the object ({meta.get('namespace')}) does not "
                          f"match the namespace on the request ({namespace})")
    if old is None and subresource:
        raise res.not_found(name)
    config = copy.deepcopy(config)
    if subresource == "status":
        config = {k: v for k, v in config.items() if k in ("apiVersion", "kind", "status")}
        config["metadata"] = {k: v for k, v in meta.items() if k in ("name", "namespace")}
    elif version.status:
        config.pop("status", None)
    if res.namespaced and old is None:
        require_namespace(namespace)
    if old is not None:
        live = without_managed(render(res, version.name, old))
        entries = fs.decode_entries(old["metadata"].get("managedFields"))
    else:
        live = empty_object(res, version.name)
        entries = {}
    try:
        merged, entries = fs.apply_config(
            entries, live, config, version.schema, manager=req.manager(),
            api_version=res.gv(version.name), subresource=subresource,
            ignore=ignore_for(version, subresource), force=parse_bool(req.query.get("force")),
            now=now())
    except fs.ApplyConflict as exc:
        raise ApiError(409, "Conflict", exc.message(), {"causes": exc.causes()})
    except fs.SchemaError as exc:
        raise ApiError(500, "", f"failed to create typed patch object ({namespace or ''}/{name}; "
                       f"{res.group}/{version.name}, Kind={res.kind}): "
                       f"{exc}")
    merged.setdefault("metadata", {})
    set_managed(merged, entries)
    ks.apply_defaults(merged, version.schema)
    if old is not None:
        return finish_update(req, res, version, old, merged, subresource, track=False)
    merged["apiVersion"], merged["kind"] = res.gv(version.name), res.kind
    merged["metadata"]["name"] = name
    sent_rv = merged["metadata"].pop("resourceVersion", None)
    strategy_create(res, merged, namespace)
    validate_object(res, version, merged)
    if sent_rv:
        raise res.conflict(name)
    return 201, render(res, version.name, store(res, merged, req.dry_run()))


def parse_bool(value) -> bool:
    return str(value) in ("1", "t", "T", "true", "TRUE", "True")


def delete_one(req, res, version, obj, options: dict):
    meta = obj["metadata"]
    pre = options.get("preconditions") or {}
    if pre.get("uid") and pre["uid"] != meta.get("uid"):
        raise res.conflict(meta["name"], f"Precondition failed: UID in precondition: {pre['uid']}"
                           f", UID in object meta: {meta.get('uid')}")
    if pre.get("resourceVersion") and pre["resourceVersion"] != meta.get("resourceVersion"):
        raise res.conflict(meta["name"], "Precondition failed: ResourceVersion in precondition: "
                           f"{pre['resourceVersion']}, ResourceVersion in object meta: "
                           f"{meta.get('resourceVersion')}")
    dry = req.dry_run()
    if meta.get("finalizers"):
        if meta.get("deletionTimestamp"):
            return render(res, version.name, obj)
        new = copy.deepcopy(obj)
        new["metadata"]["deletionTimestamp"] = now()
        new["metadata"]["deletionGracePeriodSeconds"] = 0
        if new["metadata"].get("generation"):
            new["metadata"]["generation"] += 1
        return render(res, version.name, store(res, new, dry))
    if not dry:
        del STATE.objects[key_of(res, meta.get("namespace"), meta["name"])]
        if res.kind == "Namespace" and res.group == "":
            for key in [k for k in STATE.objects if k[2] == meta["name"]]:
                del STATE.objects[key]
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
            "details": {k: v for k, v in res.details(meta["name"], meta.get("uid", "")).items()
                        if v}}


def delete_options(req: Request, kind: str) -> dict:
    options = {}
    if req.raw:
        try:
            options = json.loads(req.raw.decode("utf-8")) or {}
        except ValueError as exc:
            raise bad_request(f"error decoding DeleteOptions: {exc}")
        if not isinstance(options, dict):
            raise bad_request("DeleteOptions must be an object")
    dry = options.get("dryRun") or []
    if any(d != "All" for d in dry):
        raise option_errors(kind, [ks.FieldError("Unsupported value", "dryRun", dry,
                                                 'supported values: "All"')])
    req.body, req.body_dry_run = options, bool(dry)
    check_options(req, kind)
    return options


def do_delete(req, res, version, namespace, name):
    options = delete_options(req, "DeleteOptions")
    obj = STATE.objects.get(key_of(res, namespace, name))
    if obj is None:
        raise res.not_found(name)
    return 200, delete_one(req, res, version, obj, options)


def do_delete_collection(req, res, version, namespace):
    options = delete_options(req, "DeleteOptions")
    _, page = do_list(req, res, version, namespace)
    listed = {**page.head, "items": page.objects()}
    for item in listed["items"]:
        meta = item["metadata"]
        obj = STATE.objects.get(key_of(res, meta.get("namespace"), meta["name"]))
        if obj is not None:
            delete_one(req, res, version, obj, options)
    return 200, listed


# --- routing ----------------------------------------------------------------------------------

def route(req: Request):
    segs = [s for s in req.path.split("/") if s]
    if segs[:1] == ["_fake"]:
        return fake_endpoint(req, segs[1:])
    if segs in (["version"], ["api"], ["api", "v1"], ["apis"]) or (
            segs[:1] == ["apis"] and len(segs) in (2, 3)):
        if req.method != "GET":
            raise method_not_allowed()
        return 200, discovery(STATE.resources.values(), segs, STATE.git_version, STATE.port)
    if segs[:2] == ["api", "v1"]:
        group, version_name, rest = "", "v1", segs[2:]
    elif segs[:1] == ["apis"]:
        group, version_name, rest = segs[1], segs[2], segs[3:]
    else:
        raise path_not_found()
    namespace = None
    if rest[0] == "namespaces" and len(rest) >= 3 and not (
            group == "" and len(rest) == 3 and rest[2] in ("status", "finalize")):
        namespace, rest = rest[1], rest[2:]
    if len(rest) > 3:
        raise path_not_found()
    plural = rest[0]
    name = rest[1] if len(rest) > 1 else None
    subresource = rest[2] if len(rest) > 2 else ""
    res = STATE.resources.get((group, plural))
    version = res.versions.get(version_name) if res else None
    if version is None or not version.served:
        raise path_not_found()
    if namespace is not None and not res.namespaced:
        raise path_not_found()
    if res.namespaced and namespace is None and name is not None:
        raise path_not_found()
    if subresource and (subresource != "status" or not version.status):
        raise path_not_found()
    deprecation(req, res, version)
    method = req.method
    if res.readonly and method != "GET":
        raise method_not_allowed()
    if method == "GET" and parse_bool(req.query.get("watch")):
        raise bad_request("the fake API server does not implement watch")
    if name is None:
        if method == "GET":
            return do_list(req, res, version, namespace)
        if method == "POST" and (namespace is not None or not res.namespaced):
            return do_create(req, res, version, namespace)
        if method == "DELETE":
            return do_delete_collection(req, res, version, namespace)
        raise method_not_allowed()
    if method == "GET":
        return do_get(res, version, namespace, name)
    if method == "PUT":
        return do_update(req, res, version, namespace, name, subresource)
    if method == "PATCH":
        return do_patch(req, res, version, namespace, name, subresource)
    if method == "DELETE" and not subresource:
        return do_delete(req, res, version, namespace, name)
    raise method_not_allowed()


def fake_endpoint(req: Request, segs: list[str]):
    """Test-only endpoints (never used by rackctl):
    GET/DELETE /_fake/requests      the request log / reset it
    POST /_fake/objects             seed a raw object (uid, resourceVersion, creationTimestamp
                                    filled in; nothing validated, no managedFields added)
    GET /_fake/objects              every stored object
    DELETE /_fake/objects?apiVersion=&kind=&name=[&namespace=]   remove one, finalizers ignored
    GET /_fake/state                resourceVersion, objects and requests together
    GET/POST/DELETE /_fake/faults   the fault plan in force (with its counters) / replace it
                                    (``{"seed", "rules"}``, faults.py) / drop it
    """
    if segs == ["requests"] and req.method == "GET":
        return 200, STATE.requests
    if segs == ["requests"] and req.method == "DELETE":
        STATE.requests.clear()
        return 200, {}
    if segs == ["objects"] and req.method == "POST":
        obj = req.parse(yaml_ok=True)
        if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict) or \
                not obj["metadata"].get("name"):
            raise bad_request("seed needs an object with apiVersion, kind and metadata.name")
        res = STATE.by_kind(obj.get("apiVersion", ""), obj.get("kind", ""))
        return 201, STATE.put_raw(res, copy.deepcopy(obj))
    if segs == ["objects"] and req.method == "GET":
        return 200, all_objects()
    if segs == ["objects"] and req.method == "DELETE":
        q = req.query
        res = STATE.by_kind(q.get("apiVersion", ""), q.get("kind", ""))
        obj = STATE.objects.pop(key_of(res, q.get("namespace"), q.get("name", "")), None)
        if obj is None:
            raise res.not_found(q.get("name", ""))
        return 200, obj
    if segs == ["state"] and req.method == "GET":
        return 200, dump_state()
    if segs == ["faults"] and req.method == "GET":
        return 200, STATE.faults.to_json()
    if segs == ["faults"] and req.method == "POST":
        try:
            STATE.faults.set(req.parse(yaml_ok=False))
        except (FaultPlanError, ValueError, TypeError, re.error) as exc:
            raise bad_request(f"bad fault plan: {exc}")
        return 200, STATE.faults.to_json()
    if segs == ["faults"] and req.method == "DELETE":
        STATE.faults.clear()
        return 200, {}
    raise path_not_found()


def target_of(path: str):
    """(Resource, name) a request path names, or None (a list, discovery, an unknown path)."""
    segs = [s for s in path.split("/") if s]
    if segs[:2] == ["api", "v1"]:
        group, rest = "", segs[2:]
    elif segs[:1] == ["apis"] and len(segs) > 3:
        group, rest = segs[1], segs[3:]
    else:
        return None
    if len(rest) >= 3 and rest[0] == "namespaces" and not (
            group == "" and len(rest) == 3 and rest[2] in ("status", "finalize")):
        rest = rest[2:]
    res = STATE.resources.get((group, rest[0])) if rest else None
    return (res, rest[1]) if res is not None and len(rest) > 1 else None


def injected(req: Request, fault, headers: dict):
    """The answer to a request that draws an injected fault, as the real server gives it:
    (code, Status), or (None, None) for no answer at all. Nothing is done to the store."""
    with contextlib.suppress(ApiError):  # only so that the request log shows what was sent
        if req.raw:
            req.parse(yaml_ok=True)
    if fault.kind in ("timeout", "disconnect"):
        return None, None
    if fault.kind == "429":  # API Priority and Fairness turning the request away
        headers["Retry-After"] = str(fault.retry_after)
        raise ApiError(429, "TooManyRequests", "Too many requests: please try again later",
                       {"retryAfterSeconds": fault.retry_after})
    if fault.kind == "409":  # the optimistic-concurrency check lost a race with another writer
        target = target_of(req.path)
        if target is not None:
            raise target[0].conflict(target[1])
        raise ApiError(409, "Conflict", "Operation cannot be fulfilled: the object has been "
                       "modified; please apply your changes to the latest version and try again")
    raise ApiError(500, "InternalError", "Internal error occurred: etcdserver: leader changed",
                   {"causes": [{"message": "etcdserver: leader changed"}]})


def all_objects() -> list[dict]:
    out = []
    for key in sorted(STATE.objects, key=lambda k: tuple(x or "" for x in k)):
        res = STATE.resources.get(key[:2])
        if res is None:
            continue
        storage = next((v.name for v in res.versions.values() if v.storage),
                       next(iter(res.versions)))
        out.append(render(res, storage, STATE.objects[key]))
    return out


def dump_state() -> dict:
    return {"resourceVersion": str(STATE.rv), "objects": all_objects(),
            "requests": STATE.requests}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fakekube"
    disable_nagle_algorithm = True  # headers and body go out in two writes: no 40 ms stalls

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        if os.environ.get("FAKEKUBE_VERBOSE"):
            sys.stderr.write("fakekube: " + format % args + "\n")

    def handle_any(self):
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        req = Request(self.command, url.path, query, raw, ctype,
                      self.headers.get("User-Agent") or "")
        test_only = url.path.startswith("/_fake")
        fault = None if test_only else STATE.faults.decide(
            self.command, url.path, query.get("dryRun") == "All", bool(query.get("continue")))
        headers: dict[str, str] = {}
        with STATE.lock:
            try:
                if fault is not None and fault.kind not in ("timeout-after-commit", "410"):
                    code, body = injected(req, fault, headers)
                else:
                    if fault is not None and fault.kind == "410":
                        STATE.snapshots.clear()  # every list's continue token is now too old
                    code, body = route(req)
            except ApiError as exc:
                code, body = exc.code, exc.status()
            except Exception as exc:  # a bug in the fake: say so loudly
                traceback.print_exc()
                code, body = 500, ApiError(500, "InternalError",
                                           f"Internal error occurred: fake: {exc!r}").status()
            if not test_only:
                # status: what was answered (None: nothing); a timeout-after-commit logs what
                # the write did, though its answer never leaves
                STATE.requests.append({
                    "method": self.command, "path": url.path, "query": query,
                    "contentType": ctype or None, "dryRun": req.dry_run(),
                    "fieldManager": query.get("fieldManager"), "status": code,
                    "userAgent": req.user_agent, "body": req.body,
                    "fault": fault.kind if fault is not None else None})
            # inside the lock: body may be the live log
            data = body.encode() if isinstance(body, ListPage) else json.dumps(body).encode()
            # The store is acyclic JSON that only grows: keep the cyclic collector off what has
            # lived through a request, or each full collection walks every stored object (a
            # 36,000-Node list varied 4-9 s from those alone).
            gc.freeze()
        if fault is not None and fault.kind in ("timeout", "timeout-after-commit", "disconnect"):
            if fault.kind != "disconnect":
                time.sleep(fault.stall)  # longer than the client waits: it gives up first
            self.close_connection = True
            return
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-cache, private")
        for name, value in headers.items():
            self.send_header(name, value)
        for warning in dict.fromkeys(req.warnings):
            self.send_header("Warning", "299 - " + json.dumps(warning))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = handle_any


def load_documents(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as fh:
        return [d for d in yaml.safe_load_all(fh) if isinstance(d, dict)]



class _Server(ThreadingHTTPServer):
    # socketserver's listen backlog of 5 resets connections when a client opens many at once
    # (rackctl patches Nodes 16 at a time); a real API server accepts them.
    request_queue_size = 128

def main(argv=None) -> int:
    global STATE
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port-file", required=True, help="where to write the port once listening")
    ap.add_argument("--crd", action="append", default=[],
                    help="CustomResourceDefinition YAML (multi-document); a later CRD of the "
                         "same group and kind replaces an earlier one")
    ap.add_argument("--seed", action="append", default=[], help="YAML objects to store at start")
    ap.add_argument("--state-dump", help="write objects and requests here (JSON) on exit")
    ap.add_argument("--git-version", default="v1.31.0-fake", help="what /version reports")
    ap.add_argument("--faults", help='a fault plan in force from the start: JSON {"seed", "rules"} '
                                     "(faults.py)")
    args = ap.parse_args(argv)

    STATE = State(args.git_version)
    if args.faults:
        STATE.faults.set(json.loads(args.faults))
    for res in builtin_resources():
        STATE.add_resource(res)
    for path in args.crd:
        for doc in load_documents(path):
            if doc.get("kind") == "CustomResourceDefinition":
                STATE.register_crd(doc)
            else:
                print(f"fakekube: {path}: skipping a {doc.get('kind')!r}, not a CRD",
                      file=sys.stderr)
    namespaces = STATE.resources[("", "namespaces")]
    for ns in ("default", "kube-system", "kube-public", "kube-node-lease"):
        STATE.put_raw(namespaces, {"apiVersion": "v1", "kind": "Namespace",
                                   "metadata": {"name": ns},
                                   "spec": {"finalizers": ["kubernetes"]},
                                   "status": {"phase": "Active"}})
    for path in args.seed:
        for doc in load_documents(path):
            STATE.put_raw(STATE.by_kind(doc.get("apiVersion", ""), doc.get("kind", "")), doc)

    server = _Server(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    STATE.port = server.server_address[1]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    tmp = args.port_file + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(str(STATE.port))
    os.replace(tmp, args.port_file)
    try:
        server.serve_forever(poll_interval=0.2)
    except (SystemExit, KeyboardInterrupt):
        pass
    finally:
        server.server_close()
        if args.state_dump:
            with STATE.lock, open(args.state_dump, "w", encoding="utf-8") as fh:
                json.dump(dump_state(), fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
