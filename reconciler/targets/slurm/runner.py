"""The Slurm target as the engine drives it (``targets.protocol``): the config dir and the running
controller read, the layout rendered into blocks, partitions and settings, the plan's Slurm
section, and its apply (files, reload, verification, node drains and resumes).

The files, journal and rollback are ``target``'s; the controller's reads and node updates are
``controller``'s; this module puts them in the order of a run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from reconciler.diagnostics import INFO, WARNING, Diagnostic
from reconciler.errors import InputError
from reconciler.ids import Hostname
from reconciler.intent import slurmrules
from reconciler.intent.model import Intent, block_sizes, tier_block_sizes
from reconciler.layout.model import REASON_PREFIX, History, Layout
from reconciler.layout.nodestates import RESLICE_REASON, HealthHistory, NodePlan, NodeRow, plan_nodes
from reconciler.plan import blastradius
from reconciler.plan.model import ControllerView, Plan, SlurmSection
from reconciler.plan.provenance import CONFIG_DIR, NOT_READ, Digest, canonical, where
from reconciler.state.statedir import AppliedRecord, Held
from reconciler.targets.protocol import ApplySettings, Context, Found, Progress, Refused, StageFindings
from reconciler.targets.slurm import applyguard, controller as slurm_controller, controllercheck, imexcheck, snapshot
from reconciler.targets.slurm import target as slurm_target
from reconciler.targets.slurm.configfiles import DISK
from reconciler.targets.slurm.controller import Controller
from reconciler.targets.slurm.desired import DesiredSlurm, desired_slurm
from reconciler.targets.slurm.diff import build_section
from reconciler.targets.slurm.render import SAFE_PATH, render_slurm
from reconciler.targets.slurm.target import LiveSlurm
from reconciler.text import hostlist
from reconciler.text.yamlsource import display_path


class Slurm:
    """The Slurm target: the files rackctl owns in the Slurm config dir, and the controller."""

    name = "slurm"
    writes_offline = True  # files: an offline apply writes them, reloading nothing it cannot verify
    read_what = "reading the Slurm controller"

    def read_dirs(self, intent: Intent) -> tuple[Path, ...]:
        return (intent.slurm.config_dir,)

    def planned_paths(self, intent: Intent) -> dict[str, Path]:
        """``PlannedWith`` path fields this target names (``apply --plan`` checks them)."""
        return {"slurm_config_dir": intent.slurm.config_dir}

    def facts(self, intent: Intent) -> dict[str, Any]:
        """``rackctl validate``'s words for this target: its ``BlockSizes`` (the whole-cluster
        topology's with topology.yaml), and with topology.yaml each topology's ``block_sizes``
        (``{"mixed": [18], "train": [18], "dev": [9, 18]}``)."""
        out: dict[str, Any] = {"block_sizes": block_sizes(intent)}
        if intent.slurm.topology_file == "topology.yaml":
            out["topologies"] = {intent.name: out["block_sizes"],
                                 **{t.name: tier_block_sizes(intent, t) for t in intent.tiers}}
        return out

    def begin(self, ctx: Context) -> SlurmPass:
        intent = ctx.intent
        if intent.imex == "per-job" and not SAFE_PATH.fullmatch(str(intent.slurm.config_dir)):
            raise InputError(f"{intent.slurm.config_dir}: per-job IMEX puts this path into PrologSlurmctld=, which "
                             "cannot hold spaces or shell characters; expected letters, digits and _ . / -",
                             file=intent.source.file, field="targets.slurm.configDir")
        return SlurmPass(ctx)

    def recover(self, intent: Intent, held: Held, *, reload: bool, offline: bool) -> str | None:
        return slurm_target.recover(intent, held, reload=reload, offline=offline)

    def take_snapshot(self, intent: Intent, options: tuple[object, ...], *, offline: bool) -> dict[str, Any]:
        return snapshot.take(intent, offline=offline)

    def check_snapshot_shape(self, section: dict[str, Any] | None, shown: str) -> None:
        snapshot.check_shape(section, shown)

    def check_snapshot(self, intent: Intent, section: dict[str, Any] | None, shown: str) -> None:
        snapshot.check(intent, section, shown)


class SlurmPass:
    """The Slurm target in one run. After ``history``: ``live`` (the config dir as read),
    ``record`` and ``adopted``; after ``desire``: ``desired`` and ``files`` (rendered); after
    ``read_live``: ``controller`` and ``view`` (None: not read) and ``nodes`` (the node plan)."""

    untouched: tuple[str, ...] = ("nothing reloaded",)
    mark = "drain"

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.replay = snapshot.Replay(ctx.snapshot.name, ctx.snapshot.section("slurm")) if ctx.snapshot else None
        self.live = LiveSlurm(ctx.intent.slurm.config_dir, {})
        self.record: AppliedRecord | None = None
        self.adopted: dict[str, str] | None = None
        self.hist = History()
        self.layout: Layout | None = None
        self.desired: DesiredSlurm | None = None
        self.files: dict[str, bytes] = {}
        self.controller: Controller | None = None
        self._not_read: list[Diagnostic] | None = None  # why the controller was not read, once tried
        self.view: ControllerView | None = None
        self.nodes = NodePlan([], HealthHistory())

    # -- plan ------------------------------------------------------------------------------------

    def history(self) -> History:
        intent, state = self.ctx.intent, self.ctx.state
        self.live = slurm_target.read_live(intent, self.replay.files(intent.slurm.config_dir) if self.replay else DISK)
        self.record = state.read_record(intent.slurm.config_dir)
        self.adopted = state.read_adopted(intent.slurm.config_dir) if self.record is None else None
        self.hist = slurm_target.history(intent, self.live, self.record)
        return self.hist

    def desire(self, layout: Layout, found: Found) -> StageFindings:
        self.layout = layout
        self.desired = desired_slurm(self.ctx.intent, layout, self.hist, found.addresses)
        self.files = render_slurm(self.ctx.intent, self.desired)
        return StageFindings(self.desired.before, self.desired.after)

    def config_findings(self) -> list[Diagnostic]:
        """A half-applied apply (apply and ``reconcile --mode apply`` recovered it already), a
        snapshot's relative config dir under per-job IMEX, and what slurm.conf says."""
        intent, out = self.ctx.intent, []
        pending = slurm_target.interrupted(intent, self.ctx.state)
        if pending is not None:
            out.append(pending)
        if self.replay is not None and intent.imex == "per-job" and self.replay.config_dir_relative:
            out.append(Diagnostic(WARNING, "live-snapshot-path", "targets.slurm.configDir is relative to the intent "
                                  "file, and per-job IMEX renders its absolute path into PrologSlurmctld=: a "
                                  "snapshot planned in another checkout than the one it was taken in shows that "
                                  "path changing; set configDir to the controller's absolute path",
                                  "targets.slurm.configDir"))
        assert self.layout is not None
        self._read_once()
        nodes = set(self.controller.nodes) if self.controller is not None else None
        return out + slurm_target.check(intent, self.live, self.layout.slice_of, nodes)

    def host_findings(self, found: Found, placed: set[Hostname]) -> tuple[list[Diagnostic], list[dict[str, str]]]:
        return imexcheck.check(self.ctx.intent, found.reports, placed, self.files)

    def read_live(self, found: Found, health: HealthHistory) -> list[Diagnostic]:
        """Check the running controller (read once, ``_read_once``, or its answers in the
        snapshot), unless offline or no Slurm client is on PATH; then plan the node states."""
        diags = self._read_once()
        if self.controller is not None:
            assert self.desired is not None
            self.view = controllercheck.compare(self.ctx.intent, self.desired, self.live, self.controller)
            diags = list(self.view.diagnostics)
        diags += self._cited_rules()
        live_states = {h: n.live_state for h, n in self.controller.nodes.items()} if self.controller else None
        assert self.layout is not None
        self.nodes = plan_nodes(self.layout.tray_states, self.layout.slice_of, live_states, health,
                                self.ctx.intent.damping, self.ctx.now, self.layout.held_trays)
        return diags

    def _cited_rules(self) -> list[Diagnostic]:
        """For a release the test bed does not run (the controller's when read, else the intent's):
        the rules rackctl assumes of it, each with its citation."""
        t = self.ctx.intent.slurm
        release = slurmrules.effective(self.controller.version if self.controller else None, t.version)
        cited = slurmrules.cited_rules(release)
        if not cited:
            return []
        bed = ", ".join(map(slurmrules.release_text, slurmrules.MEASURED_RELEASES))
        return [Diagnostic(INFO, "slurm-rules-cited", f"Slurm {slurmrules.release_text(release)} is not on rackctl's "
                           f"test bed ({bed}), so nothing rackctl assumes of it was measured on it: "
                           + "; ".join(f"it {r.what} [{r.evidence}]" for r in cited), "targets.slurm.version")]

    def _read_once(self) -> list[Diagnostic]:
        """Read the running controller the first time this is called (the NodeName check needs
        its node list before the layout settles); [] or why it was not read, every time."""
        if self.controller is None and self._not_read is None:
            self._not_read = self._read_controller()
        return list(self._not_read or [])

    def _read_controller(self) -> list[Diagnostic]:
        run_command: slurm_controller.Runner = slurm_controller.run
        if self.replay is not None:
            replay = self.replay.controller()
            if replay is None:
                return [Diagnostic(INFO, "controller-not-read", f"{self.replay.controller_not_read()}: planned from "
                                   "the snapshot's files alone; node drains are listed, not applied", "slurm")]
            run_command = replay
        elif self.ctx.offline:
            return [Diagnostic(INFO, "controller-not-read", "the running controller was not read (--offline): "
                               "planned from the files alone; node drains are listed, not applied", "slurm")]
        elif not slurm_controller.client_available():
            return [Diagnostic(INFO, "controller-not-read", "scontrol is not on PATH: planned from the files "
                               "alone; node drains are listed, not applied", "slurm")]
        self.controller = slurm_controller.read_controller(run_command)
        return []

    def blast_measures(self, placed: set[Hostname]) -> list[blastradius.Measure]:
        topology = self.ctx.intent.slurm.topology_file
        live_blocks = slurm_target.parse_blocks(self.live.files.get(topology), topology)
        return [blastradius.removed_from_topology(live_blocks, placed),
                blastradius.drained(self.nodes.rows, len(placed), "drains", "trays in Slurm")]

    def provenance(self) -> dict[str, Any]:
        intent = self.ctx.intent
        return {"slurm_files": _files_digest(self.live),
                "slurm_controller": _controller_digest(self.controller, self.view, intent.slurm.config_dir),
                "slurm_config_dir": where(intent.slurm.config_dir, intent.path)}

    def section(self, errors: bool) -> dict[str, SlurmSection]:
        assert self.desired is not None
        return {"slurm": build_section(self.ctx.intent, self.desired, self.files, self.live, self.record, self.nodes,
                                       self.view, adopted=self.adopted, reload=self.ctx.reload, errors=errors)}

    def node_rows(self) -> list[NodeRow]:
        return self.nodes.rows

    def held_out(self, plan: Plan) -> list[tuple[Hostname, str, str]]:
        """``(host, mark, note)`` for each tray the controller holds drained or down."""
        view = plan.slurm.controller if plan.slurm else None
        out: list[tuple[Hostname, str, str]] = []
        for b in view.blocks if view is not None else ():
            for d in b["drained"]:
                ours = d["reason"].startswith(REASON_PREFIX)
                who = "" if ours else f" by {d['by'] or 'an operator'}"
                out.append((d["node"], "drain" if ours else "operator", f"drained{who}: {d['reason']}"))
            for d in b["down"]:
                out.append((d["node"], "down", f"down: {d['reason']}"))
        return out

    def moved(self, other: SlurmPass) -> dict[str, list[str]]:
        """The managed files that differ between this pass's read and ``other``'s, by the
        provenance digest that covers them."""
        then, current = self.live.files, other.live.files
        return {"slurm_files": [display_path(other.live.config_dir / n) for n in sorted(then.keys() | current.keys())
                                if then.get(n) != current.get(n)]}

    # -- apply -----------------------------------------------------------------------------------

    def guard(self, plan: Plan, settings: ApplySettings) -> None:
        """Refuse before any write (see ``targets.slurm.applyguard``)."""
        applyguard.check(self.ctx.intent, self.live, self.ctx.state, plan, take_over=settings.take_over)

    def defer(self, plan: Plan, settings: ApplySettings) -> str | None:
        """A re-slice that would move trays running jobs: refuse it (``Refused``), or with
        ``--drain-first`` drain those trays now and say so (the words returned; None: nothing to
        defer)."""
        slurm = plan.slurm
        busy = slurm.controller.busy if slurm and slurm.controller is not None and slurm.file_changes else []
        if not busy:
            return None
        hosts = [b["node"] for b in busy]
        jobs = sorted({j for b in busy for j in b["jobs"]})
        what = (f"{len(hosts)} tray(s) with running jobs would change block: {hostlist.compress(hosts)} "
                f"(jobs {', '.join(map(str, jobs))})")
        if not settings.drain_first:
            raise Refused(f"{what}; nothing was applied", hint="wait for the jobs, or pass --drain-first to "
                              "drain these trays now and apply the re-slice on a later pass when they are idle")
        ctl = self.controller
        assert ctl is not None
        todo = [h for h in hosts if not ctl.nodes[h].drained] if all(h in ctl.nodes for h in hosts) else hosts
        if todo:
            slurm_controller.update_nodes(todo, "DRAIN", RESLICE_REASON)
        return (f"Re-slice deferred: {what}. Drained {len(todo)} of them (reason \"{RESLICE_REASON}\"); "
                "run apply again once their jobs end. Nothing else was written.")

    def unchanged(self) -> str:
        runs = " and the controller runs them" if self.controller is not None else ""
        return f"The Slurm files match the intent{runs}"

    def apply(self, plan: Plan, settings: ApplySettings, progress: Progress) -> None:
        """Files, reload, verify, node drains and resumes (each a few calls: no progress bar)."""
        intent, ctl, desired = self.ctx.intent, self.controller, self.desired
        assert desired is not None
        result = slurm_target.apply(
            intent, self.files, self.live, self.ctx.state, tuple((b.name, b.nodes) for b in desired.blocks),
            reload=settings.reload,
            imex_addresses=tuple((n.host, n.address) for n in desired.imex_nodes if n.address != n.host),
            verify=(lambda: controllercheck.verify_loaded(intent, desired, ctl.version)) if ctl is not None else None,
            log_file=ctl.config.get("SlurmctldLogFile", "") if ctl is not None else "",
            force_reload=bool(plan.slurm and plan.slurm.controller_changes))
        calls = self._apply_node_states(resliced=bool(result.written) and ctl is not None)
        if result.written:
            how = f"reloaded with `{' '.join(intent.slurm.reload)}`" if result.reloaded else "not reloaded (--no-reload)"
            if result.reloaded and ctl is not None:
                what = "topologies" if intent.slurm.topology_file == "topology.yaml" else "blocks"
                how += f"; the controller runs the rendered {what} and partitions (verified)"
            print(f"Apply complete: wrote {', '.join(result.written)} in {display_path(intent.slurm.config_dir)}; "
                  f"{how}.")
        elif result.reloaded:
            print(f"Apply complete: reloaded with `{' '.join(intent.slurm.reload)}` (files were written, not loaded); "
                  "the controller runs them now (verified).")
        if calls:
            print(f"Node states: {len(self.nodes.drains)} drained, {len(self.nodes.resumes)} resumed "
                  f"({calls} scontrol update call(s)).")
        for c in plan.restart_required:
            print(f"Restart required: {c.reason.split(' (restart required', 1)[0]} takes effect on the compute nodes "
                  "only when every slurmd is restarted; rackctl does not restart daemons.")

    def _apply_node_states(self, *, resliced: bool) -> int:
        """Drain and resume as the node plan says; after a re-slice went live, resume the trays
        ``--drain-first`` drained for it. Returns the number of ``scontrol update`` calls."""
        if self.controller is None:
            return 0
        calls = 0
        by_reason: dict[str, list[Hostname]] = {}
        for r in self.nodes.drains:
            by_reason.setdefault(r.reason, []).append(r.node)
        for reason, hosts in sorted(by_reason.items()):
            calls += slurm_controller.update_nodes(hosts, "DRAIN", reason)
        resume = [r.node for r in self.nodes.resumes]
        if resliced:
            assert self.desired is not None
            drained = {s.host for s in self.desired.node_states}
            resume += [h for h, n in self.controller.nodes.items() if n.reason == RESLICE_REASON and h not in drained]
        if resume:
            calls += slurm_controller.update_nodes(resume, "RESUME")
        return calls

    def pass_history(self) -> HealthHistory | None:
        """The damping history, when the controller was read (an offline pass cannot drain, and
        must not make the next online one drain at once)."""
        return self.nodes.history if self.controller is not None else None

    def cancel(self) -> None:
        """Nothing runs in the background."""


