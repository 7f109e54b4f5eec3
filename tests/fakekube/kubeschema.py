"""Schemas and validation for the fake Kubernetes API server (test infrastructure only).

What this module does, and how close it is to a real kube-apiserver:

* ``prune``: drops fields a structural schema does not declare (unless
  ``x-kubernetes-preserve-unknown-fields``), as the CRD decoder does; the dropped paths come
  back so the server can warn (fieldValidation=Warn, the default), fail (Strict) or stay quiet
  (Ignore). ``null`` in a non-nullable field is dropped too, so a default can take its place.
* ``apply_defaults``: fills ``default`` values of the schema where the parent object exists.
* ``validate``: checks an object (metadata excluded, as the real server validates metadata
  separately) against the OpenAPI v3 schema with ``jsonschema`` and turns every failure into a
  Kubernetes-shaped field error (reason, field path, ``Invalid value: ...`` body).
  Simplified: no CEL (``x-kubernetes-validations``), no ``format`` checks, no validation
  ratcheting of unchanged fields, messages paraphrased.
* ``validate_metadata``: object names, label keys and values, annotation keys, finalizers.

The built-in schemas below (ObjectMeta, Node, Namespace) are short hand-written subsets: enough
for field ownership (which lists are atomic, which are keyed) and for the fields rackctl touches.
"""

from __future__ import annotations

import copy
import json
import re

import jsonschema

# --- field errors -----------------------------------------------------------------------------

_NO_VALUE = object()

# error type text -> StatusCause reason
_REASONS = {
    "Invalid value": "FieldValueInvalid",
    "Required value": "FieldValueRequired",
    "Unsupported value": "FieldValueNotSupported",
    "Duplicate value": "FieldValueDuplicate",
    "Too long": "FieldValueTooLong",
    "Too many": "FieldValueTooMany",
    "Forbidden": "FieldValueForbidden",
}


