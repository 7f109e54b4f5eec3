"""Server-side apply field ownership for the fake Kubernetes API server (test infrastructure).

A re-implementation, for the subset rackctl uses, of the structured-merge-diff rules the real
API server applies. Typing comes from the OpenAPI v3 schema of the object:

* objects are maps of fields (``f:name``); a key the schema does not declare (a map entry such
  as a label, or anything under ``x-kubernetes-preserve-unknown-fields``) is also owned as a
  node of its own;
* lists are atomic (one field) unless the schema says ``x-kubernetes-list-type: map`` (items
  ``k:{"key":...}``) or ``set`` (items ``v:value``);
* an applied configuration owns exactly its own fields; a field the manager applied last time,
  no longer applies, and nobody else owns is removed; applying a value that differs from the
  live one over a field another manager owns is a conflict unless forced; the same value is
  shared ownership;
* a non-apply write (create, update, patch) gives its manager an ``Update`` entry for the fields
  it added or changed and takes them away from everybody else; removed fields leave every set.

Knowingly simplified: no conversion between versions (objects look the same in every version,
so ownership recorded at one version is compared as is at another), no unions, no cap of ten
Update managers, no last-applied-configuration annotation handling, an emptied map left behind
by pruning stays as ``{}``.
"""

from __future__ import annotations

import copy
import json

MISSING = object()

# Paths the real server never tracks (it strips them from every manager's set).
STRIPPED = {(("f", "apiVersion"),), (("f", "kind"),), (("f", "metadata"),)} | {
    (("f", "metadata"), ("f", name)) for name in (
        "name", "namespace", "creationTimestamp", "selfLink", "uid", "clusterName",
        "generation", "managedFields", "resourceVersion")}


class SchemaError(Exception):
    """The applied configuration does not fit the schema (the real server answers 500)."""


class ApplyConflict(Exception):
    """Fields another manager owns would change. ``conflicts``: [(Entry, path), ...]."""

    def __init__(self, conflicts):
        super().__init__("apply conflict")
        self.conflicts = conflicts

    def message(self) -> str:
        if len(self.conflicts) == 1:
            entry, path = self.conflicts[0]
            return (f"Apply failed with 1 conflict: conflict with {entry.describe()}: "
                    f"{path_string(path)}")
        lines = []
        by_manager: dict[str, list] = {}
        names = {}
        for entry, path in self.conflicts:
            by_manager.setdefault(entry.ident(), []).append(path)
            names[entry.ident()] = entry.describe()
        for ident in sorted(by_manager):
            lines.append(f"conflicts with {names[ident]}:")
            lines += [f"- {path_string(p)}" for p in by_manager[ident]]
        return f"Apply failed with {len(self.conflicts)} conflicts: " + "\n".join(lines)

    def causes(self) -> list[dict]:
        return [{"reason": "FieldManagerConflict", "message": f"conflict with {e.describe()}",
                 "field": path_string(p)} for e, p in self.conflicts]


# --- typing from the schema -------------------------------------------------------------------

def _kind(schema, value) -> str:
    if isinstance(value, dict):
        if schema and schema.get("x-kubernetes-map-type") == "atomic":
            return "atomic"
        return "map"
    if isinstance(value, list):
        schema = schema or {}
        if schema.get("x-kubernetes-list-type") == "map" and schema.get(
                "x-kubernetes-list-map-keys"):
            return "assoc"
        if schema.get("x-kubernetes-list-type") == "set":
            return "set"
        return "atomic"
    return "scalar"


def _field(schema, key):
    """(sub-schema, declared, allowed) for ``key`` of an object typed by ``schema``."""
    if schema is None:
        return None, False, True
    props = schema.get("properties") or {}
    if key in props:
        return props[key], True, True
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        return extra, False, True
    if extra is True or schema.get("x-kubernetes-preserve-unknown-fields"):
        return None, False, True
    if not props and "type" not in schema:
        return None, False, True
    return None, False, False


def _items(schema):
    if schema and isinstance(schema.get("items"), dict):
        return schema["items"]
    return None


def canonical(value) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def same(a, b) -> bool:
    """Value equality that keeps 1, 1.0 and true apart, as Go does."""
    return canonical(a) == canonical(b)


