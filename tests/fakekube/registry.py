"""What the fake API server serves: resources (built-in kinds and CRDs), their versions, the
discovery documents, and errors shaped as the real server's metav1.Status (test infrastructure
only)."""

from __future__ import annotations

import re

import kubeschema as ks

CR_VERBS = ["delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"]


# --- errors -----------------------------------------------------------------------------------

class ApiError(Exception):
    """An error answered as a metav1.Status."""

    def __init__(self, code: int, reason: str, message: str, details: dict | None = None):
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details

    def status(self) -> dict:
        out = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": self.message}
        if self.reason:
            out["reason"] = self.reason
        if self.details is not None:
            out["details"] = {k: v for k, v in self.details.items() if v not in (None, "", [])}
        out["code"] = self.code
        return out


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def path_not_found() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource", {})


def method_not_allowed() -> ApiError:
    return ApiError(405, "MethodNotAllowed",
                    "the server does not allow this method on the requested resource", {})


def unsupported_media(accepted: list[str]) -> ApiError:
    return ApiError(415, "UnsupportedMediaType", "the body of the request was in an unknown format "
                    "- accepted media types include: " + ", ".join(accepted))


def invalid(kind: str, group: str, name: str, errs: list) -> ApiError:
    qualified = f"{kind}.{group}" if group else kind
    text = str(errs[0]) if len(errs) == 1 else "[" + ", ".join(map(str, errs)) + "]"
    return ApiError(422, "Invalid", f'{qualified} "{name}" is invalid: {text}',
                    {"name": name, "group": group, "kind": kind,
                     "causes": [e.cause() for e in errs]})


def option_errors(kind: str, errs: list) -> ApiError:
    return invalid(kind, "meta.k8s.io", "", errs)


# --- resources --------------------------------------------------------------------------------

class Version:
    def __init__(self, name, served=True, storage=False, schema=None, status=False,
                 deprecated=False, warning=None):
        self.name, self.served, self.storage = name, served, storage
        self.schema = schema or ks.PRESERVE_ALL
        self.status, self.deprecated, self.warning = status, deprecated, warning


