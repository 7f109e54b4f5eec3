"""The jinja2 environment every rackctl template renders in: the package's ``templates/``,
``StrictUndefined`` (a missing value is an error, never an empty string), no HTML escaping (the
outputs are Slurm config and shell text, whose values each renderer checks itself)."""

from __future__ import annotations

import re
from typing import Any

import jinja2

#: What a value may not hold when it goes into a comment line (anything that could end the line).
UNPRINTABLE = re.compile(r"[^\x20-\x7e]")


def environment(**overrides: Any) -> jinja2.Environment:
    """A fresh environment; ``overrides`` are further ``jinja2.Environment`` options."""
    return jinja2.Environment(
        loader=jinja2.PackageLoader("reconciler.targets.slurm", "templates"),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
        **overrides,
    )