def _element(schema, kind, item, index, path, strict):
    if kind == "set":
        return ("v", canonical(item))
    keys = schema["x-kubernetes-list-map-keys"]
    if not isinstance(item, dict) or any(k not in item for k in keys):
        if strict:
            missing = next((k for k in keys if not isinstance(item, dict) or k not in item))
            raise SchemaError(f"{path_string(path)}: element {index}: associative list with keys "
                              f'has an element that omits key field "{missing}"')
        return ("i", index)
    return ("k", canonical({k: item[k] for k in keys}))


def _index(schema, kind, value, path=(), strict=False):
    """[(path element, item)] of a keyed list or set, first occurrence of a key wins."""
    out, seen = [], set()
    for i, item in enumerate(value if isinstance(value, list) else []):
        pe = _element(schema, kind, item, i, path, strict)
        if pe not in seen:
            seen.add(pe)
            out.append((pe, item))
    return out


# --- paths ------------------------------------------------------------------------------------

def path_string(path) -> str:
    """The path the way the real server prints it in conflicts: ``.spec.x[name="a"].y``."""
    out = ""
    for kind, val in path:
        if kind == "f":
            out += "." + val
        elif kind == "k":
            keys = json.loads(val)
            out += "[" + ",".join(f"{k}={json.dumps(v)}" for k, v in sorted(keys.items())) + "]"
        elif kind == "v":
            out += "[=" + val + "]"
        else:
            out += f"[{val}]"
    return out


def _pe_str(pe) -> str:
    return f"{pe[0]}:{pe[1]}"


def _pe_parse(text: str):
    kind, _, val = text.partition(":")
    if kind == "f":
        return ("f", val)
    if kind in ("k", "v"):
        return (kind, canonical(json.loads(val)))
    if kind == "i":
        return ("i", int(val))
    raise ValueError(f"bad fieldsV1 key {text!r}")


def encode(paths) -> dict:
    """A set of paths as FieldsV1 (``f:``/``k:``/``v:`` keys, ``.`` for an owned node)."""
    root: dict = {}
    for path in paths:
        node = root
        for pe in path:
            node = node.setdefault(_pe_str(pe), {})
        node["."] = {}

    def tidy(node):
        out = {}
        if "." in node and len(node) > 1:
            out["."] = {}
        for key in sorted(k for k in node if k != "."):
            out[key] = tidy(node[key])
        return out
    return tidy(root)


def decode(tree: dict, prefix=()) -> set:
    out = set()
    for key, sub in tree.items():
        if key == ".":
            if prefix:
                out.add(prefix)
            continue
        path = prefix + (_pe_parse(key),)
        if not sub:
            out.add(path)
        else:
            out |= decode(sub, path)
    return out


# --- the three structured-merge-diff operations ------------------------------------------------

def field_set(value, schema, path=(), out=None) -> set:
    """The fields an applied configuration sets (raises SchemaError for undeclared fields)."""
    if out is None:
        out = set()
    kind = _kind(schema, value)
    if kind in ("scalar", "atomic"):
        out.add(path)
    elif kind == "map":
        for key, child in value.items():
            sub, declared, allowed = _field(schema, key)
            cpath = path + (("f", key),)
            if not allowed:
                raise SchemaError(f"{path_string(cpath)}: field not declared in schema")
            field_set(child, sub, cpath, out)
            if child is None or child == {} or not declared:
                out.add(cpath)
    else:
        for pe, item in _index(schema, kind, value, path, strict=True):
            cpath = path + (pe,)
            if kind == "assoc":
                field_set(item, _items(schema), cpath, out)
            out.add(cpath)
    return out