def _files_digest(live: LiveSlurm) -> str:
    """The digest of the managed files as read (name, bytes or absence), in the order read."""
    d = Digest()
    cdir = str(live.config_dir).encode()
    for name, data in live.files.items():
        d.add(name, None if data is None else data.replace(cdir, CONFIG_DIR))
    return d.value()


def _controller_digest(ctl: Controller | None, view: ControllerView | None, config_dir: Path) -> str:
    """The digest of what the plan used from the running controller ``ctl`` and its comparison
    ``view``; ``NOT_READ`` when it was not read."""
    if ctl is None or view is None:
        return NOT_READ
    d = Digest()
    topologies = None if ctl.topologies is None else [[t.name, t.cluster_default, t.kind, t.block_sizes, t.blocks]
                                                      for t in ctl.topologies]
    loaded = canonical({"version": ctl.version_text, "blocks": ctl.blocks, "block_sizes": ctl.block_sizes,
                        "partitions": ctl.partitions, "config": ctl.config, "topologies": topologies,
                        "partition_topology": ctl.partition_topology,
                        "qos": sorted(ctl.qos) if ctl.qos is not None else None,
                        "busy": [(b["node"], b["jobs"]) for b in view.busy]})
    d.add("controller", loaded.replace(str(config_dir).encode(), CONFIG_DIR))  # Prolog* settings name it
    for name in sorted(ctl.nodes):
        n = ctl.nodes[name]
        d.add(name, canonical([n.drained, n.down, n.powered_down, n.reason, n.reason_by]))
    return d.value()

