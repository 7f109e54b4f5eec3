"""The rack report: one self-contained HTML page of the fleet (``rackctl report``). Pure.

Every rack is a column of its trays, coloured by slice, labelled with host and tier(s), marked
when missing, drained, to drain, pending or drifted; at the top the held racks and why; beside it
the plan: its summary line, the files it takes over and the reload command apply runs, the trays
to look at, drift (``drift.of``), the changes and the diagnostics (the same data as the JSON
plan; file diffs stay in ``rackctl plan``). Inline CSS only: no script, font, image or any other
URL, and a Content-Security-Policy that would block them. Every text is escaped (jinja2
autoescape; no ``|safe`` or ``Markup`` anywhere) and made inert and capped line by line
(``untrusted.shown``, the environment's ``finalize``): host names, reasons and messages come from
the inventory and the targets.

Cost: linear in trays, changes and diagnostics. A tray is one ``<li>`` of about 55 bytes
(host, tiers, a class naming its slice colour and state; a ``title`` only on marked trays), about
67 with its share of the rack around it. Above ``COMPACT_RACKS`` racks the page switches to small
unlabelled cells (the names stay in the page, shown on hover). Measured on a simulated fleet of
2,000 racks (36,000 trays, a first plan: 2,000 blocks to create) the page is 2.7 MB, and the rack
view plus the page take under a second on top of planning (itself 6-9 s there). No clock, no
randomness, everything in a defined order: the same input gives the same bytes.
"""

from __future__ import annotations

import jinja2

from reconciler import __version__
from reconciler.guard.untrusted import shown
from reconciler.plan import drift
from reconciler.plan.model import Plan
from reconciler.views.rackview import HEALTHY, FleetView, RackView, TrayView
from reconciler.views.report import HELD_TITLE, TAKEN_OVER_TITLE, held_lines, reload_line, summary_line, taken_over

#: Slice colours in the palette (the n-th slice of a rack takes colour n modulo this).
COLOURS = 8
#: Above this many racks, trays are drawn as small cells without labels.
COMPACT_RACKS = 24


def render_html(view: FleetView, plan: Plan) -> str:
    """The report page for ``view`` (the racks) and ``plan`` (the run's plan)."""
    attention = [(r, t) for r in view.racks for t in r.trays if t.state != HEALTHY or t.marks]
    template = _environment().get_template("report.html.j2")
    return template.render(
        version=__version__, view=view, totals=view.totals(), summary=summary_line(plan),
        unplaced=", ".join(view.unplaced[:20]) + (" ..." if len(view.unplaced) > 20 else ""),
        stale=plan.stale_inventory, held=held_lines(plan), held_title=HELD_TITLE, taken_over=taken_over(plan),
        taken_over_title=TAKEN_OVER_TITLE, reload=reload_line(plan), attention=attention, drift=_drift_rows(plan),
        changes=plan.changes,
        diagnostics=plan.listed_diagnostics,  # drains are shown on their trays
        colours=COLOURS, legend_colours=min(max((len(r.slices) for r in view.racks), default=0), COLOURS),
        compact=len(view.racks) > COMPACT_RACKS, tray_class=_tray_class)


def _drift_rows(plan: Plan) -> list[tuple[str, str]]:
    """(what, detail) of each drift item (``drift.of``): a drift or orphan change (its address),
    a hardware finding (its code), a held rack (its name)."""
    found, detail = drift.of(plan), {d["address"]: d["detail"] for d in plan.drift}
    return ([(c.address, f"{c.action} ({c.cause}): {detail.get(c.address, c.reason)}") for c in found.changes]
            + [(d.code, f"{d.severity}: {d.message}") for d in found.hardware]
            + held_lines(plan))


def _tray_class(rack: RackView, tray: TrayView) -> str:
    """``k<colour>`` (its slice; none for an unnamed missing tray), its state unless healthy, and
    ``drift``."""
    parts = [f"k{rack.colour_of(tray.slice_name) % COLOURS}"] if tray.host else []
    if tray.state != HEALTHY:
        parts.append(tray.state)
    if "drift" in tray.marks:
        parts.append("drift")
    return " ".join(parts)


def _environment() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.PackageLoader("reconciler.views", "templates"),
                              autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True,
                              lstrip_blocks=True, keep_trailing_newline=True, finalize=_inert)


def _inert(value: object) -> object:
    """What a ``{{ }}`` shows, before autoescape: text through ``shown`` (a tray's notes are
    separate values, one tooltip line each), anything else as it is."""
    return shown(value) if isinstance(value, str) else value
