"""What each Slurm release does that rackctl renders or warns by, with the evidence for it.

A rule holds from its ``since`` release on. Its ``evidence`` says how it is known: *measured* on
the project's test bed (real controllers: 24.11.5 from Debian trixie, 26.05.5 from forky,
``scripts/slurm-testbed``), or *cited* from Slurm's ``CHANGELOG/slurm-<release>.md`` (SchedMD's
repository) for releases the bed does not run (25.05, 25.11). Rules are applied by the release
the controller reports when it is read, else by ``targets.slurm.version`` (``effective``).
"""

from __future__ import annotations

from dataclasses import dataclass

#: Releases the test bed runs (major, minor, micro): their rules are measured, the rest cited.
MEASURED_RELEASES = ((24, 11, 5), (26, 5, 5))


@dataclass(frozen=True)
class Rule:
    """One behaviour of slurmctld from release ``since`` (major, minor[, micro]) on."""

    since: tuple[int, ...]
    what: str
    evidence: str

    def holds(self, version: tuple[int, ...]) -> bool:
        """Whether a controller of ``version`` (major, minor[, micro]) behaves so."""
        return tuple(version) >= self.since


TOPOLOGY_YAML = Rule((25, 5), "reads topology.yaml (several topologies, each partition's Topology=) before "
                     "topology.conf", "cited: CHANGELOG 25.05.0rc1; measured on 26.05.5")
SHOW_TOPOCONF = Rule((25, 5), "prints the loaded topologies with `scontrol show topoconf`",
                     "cited: CHANGELOG 25.05.0; measured on 26.05.5")
PARTIAL_BLOCKS = Rule((25, 5), "accepts blocks with fewer nodes than the smallest block size, and with none (the "
                      "placeholders that keep a gone slice's position)",
                      "cited: CHANGELOG 25.05.0rc1; measured on 26.05.5")
NO_BLOCKS_FATAL = Rule((25, 11), "refuses a block topology with no blocks (\"No blocks configured\")",
                       "cited: CHANGELOG 25.11.0rc1; measured on 26.05.5 (24.11.5 accepts one)")
PARTITION_QOS_CHECKED = Rule((25, 11), "refuses a partition whose QOS= or AllowQOS= names a QoS it does not "
                             "have (with no slurmdbd it has none); a reconfigure that meets one fails",
                             "cited: CHANGELOG 25.11.0rc1 (AllowQOS, DenyQOS); measured on 26.05.5 (both fatal) and "
                             "24.11.5 (both accepted, not enforced)")
SEGMENT_OVER_BASE = Rule((25, 11), "places `--segment` larger than the base block size",
                         "cited: CHANGELOG 25.11.0rc1")
RECONFIGURE_TAKES_SETTINGS = Rule((24, 11), "re-executes slurmctld on `scontrol reconfigure`, which then runs the new "
                                  "SwitchType, PrologFlags, Prolog and Epilog", "measured on 24.11.5 and 26.05.5 "
                                  "(`scontrol show config` after the reconfigure)")
IMEX_PLUGIN_FIXED = Rule((24, 5, 2), "runs switch/nvidia_imex without CVE-2024-42511 and with job_container/tmpfs",
                         "cited: Slurm 24.05.2 release notes (CVE-2024-42511)")


def measured(version: tuple[int, ...]) -> bool:
    """Whether the test bed runs ``version``'s release (major, minor): its rules were measured."""
    return any(tuple(version[:2]) == r[:2] for r in MEASURED_RELEASES)


def effective(read: tuple[int, ...] | None, declared: tuple[int, int]) -> tuple[int, ...]:
    """The release the rules follow: the controller's when it was ``read``, else the intent's."""
    return read if read is not None else declared


def parse_release(text: str) -> tuple[int, ...]:
    """``26.05.5`` -> ``(26, 5, 5)``, ``25.11`` -> ``(25, 11)`` (``release_text``'s inverse).
    Raises ``ValueError`` for anything else."""
    return tuple(int(part) for part in text.split("."))


def release_text(version: tuple[int, ...]) -> str:
    """``(26, 5, 5)`` -> ``26.05.5``; ``(25, 11)`` -> ``25.11`` (Slurm's own spelling)."""
    return ".".join([str(version[0]), f"{version[1]:02d}", *map(str, version[2:])])


def cited_rules(version: tuple[int, ...]) -> list[Rule]:
    """For a release the bed does not run: every rule rackctl assumes of it, none measured on it.
    [] for a measured release."""
    if measured(version):
        return []
    return [r for r in ALL_RULES if r.holds(version)]


ALL_RULES = (TOPOLOGY_YAML, SHOW_TOPOCONF, PARTIAL_BLOCKS, NO_BLOCKS_FATAL, PARTITION_QOS_CHECKED, SEGMENT_OVER_BASE,
             RECONFIGURE_TAKES_SETTINGS, IMEX_PLUGIN_FIXED)
