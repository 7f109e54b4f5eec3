"""The non-apply PATCH flavours of the fake API server (test infrastructure only): RFC 7386
merge patch, RFC 6902 JSON patch, and strategic merge patch for built-in kinds.

Strategic merge knows the merge keys of the Node fields only (``SMP_LISTS``); every other list
is replaced whole, maps merge, ``null`` deletes a key; the ``$patch`` (replace, delete),
``$retainKeys`` and ``$deleteFromPrimitiveList`` directives are honoured,
``$setElementOrder`` is ignored.
"""

from __future__ import annotations

import copy

import fieldsets as fs
from registry import bad_request


def merge_patch(target, patch):
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise ValueError(f"bad JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _locate(doc, parts):
    node = doc
    for part in parts[:-1]:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise ValueError("missing value")
    return node


def json_patch(doc, ops):
    """RFC 6902: add, remove, replace, move, copy, test."""
    doc = copy.deepcopy(doc)

    def get(path):
        parts = _pointer(path)
        if not parts:
            return doc
        parent, last = _locate(doc, parts), parts[-1]
        if isinstance(parent, dict) and last in parent:
            return parent[last]
        if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
            return parent[int(last)]
        raise ValueError("missing value")

    def remove(path):
        parts = _pointer(path)
        parent, last = _locate(doc, parts), parts[-1]
        if isinstance(parent, dict) and last in parent:
            return parent.pop(last)
        if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
            return parent.pop(int(last))
        raise ValueError(f"Unable to remove nonexistent key: {last}: missing value")

    def add(path, value, replace=False):
        nonlocal doc
        parts = _pointer(path)
        if not parts:
            doc = copy.deepcopy(value)
            return
        parent, last = _locate(doc, parts), parts[-1]
        if isinstance(parent, dict):
            if replace and last not in parent:
                raise ValueError("replace operation does not apply: doc is missing key")
            parent[last] = copy.deepcopy(value)
        elif isinstance(parent, list):
            if last == "-" and not replace:
                parent.append(copy.deepcopy(value))
            elif last.isdigit() and int(last) <= len(parent) - (1 if replace else 0):
                if replace:
                    parent[int(last)] = copy.deepcopy(value)
                else:
                    parent.insert(int(last), copy.deepcopy(value))
            else:
                raise ValueError("index out of bounds")
        else:
            raise ValueError("missing value")

    for op in ops:
        kind, path = op.get("op"), op.get("path", "")
        if kind == "add":
            add(path, op.get("value"))
        elif kind == "remove":
            remove(path)
        elif kind == "replace":
            add(path, op.get("value"), replace=True)
        elif kind == "move":
            add(path, remove(op.get("from", "")))
        elif kind == "copy":
            add(path, get(op.get("from", "")))
        elif kind == "test":
            if not fs.same(get(path), op.get("value")):
                raise ValueError(f"testing value {path} failed: test failed")
        else:
            raise ValueError(f"Unexpected kind: {kind}")
    return doc


# Strategic merge patch: merge keys of the built-in fields the fake knows (None: a list of
# scalars merged as a set). Every other list is replaced whole, maps merge, null deletes.
SMP_LISTS = {("metadata", "ownerReferences"): "uid", ("metadata", "finalizers"): None,
             ("spec", "podCIDRs"): None, ("status", "conditions"): "type",
             ("status", "addresses"): "type", ("status", "volumesAttached"): "name"}
_DELETE = object()


def _strip_directives(value):
    if isinstance(value, dict):
        return {k: _strip_directives(v) for k, v in value.items() if not k.startswith("$")}
    if isinstance(value, list):
        return [_strip_directives(v) for v in value]
    return value


def strategic_merge(orig, patch, path=()):
    if not isinstance(patch, dict):
        raise bad_request("strategic merge patch must be a JSON object")
    directive = patch.get("$patch")
    if directive == "replace":
        return _strip_directives(patch)
    if directive == "delete":
        return _DELETE
    out = copy.deepcopy(orig) if isinstance(orig, dict) else {}
    if isinstance(patch.get("$retainKeys"), list):
        out = {k: v for k, v in out.items() if k in patch["$retainKeys"]}
    for key, value in patch.items():
        if key in ("$patch", "$retainKeys") or key.startswith("$setElementOrder/"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            out[field] = [v for v in out.get(field) or [] if v not in value]
            continue
        if value is None:
            out.pop(key, None)
            continue
        cpath = path + (key,)
        if isinstance(value, dict):
            sub = strategic_merge(out.get(key), value, cpath)
            if sub is _DELETE:
                out.pop(key, None)
            else:
                out[key] = sub
        elif isinstance(value, list) and cpath in SMP_LISTS:
            out[key] = _smp_list(out.get(key) or [], value, SMP_LISTS[cpath], cpath)
        else:
            out[key] = _strip_directives(value)
    return out


def _smp_list(orig, patch, merge_key, path):
    out = copy.deepcopy(orig)
    for item in patch:
        if merge_key is None:
            if item not in out:
                out.append(item)
            continue
        if not isinstance(item, dict) or merge_key not in item:
            raise bad_request(f"{'.'.join(path)}: element does not contain merge key {merge_key}")
        index = next((i for i, cur in enumerate(out)
                      if isinstance(cur, dict) and cur.get(merge_key) == item[merge_key]), None)
        if item.get("$patch") == "delete":
            if index is not None:
                del out[index]
        elif index is None:
            out.append(_strip_directives(item))
        else:
            out[index] = strategic_merge(out[index], item, path)
    return out
