"""Held racks at fleet scale (issue 20): one bad rack never freezes the fleet.

A simulated fleet (default 2,000 racks), both targets on (Slurm files, and the fake Kubernetes API
server with a Node per tray), racks selected by chassis serial and per-job IMEX addresses taken
from ``10.0.0.0/8``, is applied once. Then, each in a rack of its own (``FINDINGS``):

- a miscabled tray (it reports the next rack's NVLink domain);
- a report dated 2099;
- a report that claims the next rack's cluster UUID and chassis serial (its own rack is then
  short of a tray, the next one has one too many);
- two trays reporting one IMEX address;
- one host reported twice (a second file in a folder inventory, a second entry in one file);

and elsewhere the changes of a normal day: a new tier over five healthy racks, and three
unhealthy trays. ``plan`` must exit 2 with those changes and the miscabled tray's drain, holding
exactly the racks of the other findings; ``apply`` must apply the changes and nothing of the held
racks: their blocks stay as they were in ``topology.conf``, and none of their Nodes is written
(an unhealthy tray in a held rack is not tainted either).

It checks behaviour, not time (the times are printed)::

    .venv/bin/python -m benchmarks.held                 # 2,000 racks, both inventory forms
    .venv/bin/python -m benchmarks.held --racks 100 --forms dir

Exit 0 when every check holds, 1 otherwise (each failed check printed). ``tests/e2e/test_held_racks.py``
runs the same check on a small fleet.
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from . import kube as kubemod
from .fleet import TRAYS, Stage, fleet, host, stage
from .measure import BenchError, CliRun, rackctl

UNHEALTHY = {"state": "Completed", "status": "Success", "healthMask": 0x119A, "healthSummary": "Unhealthy"}
FAR_FUTURE = "2099-01-01T00:00:00Z"


@dataclass(frozen=True)
class Racks:
    """The racks (1-based) each finding goes to, spread over a fleet of ``n`` racks."""

    n: int

    def at(self, share: float) -> int:
        return max(1, min(self.n - 1, round(self.n * share)))

    @property
    def miscabled(self) -> int:
        return self.at(0.1)

    @property
    def future(self) -> int:
        return self.at(0.3)

    @property
    def forged(self) -> int:  # its next rack is held too
        return self.at(0.5)

    @property
    def imex(self) -> int:
        return self.at(0.7)

    @property
    def twice(self) -> int:
        return self.at(0.9)

    @property
    def held(self) -> dict[int, set[str]]:
        """Rack -> the codes that must hold it."""
        return {self.future: {"tray-clock-skew"}, self.forged: {"slice-short"},
                self.forged + 1: {"slice-oversize"}, self.imex: {"imex-address-shared"},
                self.twice: {"tray-reported-twice"}}

    @property
    def healthy(self) -> list[int]:
        """Racks no finding touches, for the day's changes."""
        busy = {self.miscabled, self.miscabled + 1, *self.held}
        return [r for r in range(1, self.n + 1) if r not in busy]


def rack_name(r: int) -> str:
    return f"r{r:04d}"


def check(work: Path, racks: int, form: str) -> tuple[list[str], dict[str, float]]:
    """Run the scenario for inventory ``form`` (``file`` | ``dir``) on a fleet of ``racks`` racks
    generated (or reused) under ``work``. Returns ``(failed checks, seconds per step)``; raises
    ``BenchError`` when a step itself breaks."""
    where = Racks(racks)
    f = fleet(work, racks)
    root = work / f"held-{racks}-{form}"
    st = stage(f, root)
    inventory = _copy_inventory(f.inventory(form), root / "inventory", form)
    _write_intent(st, inventory, tiers=["all"])
    problems: list[str] = []
    times: dict[str, float] = {}
    with kubemod.fake_with_nodes(st.hosts()) as kube:
        args = ["-f", st.intent, "--kubeconfig", kube.kubeconfig, "--state-dir", st.state_dir]
        times["first apply"] = rackctl("apply", *args, "--auto-approve").wall_s
        before = (st.config_dir / "topology.conf").read_text()
        _break(inventory, form, where)
        new_tier = [rack_name(r) for r in where.healthy[:5]]
        _write_intent(st, inventory, tiers=["all", "extra"], extra=new_tier)
        kube.reset_requests()
        plan = rackctl("plan", *args, "--format", "json", check=None)
        times["plan"] = plan.wall_s
        problems += _check_plan(plan, where, new_tier)
        done = rackctl("apply", *args, "--auto-approve", check=None)
        times["apply"] = done.wall_s
        problems += _check_apply(done, st, kube, where, before, new_tier)
    return problems, times