def compare(lhs, rhs, schema):
    """(added, removed, modified) paths from ``lhs`` to ``rhs``, as structured-merge-diff
    counts them: leaves and atomic values, plus map/list nodes that appear or disappear."""
    added, removed, modified = set(), set(), set()

    def empty(v):
        return v is MISSING or v == {} or v == []

    def walk(a, b, sch, path):
        ka = _kind(sch, a) if a is not MISSING else None
        kb = _kind(sch, b) if b is not MISSING else None
        if ka and kb and ka != kb:
            modified.add(path)
            return
        kind = ka or kb
        if kind in ("scalar", "atomic") or (empty(a) and empty(b)):
            if a is MISSING:
                added.add(path)
            elif b is MISSING:
                removed.add(path)
            elif not same(a, b):
                modified.add(path)
            return
        if kind == "map":
            da = a if a is not MISSING else {}
            db = b if b is not MISSING else {}
            for key in list(da) + [k for k in db if k not in da]:
                walk(da.get(key, MISSING), db.get(key, MISSING), _field(sch, key)[0],
                     path + (("f", key),))
        else:
            ia = dict(_index(sch, kind, a if a is not MISSING else []))
            ib = dict(_index(sch, kind, b if b is not MISSING else []))
            sub = _items(sch) if kind == "assoc" else None
            for pe in list(ia) + [p for p in ib if p not in ia]:
                walk(ia.get(pe, MISSING), ib.get(pe, MISSING), sub, path + (pe,))
        if a is MISSING:
            added.add(path)
        elif b is MISSING:
            removed.add(path)

    walk(lhs, rhs, schema, ())
    return added, removed, modified


def merge(lhs, rhs, schema):
    """The live object with an applied configuration merged in."""
    if rhs is MISSING:
        return copy.deepcopy(lhs)
    if lhs is MISSING:
        return copy.deepcopy(rhs)
    kl, kr = _kind(schema, lhs), _kind(schema, rhs)
    if kl != kr or kr in ("scalar", "atomic"):
        return copy.deepcopy(rhs)
    if kr == "map":
        out = {}
        for key, val in lhs.items():
            out[key] = merge(val, rhs.get(key, MISSING), _field(schema, key)[0])
        for key, val in rhs.items():
            if key not in lhs:
                out[key] = copy.deepcopy(val)
        return out
    return _merge_list(lhs, rhs, schema, kr)


def _merge_list(lhs, rhs, schema, kind):
    """Keyed lists and sets: items matched by key; order follows structured-merge-diff (live
    items keep their place, shared items follow the configuration's order, new ones are
    placed where the configuration has them)."""
    sub = _items(schema) if kind == "assoc" else None
    left, right = _index(schema, kind, lhs), _index(schema, kind, rhs)
    lmap, rmap = dict(left), dict(right)
    shared = [pe for pe, _ in right if pe in lmap]
    nxt = 0
    done: set = set()
    out = []
    li = ri = 0
    while li < len(left) or ri < len(right):
        if li < len(left) and ri < len(right):
            lpe = left[li][0]
            if lpe == right[ri][0]:
                done.add(lpe)
                out.append(merge(lmap[lpe], rmap[lpe], sub))
                li += 1
                ri += 1
                nxt += 1
                continue
            if lpe in rmap and nxt < len(shared) and shared[nxt] != lpe:
                li += 1
                continue
        if li < len(left):
            lpe, item = left[li]
            if lpe not in rmap:
                out.append(copy.deepcopy(item))
                li += 1
                continue
            if lpe in done:
                li += 1
                continue
        if ri < len(right):
            rpe = right[ri][0]
            done.add(rpe)
            out.append(merge(lmap.get(rpe, MISSING), rmap[rpe], sub))
            ri += 1
            if nxt < len(shared) and shared[nxt] == rpe:
                nxt += 1
    return out


def _remove(obj, path, schema) -> None:
    node, sch = obj, schema
    for depth, pe in enumerate(path):
        last = depth == len(path) - 1
        if pe[0] == "f":
            if not isinstance(node, dict) or pe[1] not in node:
                return
            if last:
                del node[pe[1]]
                return
            node, sch = node[pe[1]], _field(sch, pe[1])[0]
        else:
            if not isinstance(node, list):
                return
            kind = _kind(sch, node)
            if kind not in ("assoc", "set"):
                return
            position = next((i for i, item in enumerate(node)
                             if _element(sch, kind, item, i, (), False) == pe), None)
            if position is None:
                return
            if last:
                del node[position]
                return
            node, sch = node[position], _items(sch)


def prune(merged, schema, last_set, keep) -> None:
    """Remove (in place) what the applier owned last time and nobody owns now; a node stays
    when something below it is still owned."""
    kept_prefixes = set()
    for path in keep:
        for n in range(1, len(path) + 1):
            kept_prefixes.add(path[:n])
    doomed = {p for p in last_set - keep if p not in kept_prefixes}
    for path in doomed:
        # removing a node removes what is below it (and a keyed item cannot be found again
        # once its key field is gone), so only remove the outermost doomed paths
        if not any(path[:n] in doomed for n in range(1, len(path))):
            _remove(merged, path, schema)