class Resource:
    def __init__(self, group, plural, singular, kind, list_kind, namespaced, versions,
                 short_names=(), categories=(), crd=False, readonly=False, name_rule="subdomain",
                 field_labels=()):
        self.group, self.plural, self.singular, self.kind = group, plural, singular, kind
        self.list_kind, self.namespaced, self.versions = list_kind, namespaced, versions
        self.short_names, self.categories = list(short_names), list(categories)
        self.crd, self.readonly, self.name_rule = crd, readonly, name_rule
        self.field_labels = {"metadata.name", "metadata.namespace", *field_labels}

    @property
    def qualified(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def gv(self, version: str) -> str:
        return f"{self.group}/{version}" if self.group else version

    def details(self, name: str, uid: str = "") -> dict:
        return {"name": name, "group": self.group, "kind": self.plural, "uid": uid}

    def not_found(self, name: str) -> ApiError:
        return ApiError(404, "NotFound", f'{self.qualified} "{name}" not found', self.details(name))

    def conflict(self, name: str, why: str = "the object has been modified; please apply your "
                 "changes to the latest version and try again") -> ApiError:
        return ApiError(409, "Conflict", f'Operation cannot be fulfilled on {self.qualified} '
                        f'"{name}": {why}', self.details(name))


def crd_resource(doc: dict) -> Resource:
    spec = doc["spec"]
    names = spec["names"]
    versions = {}
    for v in spec.get("versions") or []:
        raw = (v.get("schema") or spec.get("validation") or {}).get("openAPIV3Schema")
        subresources = v.get("subresources") or spec.get("subresources") or {}
        versions[v["name"]] = Version(
            v["name"], v.get("served", True), v.get("storage", False), ks.object_schema(raw),
            "status" in subresources, v.get("deprecated", False), v.get("deprecationWarning"))
    fields = [f.get("jsonPath", "").lstrip(".") for v in spec.get("versions") or []
              for f in v.get("selectableFields") or []]
    return Resource(spec["group"], names["plural"], names.get("singular", names["kind"].lower()),
                    names["kind"], names.get("listKind", names["kind"] + "List"),
                    spec.get("scope") == "Namespaced", versions, names.get("shortNames", ()),
                    names.get("categories", ()), crd=True, field_labels=fields)


def builtin_resources() -> list[Resource]:
    return [
        Resource("", "nodes", "node", "Node", "NodeList", False,
                 {"v1": Version("v1", True, True, ks.NODE, status=True)}, ["no"],
                 field_labels=["spec.unschedulable"]),
        Resource("", "namespaces", "namespace", "Namespace", "NamespaceList", False,
                 {"v1": Version("v1", True, True, ks.NAMESPACE, status=True)}, ["ns"],
                 name_rule="label", field_labels=["status.phase"]),
        Resource("coordination.k8s.io", "leases", "lease", "Lease", "LeaseList", True,
                 {"v1": Version("v1", True, True, ks.LEASE)}),
        Resource("apiextensions.k8s.io", "customresourcedefinitions", "customresourcedefinition",
                 "CustomResourceDefinition", "CustomResourceDefinitionList", False,
                 {"v1": Version("v1", True, True, ks.PRESERVE_ALL, status=True)}, ["crd", "crds"],
                 readonly=True),
    ]


def version_order(name: str):
    """Kubernetes version priority: v2 > v1 > v1beta2 > v1beta1 > v1alpha1 > anything else."""
    m = re.fullmatch(r"v(\d+)(?:(alpha|beta)(\d+))?", name)
    if not m:
        return (0, 0, 0, 0, [-ord(c) for c in name])
    stage = {None: 3, "beta": 2, "alpha": 1}[m.group(2)]
    return (1, stage, int(m.group(1)), int(m.group(3) or 0), [])


# --- discovery --------------------------------------------------------------------------------

def group_versions(resources, group: str) -> list[str]:
    """The served versions of a group, highest priority first."""
    names = {v.name for r in resources if r.group == group
             for v in r.versions.values() if v.served}
    return sorted(names, key=version_order, reverse=True)


def discovery_resources(resources, group: str, version: str) -> dict:
    out = []
    for res in sorted(resources, key=lambda r: r.plural):
        ver = res.versions.get(version)
        if res.group != group or ver is None or not ver.served:
            continue
        entry = {"name": res.plural, "singularName": res.singular, "namespaced": res.namespaced,
                 "kind": res.kind, "verbs": ["get", "list"] if res.readonly else CR_VERBS}
        if res.short_names:
            entry["shortNames"] = res.short_names
        if res.categories:
            entry["categories"] = res.categories
        out.append(entry)
        if ver.status:
            out.append({"name": res.plural + "/status", "singularName": "",
                        "namespaced": res.namespaced, "kind": res.kind,
                        "verbs": ["get"] if res.readonly else ["get", "patch", "update"]})
    gv = f"{group}/{version}" if group else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv,
            "resources": out}


def api_group(resources, group: str) -> dict:
    versions = [{"groupVersion": f"{group}/{v}", "version": v}
                for v in group_versions(resources, group)]
    return {"name": group, "versions": versions, "preferredVersion": versions[0]}


def discovery(resources, segs: list[str], git_version: str, port: int) -> dict:
    """The discovery document at /version, /api, /api/v1, /apis, /apis/G or /apis/G/V."""
    resources = list(resources)
    if segs == ["version"]:
        m = re.match(r"v(\d+)\.(\d+)", git_version)
        return {"major": m.group(1) if m else "1", "minor": m.group(2) if m else "31",
                "gitVersion": git_version, "gitCommit": "0" * 40, "gitTreeState": "clean",
                "buildDate": "2024-08-13T00:00:00Z", "goVersion": "go1.22.5",
                "compiler": "gc", "platform": "linux/amd64"}
    if segs == ["api"]:
        return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": f"127.0.0.1:{port}"}]}
    if segs == ["api", "v1"]:
        return discovery_resources(resources, "", "v1")
    if segs == ["apis"]:
        groups = sorted({r.group for r in resources if r.group})
        return {"kind": "APIGroupList", "apiVersion": "v1",
                "groups": [api_group(resources, g) for g in groups
                           if group_versions(resources, g)]}
    if len(segs) == 2 and group_versions(resources, segs[1]):
        return {"kind": "APIGroup", "apiVersion": "v1", **api_group(resources, segs[1])}
    if len(segs) == 3 and segs[2] in group_versions(resources, segs[1]):
        return discovery_resources(resources, segs[1], segs[2])
    raise path_not_found()