def _copy_inventory(cached: Path, dest: Path, form: str) -> Path:
    """A copy of the cached fleet's inventory to break (the cache stays as generated)."""
    if form == "dir":
        shutil.copytree(cached, dest)
        return dest
    dest.mkdir()
    shutil.copyfile(cached, dest / "inventory.json")
    return dest / "inventory.json"


def _write_intent(st: Stage, inventory: Path, *, tiers: list[str], extra: list[str] = ()) -> None:
    """The stage's intent with racks selected by chassis serial, per-job IMEX addresses from
    10.0.0.0/8, no damping, the inventory at ``inventory`` and the tiers named (``extra``: the racks of
    tier ``extra``, Slurm partition and Kueue flavor of that name)."""
    doc = yaml.safe_load(st.intent.read_text())
    doc["inventory"]["path"] = str(inventory)
    serials = _serials(st)
    for r, rack in enumerate(doc["racks"], 1):
        rack["select"] = {"chassisSerial": serials[r]}
    doc["targets"]["slurm"]["imex"] = {"network": "10.0.0.0/8"}
    doc["defaults"]["health"] = {"drainAfterPasses": 1}  # drained on the first pass that finds them
    base = doc["tiers"][0]
    doc["tiers"] = [base] + [{"name": "extra", "slices": list(extra), "slurm": {"partition": "extra"},
                              "kubernetes": {"flavor": "gb200-extra"}} for _ in tiers[1:]]
    st.intent.write_text(yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=200))


