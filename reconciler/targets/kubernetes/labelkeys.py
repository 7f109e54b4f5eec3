"""The node label keys and values rackctl sets, which renderers name as topology levels.

Keys sit under the intent's prefix (default ``rackctl.dev/``); keys and values follow the
Kubernetes label syntax (``k8s.io/apimachinery`` validation): a value that does not fit is
shortened and given a hash suffix, so that two different values never meet.
"""

from __future__ import annotations

import hashlib
import re

MANAGED_BY = ("app.kubernetes.io/managed-by", "rackctl")
HOSTNAME_LABEL = "kubernetes.io/hostname"
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")
_MAX_LABEL_VALUE = 63


def label_value(text: str) -> str:
    """``text`` as a valid label value: unchanged when it is one, else its valid characters cut
    to fit and ``-`` + 10 hex digits of its SHA-256 (so different texts stay different)."""
    if len(text) <= _MAX_LABEL_VALUE and _LABEL_VALUE.fullmatch(text):
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:10]
    kept = re.sub(r"[^-A-Za-z0-9_.]", "-", text)[: _MAX_LABEL_VALUE - 11].strip("-_.")
    return f"{kept}-{digest}" if kept else digest


def tier_label(prefix: str, tier: str) -> str:
    """The label key marking a node that serves ``tier``: ``<prefix>tier.<tier>``."""
    return f"{prefix}tier.{tier}"


def domain_label(prefix: str) -> str:
    """The label key of a node's NVLink domain (the NVML fabric cluster UUID)."""
    return f"{prefix}nvlink-domain"


def slice_label(prefix: str) -> str:
    """The label key of a node's slice (its flat name, ``r01-s0``)."""
    return f"{prefix}slice"