# --- managed fields entries -------------------------------------------------------------------

class Entry:
    """One metadata.managedFields entry."""

    def __init__(self, manager, operation, api_version, subresource="", time=None, fields=None):
        self.manager = manager
        self.operation = operation
        self.api_version = api_version
        self.subresource = subresource or ""
        self.time = time
        self.fields = set(fields or ())

    def key(self):
        return (self.manager, self.operation, self.subresource,
                self.api_version if self.operation == "Update" else "")

    def ident(self) -> str:
        data = {"manager": self.manager, "operation": self.operation}
        if self.operation == "Update":
            data["apiVersion"] = self.api_version
        if self.subresource:
            data["subresource"] = self.subresource
        return canonical(data)

    def describe(self) -> str:
        text = json.dumps(self.manager)
        if self.subresource:
            text += f" with subresource {json.dumps(self.subresource)}"
        if self.operation == "Update":
            text += f" using {self.api_version}"
            if self.time:
                text += f" at {self.time}"
        return text

    def to_json(self) -> dict:
        out = {"manager": self.manager, "operation": self.operation,
               "apiVersion": self.api_version}
        if self.time:
            out["time"] = self.time
        out["fieldsType"] = "FieldsV1"
        out["fieldsV1"] = encode(self.fields)
        if self.subresource:
            out["subresource"] = self.subresource
        return out


def decode_entries(managed) -> dict:
    """managedFields list -> {key: Entry}; raises ValueError when it cannot be read."""
    out = {}
    for raw in managed or []:
        if not isinstance(raw, dict) or raw.get("operation") not in ("Apply", "Update"):
            raise ValueError("bad managedFields entry")
        entry = Entry(raw.get("manager", ""), raw["operation"], raw.get("apiVersion", ""),
                      raw.get("subresource", ""), raw.get("time"),
                      decode(raw.get("fieldsV1") or {}))
        out[entry.key()] = entry
    return out


def encode_entries(entries: dict) -> list:
    ordered = sorted(entries.values(), key=lambda e: (e.operation, e.time or "", e.manager,
                                                      e.api_version, e.subresource))
    return [e.to_json() for e in ordered]


def _keep_fields(entries, drop) -> dict:
    out = {}
    for key, entry in entries.items():
        fields = entry.fields - drop
        if fields:
            out[key] = Entry(entry.manager, entry.operation, entry.api_version,
                             entry.subresource, entry.time, fields)
    return out


def record_update(entries, live, new, schema, *, manager, api_version, subresource, ignore, now):
    """Ownership after a non-apply write by ``manager`` turned ``live`` into ``new``."""
    added, removed, modified = compare(live, new, schema)
    changed = {p for p in added | modified if not ignore(p)}
    removed = {p for p in removed if not ignore(p)}
    out = _keep_fields(entries, changed | removed)
    if changed:
        entry = Entry(manager, "Update", api_version, subresource, now, changed)
        previous = out.get(entry.key())
        if previous:
            entry.fields |= previous.fields
        out[entry.key()] = entry
    return out


def apply_config(entries, live, config, schema, *, manager, api_version, subresource, ignore,
                 force, now):
    """Server-side apply of ``config`` by ``manager``: (new object, new entries).
    Raises ApplyConflict or SchemaError."""
    new_set = {p for p in field_set(config, schema) if p and not ignore(p)}
    merged = merge(live, config, schema)
    me = Entry(manager, "Apply", api_version, subresource)
    last = entries.get(me.key())
    others = {k: e for k, e in entries.items() if k != me.key()}
    if last is not None:
        owned = set(new_set)
        for entry in others.values():
            owned |= entry.fields
        prune(merged, schema, last.fields, owned)
    added, removed, modified = compare(live, merged, schema)
    changed = {p for p in added | modified if not ignore(p)}
    removed = {p for p in removed if not ignore(p)}
    conflicts = []
    for entry in sorted(others.values(), key=lambda e: e.ident()):
        for path in sorted(entry.fields & changed, key=path_string):
            conflicts.append((entry, path))
    if conflicts and not force:
        raise ApplyConflict(conflicts)
    out = _keep_fields(others, changed | removed)
    me.fields = new_set
    me.time = now if not same(live, merged) else (last.time if last else None)
    out[me.key()] = me
    return merged, out
