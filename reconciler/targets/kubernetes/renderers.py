"""The registry of the Kubernetes target's object renderers: which kinds rackctl renders,
discovers, reads, compares, applies and prunes.

A renderer turns the intent and the layout into cluster-scoped objects of its own kinds
(``objects.ObjectKind``), at the API versions the server serves (or, offline, the ones it
would render). Everything else in the target (discovery, the owned-object reads, the dry-run,
apply order, pruning, the live snapshot) loops over ``RENDERERS``; adding a renderer is adding
its module and naming it here. Node labels, taints and cordons are the Node patches of
``compare``, and the ComputeDomain checks read the DRA driver's objects (``computedomains``):
neither renders an object.
"""

from __future__ import annotations

from typing import Any, Protocol

from reconciler.diagnostics import Diagnostic
from reconciler.intent.model import Intent, KubernetesTarget
from reconciler.layout.model import Layout
from reconciler.targets.kubernetes.kai import KaiRenderer
from reconciler.targets.kubernetes.kueue import KueueRenderer
from reconciler.targets.kubernetes.objects import KubeObject, ObjectKind, Served


class Renderer(Protocol):
    """One renderer. ``kinds``: its object kinds, in apply order."""

    kinds: tuple[ObjectKind, ...]

    def versions(self, target: KubernetesTarget, served: Served | None) -> dict[ObjectKind, str]:
        """Kind -> API version to render; a kind left out is not rendered (nor pruned).
        ``served``: what the server serves (None: offline)."""

    def missing(self, target: KubernetesTarget, served: Served, versions: dict[ObjectKind, str]) -> list[Diagnostic]:
        """Errors for kinds the intent needs that the server does not serve."""

    def render(self, intent: Intent, layout: Layout, versions: dict[ObjectKind, str],
               owner: dict[str, str]) -> list[KubeObject]:
        """The desired objects of the kinds in ``versions``, each carrying ``owner``'s labels."""

    def replaced(self, obj: KubeObject, live: dict[str, Any]) -> str | None:
        """Why ``live`` cannot become ``obj`` in place (a field the API holds immutable), so that
        applying it deletes and creates it again; None when it can be updated."""

    def plan_fields(self, versions: dict[ObjectKind, str]) -> dict[str, Any]:
        """Fields this renderer adds to the plan's ``kubernetes`` section (JSON)."""

    def describe(self, versions: dict[ObjectKind, str]) -> str | None:
        """What it renders, for the offline note (``Kueue v1beta2``); None: nothing."""


#: Every renderer, in apply order (pruned in reverse).
RENDERERS: tuple[Renderer, ...] = (KueueRenderer(), KaiRenderer())

KINDS: tuple[ObjectKind, ...] = tuple(k for r in RENDERERS for k in r.kinds)
#: The API groups to discover, in the order of their first kind.
GROUPS: tuple[str, ...] = tuple(dict.fromkeys(k.group for k in KINDS))
_BY_SHOWN = {k.shown: k for k in KINDS}
_OWNER = {k: r for r in RENDERERS for k in r.kinds}


def by_shown(shown: str) -> ObjectKind:
    """The registered kind that addresses name ``shown`` (``ObjectKind.shown``); ``KeyError``
    for none."""
    return _BY_SHOWN[shown]


def choose_versions(target: KubernetesTarget, served: Served | None) -> dict[ObjectKind, str]:
    """Kind -> API version every renderer renders (``Renderer.versions``), in apply order."""
    out: dict[ObjectKind, str] = {}
    for r in RENDERERS:
        out.update(r.versions(target, served))
    return out


def missing(target: KubernetesTarget, served: Served, versions: dict[ObjectKind, str]) -> list[Diagnostic]:
    """Every renderer's errors for kinds the server does not serve."""
    return [d for r in RENDERERS for d in r.missing(target, served, versions)]


def render(intent: Intent, layout: Layout, versions: dict[ObjectKind, str], owner: dict[str, str]) -> list[KubeObject]:
    """Every renderer's desired objects, in apply order."""
    return [o for r in RENDERERS for o in r.render(intent, layout, {k: v for k, v in versions.items()
                                                                   if k in r.kinds}, owner)]


def replaced(obj: KubeObject, live: dict[str, Any]) -> str | None:
    """Why ``obj`` replaces ``live`` instead of updating it (``Renderer.replaced``)."""
    return _OWNER[obj.type].replaced(obj, live)


def plan_fields(versions: dict[ObjectKind, str]) -> dict[str, Any]:
    """The renderers' fields of the plan's ``kubernetes`` section."""
    out: dict[str, Any] = {}
    for r in RENDERERS:
        out.update(r.plan_fields(versions))
    return out


def describe(versions: dict[ObjectKind, str]) -> str:
    """``Kueue v1beta2`` (and the other renderers', joined by "and"), for the offline note."""
    return " and ".join(filter(None, (r.describe(versions) for r in RENDERERS)))


def apply_rank(kind: ObjectKind) -> int:
    """Where objects of ``kind`` go in apply order (``KINDS``)."""
    return KINDS.index(kind)