def _serials(st: Stage) -> dict[int, str]:
    """Rack -> its chassis serial, from the cached fleet's inventory file."""
    nodes = json.loads(st.fleet.file.read_text())["nodes"]
    return {i // TRAYS + 1: n["gpus"][0]["platform"]["chassisSerial"] for i, n in enumerate(nodes) if i % TRAYS == 0}


def _break(inventory: Path, form: str, where: Racks) -> None:
    """Put each finding in its rack, and three unhealthy trays (one of them in a held rack)."""
    edits = {}

    def edit(r: int, t: int, change) -> None:
        edits.setdefault(host(r, t), []).append(change)

    def domain_of(node: dict) -> tuple[str, str]:
        return node["gpus"][0]["fabric"]["clusterUuid"], node["gpus"][0]["platform"]["chassisSerial"]

    nodes = _read(inventory, form)
    by_host = {n["hostname"]: n for n in nodes}
    next_uuid, _ = domain_of(by_host[host(where.miscabled + 1, 1)])
    edit(where.miscabled, 5, lambda n: _set_fabric(n, clusterUuid=next_uuid))
    edit(where.future, 7, lambda n: n.update(collectedAt=FAR_FUTURE))
    forged_uuid, forged_serial = domain_of(by_host[host(where.forged + 1, 1)])
    edit(where.forged, 9, lambda n: (_set_fabric(n, clusterUuid=forged_uuid),
                                     [g["platform"].update(chassisSerial=forged_serial) for g in n["gpus"]]))
    shared = by_host[host(where.imex, 2)]["addresses"]
    edit(where.imex, 3, lambda n: n.update(addresses=list(shared)))
    for r, t in ((where.healthy[5], 4), (where.healthy[-1], 6), (where.future, 12)):
        edit(r, t, lambda n: _set_fabric(n, **UNHEALTHY))
    for name, changes in edits.items():
        for change in changes:
            change(by_host[name])
    twin = copy.deepcopy(by_host[host(where.twice, 11)])
    twin["collectedAt"] = "2025-12-31T00:00:00Z"
    _write(inventory, form, nodes if form == "file" else [by_host[h] for h in edits], twin)


def _set_fabric(node: dict, **fields: object) -> None:
    for g in node["gpus"]:
        g["fabric"].update(fields)


def _read(inventory: Path, form: str) -> list[dict]:
    if form == "dir":
        return [json.loads(p.read_text()) for p in sorted(inventory.glob("*.json"))]
    return json.loads(inventory.read_text())["nodes"]


def _write(inventory: Path, form: str, nodes: list[dict], twin: dict) -> None:
    """Write ``nodes`` back (a folder: those given; a file: all), and ``twin`` as a second report
    of its host."""
    if form == "dir":
        for n in nodes:
            (inventory / f"{n['hostname']}.json").write_text(json.dumps(n))
        (inventory / f"zz-copy-of-{twin['hostname']}.json").write_text(json.dumps(twin))
        return
    inventory.write_text(json.dumps({"schemaVersion": 1, "nodes": nodes + [twin]}))


def _check_plan(run: CliRun, where: Racks, new_tier: list[str]) -> list[str]:
    problems = []
    if run.rc != 2:
        return [f"plan exited {run.rc}, expected 2 (changes): {run.err.strip()[-2000:]}"]
    doc = json.loads(run.out)
    held = {h["rack"]: {c["code"] for c in h["causes"]} for h in doc["held"]}
    want = {rack_name(r): codes for r, codes in where.held.items()}
    if held.keys() != want.keys() or any(not want[r] <= held[r] for r in want):
        problems.append(f"plan holds {held}, expected (at least these codes) {want}")
    if doc["summary"]["errors"]:
        problems.append(f"plan has {doc['summary']['errors']} unheld error(s)")
    addresses = {c["address"] for c in doc["changes"]}
    if "slurm/partition/extra" not in addresses:
        problems.append("plan lacks the new tier's partition slurm/partition/extra")
    labelled = {a.rsplit("/", 1)[1] for a in addresses if a.startswith("kubernetes/Node/")}
    want_labelled = {host(int(r[1:]), t) for r in new_tier for t in range(1, TRAYS + 1)}
    if not want_labelled <= labelled:
        problems.append(f"plan labels {len(labelled & want_labelled)} of the new tier's {len(want_labelled)} Nodes")
    held_hosts = {host(int(r[1:]), t) for r in want for t in range(1, TRAYS + 1)}
    touched = sorted(a for a in addresses if a.rsplit("/", 1)[1] in held_hosts)
    if touched:
        problems.append(f"plan changes {len(touched)} thing(s) of held racks: {touched[:5]}")
    drains = {(s["node"], s["reason"]) for s in doc["node_states"] if s["state"] == "DRAIN"}
    wanted = {(host(where.miscabled, 5), "rackctl: miscabled"), (host(where.healthy[5], 4), "rackctl: unhealthy"),
              (host(where.healthy[-1], 6), "rackctl: unhealthy")}
    if drains != wanted:
        problems.append(f"plan drains {sorted(drains)}, expected {sorted(wanted)}")
    return problems


def _check_apply(run: CliRun, st: Stage, kube: kubemod.FakeKube, where: Racks, before: str,
                 new_tier: list[str]) -> list[str]:
    if run.rc != 0:
        return [f"apply exited {run.rc}: {run.err.strip()[-2000:]}"]
    problems = []
    after = (st.config_dir / "topology.conf").read_text()
    for r in where.held:
        old = [line for line in before.splitlines() if line.startswith(f"BlockName={rack_name(r)} ")]
        new = [line for line in after.splitlines() if line.startswith(f"BlockName={rack_name(r)} ")]
        if old != new or not old:
            problems.append(f"topology.conf: rack {rack_name(r)}'s blocks went from {old} to {new}")
    if "PartitionName=extra " not in (st.config_dir / "rackctl.conf").read_text():
        problems.append("rackctl.conf lacks PartitionName=extra after apply")
    held_hosts = {host(r, t) for r in where.held for t in range(1, TRAYS + 1)}
    patched = kubemod.node_patches(kubemod.writes(kube))
    if held_hosts & set(patched):
        problems.append(f"apply wrote Nodes of held racks: {sorted(held_hosts & set(patched))[:5]}")
    want = {host(int(r[1:]), t) for r in new_tier for t in range(1, TRAYS + 1)}
    want |= {host(where.miscabled, 5), host(where.healthy[5], 4), host(where.healthy[-1], 6)}
    if set(patched) != want:
        problems.append(f"apply patched {len(set(patched))} Nodes, expected the {len(want)} of the new tier and "
                        f"the drains (extra: {sorted(set(patched) - want)[:5]}, missing: {sorted(want - set(patched))[:5]})")
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="benchmarks.held", description=__doc__.split("\n\n")[0])
    ap.add_argument("--racks", type=int, default=2000, help="fleet size (default 2000; at least 20)")
    ap.add_argument("--forms", default="file,dir", help="inventory forms, of file,dir (default both)")
    ap.add_argument("--work", type=Path, help="keep the generated fleet here (default: a temporary folder)")
    args = ap.parse_args(argv)
    if args.racks < 20:
        ap.error("--racks: at least 20 (the findings and the day's changes need racks of their own)")
    with tempfile.TemporaryDirectory(prefix="rackctl-held-") as tmp:
        work = args.work or Path(tmp)
        failed = 0
        for form in args.forms.split(","):
            try:
                problems, times = check(work, args.racks, form)
            except BenchError as exc:
                problems, times = [f"broke: {exc}"], {}
            shown = ", ".join(f"{k} {v:.1f} s" for k, v in times.items())
            print(f"{args.racks} racks, inventory {form}: {'ok' if not problems else 'FAILED'} ({shown})")
            for p in problems:
                print(f"  - {p}")
            failed += bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