def go_value(value) -> str:
    """A value the way a Kubernetes field error prints it (strings quoted, the rest as JSON)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


class FieldError:
    """One field error, as the real server reports it in ``details.causes``."""

    def __init__(self, kind: str, field: str, value=_NO_VALUE, detail: str = "",
                 reason: str | None = None):
        self.kind = kind          # "Invalid value", "Required value", ...
        self.field = field
        self.value = value
        self.detail = detail
        self.reason = reason or _REASONS.get(kind, "FieldValueInvalid")

    def body(self) -> str:
        text = self.kind
        if self.value is not _NO_VALUE and self.kind not in ("Required value", "Forbidden",
                                                              "Too long"):
            text += ": " + go_value(self.value)
        if self.detail:
            text += ": " + self.detail
        return text

    def __str__(self) -> str:
        return f"{self.field}: {self.body()}" if self.field else self.body()

    def cause(self) -> dict:
        return {"reason": self.reason, "message": self.body(), "field": self.field}


# --- names and labels -------------------------------------------------------------------------

DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS_SUBDOMAIN = DNS_LABEL + r"(\." + DNS_LABEL + r")*"
NAME_PART = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
LABEL_VALUE = r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?"


def _syntax_problems(value: str, limit: int, regex: str, what: str) -> list[str]:
    """The two checks every name rule has: a length limit and a pattern."""
    out = []
    if len(value) > limit:
        out.append(f"must be no more than {limit} characters")
    if not re.fullmatch(regex, value):
        out.append(f"{what} (regex '{regex}')")
    return out


def subdomain_problems(value: str) -> list[str]:
    return _syntax_problems(value, 253, DNS_SUBDOMAIN, "a lowercase RFC 1123 subdomain: lower-case "
                            "alphanumerics, '-' or '.', starting and ending alphanumeric")


def dns_label_problems(value: str) -> list[str]:
    return _syntax_problems(value, 63, DNS_LABEL, "a lowercase RFC 1123 label: lower-case alphanumerics or "
                            "'-', starting and ending alphanumeric")


def qualified_name_problems(key: str) -> list[str]:
    """Problems with a label/annotation key: optional DNS-subdomain prefix + '/' + name."""
    parts = key.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            return ["prefix part must be non-empty"]
        problems = ["prefix part " + p for p in subdomain_problems(prefix)]
        if problems:
            return problems
    else:
        return ["a qualified name is an optional DNS subdomain prefix and '/' followed by a "
                f"name matching '{NAME_PART}' (e.g. 'example.com/MyName')"]
    if not name:
        return ["name part must be non-empty"]
    return ["name part " + p for p in _syntax_problems(
        name, 63, NAME_PART, "alphanumerics, '-', '_' or '.', starting and ending alphanumeric")]


def label_value_problems(value) -> list[str]:
    if not isinstance(value, str):
        return ["must be a string"]
    return _syntax_problems(value, 63, LABEL_VALUE, "a label value is empty or alphanumerics, '-', '_' or '.', "
                            "starting and ending alphanumeric")


def validate_metadata(meta: dict, *, name_rule: str = "subdomain") -> list[FieldError]:
    """Validate the ObjectMeta fields the real server checks for every object."""
    errs: list[FieldError] = []
    name = meta.get("name")
    if not name:
        errs.append(FieldError("Required value", "metadata.name",
                               detail="name or generateName is required"))
    elif isinstance(name, str):
        check = dns_label_problems if name_rule == "label" else subdomain_problems
        for problem in check(name):
            errs.append(FieldError("Invalid value", "metadata.name", name, problem))
    for field in ("labels", "annotations"):
        mapping = meta.get(field)
        if mapping is None:
            continue
        if not isinstance(mapping, dict):
            errs.append(FieldError("Invalid value", f"metadata.{field}", mapping,
                                   "must be a map of strings"))
            continue
        for key, value in mapping.items():
            for problem in qualified_name_problems(key):
                errs.append(FieldError("Invalid value", f"metadata.{field}", key, problem))
            if field == "labels":
                for problem in label_value_problems(value):
                    errs.append(FieldError("Invalid value", "metadata.labels", value, problem))
            elif not isinstance(value, str):
                errs.append(FieldError("Invalid value", f"metadata.annotations.{key}", value,
                                       "must be a string"))
        if field == "annotations" and len(json.dumps(mapping)) > 262144:
            errs.append(FieldError("Too long", "metadata.annotations",
                                   detail="may not be more than 262144 bytes"))
    for i, fin in enumerate(meta.get("finalizers") or []):
        if not isinstance(fin, str) or qualified_name_problems(fin):
            errs.append(FieldError("Invalid value", f"metadata.finalizers[{i}]", fin,
                                   "a finalizer must be a qualified name"))
    return errs


# --- built-in schemas (hand-written subsets) ---------------------------------------------------

_STR = {"type": "string"}
_STRMAP = {"type": "object", "additionalProperties": {"type": "string"}}
_ANY_OBJ = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}

OBJECT_META = {
    "type": "object",
    "properties": {
        **{k: _STR for k in ("name", "generateName", "namespace", "selfLink", "uid",
                             "resourceVersion", "creationTimestamp", "deletionTimestamp")},
        "generation": {"type": "integer"},
        "deletionGracePeriodSeconds": {"type": "integer"},
        "labels": _STRMAP,
        "annotations": _STRMAP,
        "finalizers": {"type": "array", "items": _STR, "x-kubernetes-list-type": "set"},
        "ownerReferences": {"type": "array", "x-kubernetes-list-type": "map",
                            "x-kubernetes-list-map-keys": ["uid"], "items": _ANY_OBJ},
        "managedFields": {"type": "array", "items": _ANY_OBJ},
    },
}

TAINT = {
    "type": "object",
    "required": ["key", "effect"],
    "properties": {"key": _STR, "value": _STR, "timeAdded": _STR,
                   "effect": {"type": "string",
                              "enum": ["NoSchedule", "PreferNoSchedule", "NoExecute"]}},
}

NODE = {
    "type": "object",
    "properties": {
        "apiVersion": _STR, "kind": _STR, "metadata": OBJECT_META,
        "spec": {"type": "object", "properties": {
            "podCIDR": _STR, "providerID": _STR, "externalID": _STR,
            "podCIDRs": {"type": "array", "items": _STR, "x-kubernetes-list-type": "set"},
            "unschedulable": {"type": "boolean"},
            "taints": {"type": "array", "items": TAINT, "x-kubernetes-list-type": "atomic"},
            "configSource": _ANY_OBJ}},
        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True, "properties": {
            "conditions": {"type": "array", "x-kubernetes-list-type": "map",
                           "x-kubernetes-list-map-keys": ["type"], "items": _ANY_OBJ},
            "capacity": {"type": "object", "additionalProperties": {
                "x-kubernetes-int-or-string": True}},
            "allocatable": {"type": "object", "additionalProperties": {
                "x-kubernetes-int-or-string": True}}}},
    },
}

NAMESPACE = {
    "type": "object",
    "properties": {
        "apiVersion": _STR, "kind": _STR, "metadata": OBJECT_META,
        "spec": {"type": "object", "properties": {
            "finalizers": {"type": "array", "items": _STR}}},
        "status": _ANY_OBJ,
    },
}

LEASE = {  # coordination.k8s.io/v1: a spec and no status; MicroTimes are plain strings here
    "type": "object",
    "properties": {
        "apiVersion": _STR, "kind": _STR, "metadata": OBJECT_META,
        "spec": {"type": "object", "properties": {
            "holderIdentity": _STR, "acquireTime": _STR, "renewTime": _STR,
            "preferredHolder": _STR, "strategy": _STR,
            # the real validation: "must be greater than 0" / "greater than or equal to 0"
            "leaseDurationSeconds": {"type": "integer", "minimum": 1},
            "leaseTransitions": {"type": "integer", "minimum": 0}}},
    },
}

PRESERVE_ALL = {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
                "properties": {"metadata": OBJECT_META}}


def object_schema(crd_version_schema: dict | None) -> dict:
    """The whole-object schema for one CRD version: its openAPIV3Schema with apiVersion, kind
    and ObjectMeta filled in (a CRD may only say ``metadata: {type: object}``)."""
    if not crd_version_schema:
        return PRESERVE_ALL
    out = dict(crd_version_schema)
    props = dict(out.get("properties") or {})
    props["apiVersion"] = _STR
    props["kind"] = _STR
    props["metadata"] = OBJECT_META
    out["properties"] = props
    return out


# --- pruning and defaulting -------------------------------------------------------------------

def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def prune(value, schema: dict | None, path: str = "", unknown: list | None = None):
    """Drop what ``schema`` does not declare; dropped paths are appended to ``unknown``.
    ``schema`` None means "anything goes" (inside preserve-unknown-fields)."""
    if unknown is None:
        unknown = []
    if schema is None:
        return value
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        keep_unknown = bool(schema.get("x-kubernetes-preserve-unknown-fields")) or extra is True
        for key in list(value):
            sub = props.get(key)
            if sub is None and isinstance(extra, dict):
                sub = extra
            if sub is None:
                if not keep_unknown:
                    unknown.append(_join(path, key))
                    del value[key]
                continue
            if value[key] is None and key in props and not sub.get("nullable"):
                del value[key]
                continue
            value[key] = prune(value[key], sub, _join(path, key), unknown)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            value[i] = prune(item, schema["items"], f"{path}[{i}]", unknown)
    return value


def apply_defaults(value, schema: dict | None):
    """Fill schema defaults inside ``value`` (in place)."""
    if not schema:
        return
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        for key, sub in props.items():
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
            if key in value:
                apply_defaults(value[key], sub)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key in value:
                if key not in props:
                    apply_defaults(value[key], extra)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            apply_defaults(item, schema["items"])


# --- jsonschema validation --------------------------------------------------------------------

_DROP = {"nullable", "default", "description", "example", "externalDocs", "title", "format"}


def to_jsonschema(schema):
    """OpenAPI v3.0 (Kubernetes flavour) -> JSON Schema draft 7, ignoring x-kubernetes-*."""
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key.startswith("x-kubernetes-") or key in _DROP:
            continue
        if key in ("properties", "patternProperties"):
            out[key] = {k: to_jsonschema(v) for k, v in value.items()}
        elif key in ("items", "additionalProperties", "not"):
            out[key] = to_jsonschema(value)
        elif key in ("allOf", "anyOf", "oneOf"):
            out[key] = [to_jsonschema(v) for v in value]
        else:
            out[key] = value
    for bound, limit in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if isinstance(schema.get(bound), bool):
            out.pop(bound, None)
            if schema[bound] and limit in out:
                out[bound] = out.pop(limit)
    if schema.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        if "anyOf" not in out:
            out["type"] = ["integer", "string"]
    if schema.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"] if isinstance(out["type"], str) else \
            list(out["type"]) + ["null"]
    if schema.get("x-kubernetes-list-type") == "set":
        out["uniqueItems"] = True
    return out


def _json_type(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _render_path(parts) -> str:
    out = ""
    for part in parts:
        out = f"{out}[{part}]" if isinstance(part, int) else _join(out, str(part))
    return out


def _to_field_errors(err: jsonschema.ValidationError) -> list[FieldError]:
    path = _render_path(err.absolute_path)
    where = path or "<root>"
    inst, kw, lim = err.instance, err.validator, err.validator_value
    if kw == "required":
        missing = [p for p in lim if isinstance(inst, dict) and p not in inst]
        return [FieldError("Required value", _join(path, p)) for p in missing]
    if kw == "type":
        want = lim if isinstance(lim, str) else "/".join(lim)
        return [FieldError("Invalid value", path, inst,
                           f'{where} in body must be of type {want}: "{_json_type(inst)}"',
                           reason="FieldValueTypeInvalid")]
    if kw == "enum":
        return [FieldError("Unsupported value", path, inst,
                           "supported values: " + ", ".join(go_value(v) for v in lim))]
    if kw == "minItems":
        return [FieldError("Invalid value", path, len(inst),
                           f"{where} in body should have at least {lim} items")]
    if kw == "maxItems":
        return [FieldError("Too many", path, len(inst), f"must have at most {lim} items")]
    if kw == "minLength":
        return [FieldError("Invalid value", path, inst,
                           f"{where} in body should be at least {lim} chars long")]
    if kw == "maxLength":
        return [FieldError("Too long", path, inst, f"may not be more than {lim} bytes")]
    if kw == "pattern":
        return [FieldError("Invalid value", path, inst, f"{where} in body should match '{lim}'")]
    if kw in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
        word = {"minimum": "greater than or equal to", "exclusiveMinimum": "greater than",
                "maximum": "less than or equal to", "exclusiveMaximum": "less than"}[kw]
        return [FieldError("Invalid value", path, inst, f"{where} in body should be {word} {lim}")]
    if kw == "uniqueItems":
        seen, dup = [], None
        for item in inst:
            if item in seen:
                dup = item
                break
            seen.append(item)
        return [FieldError("Duplicate value", path, dup)]
    if kw == "multipleOf":
        return [FieldError("Invalid value", path, inst,
                           f"{where} in body should be a multiple of {lim}")]
    return [FieldError("Invalid value", path, inst, err.message)]


_VALIDATORS: dict[int, tuple[dict, jsonschema.Draft7Validator]] = {}


def _validator(schema: dict) -> jsonschema.Draft7Validator:
    cached = _VALIDATORS.get(id(schema))
    if cached is None or cached[0] is not schema:
        js = to_jsonschema(schema)
        if isinstance(js.get("properties"), dict):
            js["properties"] = {k: v for k, v in js["properties"].items() if k != "metadata"}
        if isinstance(js.get("required"), list):
            js["required"] = [r for r in js["required"] if r != "metadata"]
        cached = _VALIDATORS[id(schema)] = (schema, jsonschema.Draft7Validator(js))
    return cached[1]


def validate(obj: dict, schema: dict) -> list[FieldError]:
    """Validate everything but metadata against a Kubernetes OpenAPI v3 schema."""
    body = {k: v for k, v in obj.items() if k != "metadata"}
    validator = _validator(schema)
    errs: list[FieldError] = []
    for err in sorted(validator.iter_errors(body), key=lambda e: list(map(str, e.absolute_path))):
        errs.extend(_to_field_errors(err))
    return errs


def list_map_duplicates(value, schema: dict | None, path: str = "") -> list[FieldError]:
    """Keyed lists (x-kubernetes-list-type: map) may not repeat a key."""
    errs: list[FieldError] = []
    if not schema:
        return errs
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            sub = props.get(key) or (extra if isinstance(extra, dict) else None)
            errs += list_map_duplicates(item, sub, _join(path, key))
    elif isinstance(value, list):
        items = schema.get("items") if isinstance(schema.get("items"), dict) else None
        keys = schema.get("x-kubernetes-list-map-keys")
        seen = set()
        for i, item in enumerate(value):
            if keys and schema.get("x-kubernetes-list-type") == "map" and isinstance(item, dict):
                ident = json.dumps([item.get(k) for k in keys])
                if ident in seen:
                    errs.append(FieldError("Duplicate value", f"{path}[{i}]",
                                           {k: item.get(k) for k in keys}))
                seen.add(ident)
            errs += list_map_duplicates(item, items, f"{path}[{i}]")
    return errs
