"""Render the three scripts behind per-job IMEX (``policy.imex: per-job``) for Slurm.

``render_imex_scripts`` returns ``{file name: bytes}`` for

``rackctl-imex-prolog-slurmctld.sh`` (``PrologSlurmctld``)
    Runs on the controller at allocation. Refuses (exit 1, one line on stderr naming the job, the
    cliques and their nodes) a job whose nodes span more than one NVLink clique, or mix trays of
    the per-job IMEX tiers with other nodes; a job on none of those trays passes (exit 0).
``rackctl-imex-prolog.sh`` (``Prolog``, with ``PrologFlags=Alloc``)
    Runs as root on every node of the job. Under a per-node ``flock``, refuses when a host-wide
    ``nvidia-imex.service`` is active, writes ``<state>/job-<id>/nodes_config.cfg`` (the job's
    IMEX addresses, one a line, in the map's natural host order: identical on every node) and
    ``config.cfg``, starts ``nvidia-imex -c config.cfg`` in its own session, and polls
    ``nvidia-imex-ctl -c config.cfg -q`` until it prints ``READY``, for at most
    ``ImexSettings.ready_timeout_s`` seconds. A daemon that dies first or never gets ready is
    stopped, the last lines of its logs go to stderr and the prolog exits 1 (slurmd then drains
    the node). A node outside the per-job IMEX tiers exits 0 at once.
``rackctl-imex-epilog.sh`` (``Epilog``)
    Under the same lock: stops the job's daemon (SIGTERM, bounded wait, SIGKILL) and removes its
    folder; exit 0 when there is nothing to clean (run twice, or after a failed prolog).

Facts these rest on (no code taken from anywhere):

- Slurm runs prologs with no search path (doc/html/prolog_epilog.shtml), so each script sets
  ``PATH``. slurmd's environment for them (src/plugins/prep/script/prep_script_slurmd.c) carries
  ``SLURM_JOB_ID``, ``SLURM_JOB_NODELIST``, ``SLURMD_NODENAME`` and ``SLURM_CONF``; user-set
  variables only with a ``SPANK_`` prefix, so the ``RACKCTL_IMEX_*`` overrides cannot come from a
  job. slurmd reads a prolog's output until it closes and then kills the prolog's process group
  (src/common/run_command.c), so the daemon gets its own session (``setsid``) and no descriptor of
  the prolog's.
- With configless Slurm only Prolog/Epilog files given by relative path are shipped to slurmd
  (src/common/fetch_config.c): the host -> address and host -> clique maps are embedded in the
  scripts that read them, as a quoted here-document of ``host value`` lines read once per run
  (linear; about 0.2 s for 36,000 trays).
- IMEX config keys and defaults: ``../shared/fixtures/nvml/imex_config_dra_template.cfg`` (NVIDIA's
  DRA driver template; NVIDIA IMEX guide, config.html): ``SERVER_PORT`` 50000, command service
  ``IMEX_CMD_ENABLED``/``IMEX_CMD_PORT`` 50005, ``IMEX_NODE_CONFIG_FILE``, ``BIND_INTERFACE_IP``,
  ``IMEX_WAIT_FOR_QUORUM``, ``DAEMONIZE``, ``LOG_FILE_NAME``. Nodes files hold one IP address per
  line, or a host name for IMEX 570.158.01+ (``imex_nodes_config_*.source.txt``).
  ``nvidia-imex-ctl [-c CONFIG] -q`` asks the local daemon through the command port the config
  names and prints ``READY`` once it is (IMEX guide, cmdservice.html).

Every value put into a script is checked here against a strict pattern (host names, addresses,
clique keys, the header's names) and anything else raises ``ValueError``: nothing can end a line
of the map, close its here-document or reach the shell as code.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Sequence

from reconciler.intent.model import IMEX_SCRIPTS, ImexSettings
from reconciler.targets.slurm.desired import ImexNode
from reconciler.targets.slurm.templating import UNPRINTABLE, environment

PROLOG_SLURMCTLD = IMEX_SCRIPTS["PrologSlurmctld"]
PROLOG = IMEX_SCRIPTS["Prolog"]
EPILOG = IMEX_SCRIPTS["Epilog"]
SCRIPTS = (PROLOG_SLURMCTLD, PROLOG, EPILOG)

SERVER_PORT = 50000  # IMEX peer port (NVIDIA's default)
CMD_PORT = 50005  # IMEX command service port that nvidia-imex-ctl -q asks (DRA driver's choice)
MAX_READY_TIMEOUT_S = 86_400
# Lock wait beyond the ready timeout: another prolog may stop a daemon (10 s + 5 s) and start one.
_LOCK_MARGIN_S = 60

# The node report's host name pattern; an address is an IP address or such a name that is not
# all digits and dots (the scripts tell an IP from a name by that).
_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")
_DIGITS_AND_DOTS = re.compile(r"[0-9.]+")
# <clusterUUID>.<cliqueId> (the GFD label value), or a slice name (RACK or RACK/SLICE).
_CLIQUE = re.compile(r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}\.[0-9]{1,10}"
                     r"|[A-Za-z0-9_]{1,63}(?:/[A-Za-z0-9_]{1,63})?")

# bash's ${#array[@]} would open a jinja comment: these templates have none.
_env = environment(comment_start_string="<%#", comment_end_string="#%>")

_PURPOSE = {
    PROLOG_SLURMCTLD: (
        "PrologSlurmctld for per-job IMEX: runs on the controller at allocation (SLURM_JOB_ID,",
        "SLURM_JOB_NODELIST). Exit 1, with one line on stderr, refuses a job whose nodes span more",
        "than one NVLink clique, or mix per-job IMEX trays with other nodes; exit 0 otherwise.",
    ),
    PROLOG: (
        "Prolog for per-job IMEX (PrologFlags=Alloc): runs as root on each node of the job",
        "(SLURM_JOB_ID, SLURM_JOB_NODELIST, SLURMD_NODENAME, else `hostname -s`). Writes",
        "<state>/job-<id>/nodes_config.cfg and config.cfg, starts nvidia-imex and waits for",
        "`nvidia-imex-ctl -q` to say READY. Exit 0: ready, or this node is not a per-job IMEX",
        "tray; exit 1: refused or not ready (the message and the daemon's last log lines on",
        "stderr; slurmd drains the node).",
    ),
    EPILOG: (
        "Epilog for per-job IMEX: runs as root on each node of the job (SLURM_JOB_ID). Stops the",
        "job's nvidia-imex and removes <state>/job-<id>. Exit 0: clean (also when nothing was",
        "there); exit 1: the daemon would not stop.",
    ),
}


def render_imex_scripts(cluster: str, intent_file: str, nodes: Sequence[ImexNode],
                        settings: ImexSettings) -> dict[str, bytes]:
    """Return ``{file name: bytes}`` for the three scripts, in ``SCRIPTS`` order.

    ``nodes``: the trays of the per-job IMEX tiers in natural host order (``DesiredSlurm.imex_nodes``);
    their order is the order of every nodes file the Prolog writes. Deterministic: the same
    arguments give byte-identical scripts. Raises ``ValueError`` for any value that is not a
    plain host name, address or clique key, a host listed twice, an address shared by two
    hosts, or a ready timeout outside 1..86400 s.
    """
    timeout = settings.ready_timeout_s
    if isinstance(timeout, bool) or not isinstance(timeout, int) or not 1 <= timeout <= MAX_READY_TIMEOUT_S:
        raise ValueError(f"refusing IMEX ready timeout {timeout!r}: expected whole seconds in 1..{MAX_READY_TIMEOUT_S}")
    seen_hosts: set[str] = set()
    seen_addresses: dict[str, str] = {}
    addresses, cliques = [], []
    for n in nodes:
        host, address, clique = _host(n.host), _address(n.address), _clique(n.clique)
        if host in seen_hosts:
            raise ValueError(f"refusing IMEX map: host {host!r} is listed twice")
        if address in seen_addresses:
            raise ValueError(f"refusing IMEX map: hosts {seen_addresses[address]!r} and {host!r} share the "
                             f"IMEX address {address!r}")
        seen_hosts.add(host)
        seen_addresses[address] = host
        addresses.append(f"{host} {address}\n")
        cliques.append(f"{host} {clique}\n")
    common = {"cluster": _printable(cluster), "intent_file": _printable(intent_file),
              "lock_wait_s": timeout + _LOCK_MARGIN_S}
    out: dict[str, bytes] = {}
    for name, template, extra in (
        (PROLOG_SLURMCTLD, "imex-prolog-slurmctld.sh.j2", {"stops": False, "reads_nodes": True,
                                                          "map_lines": "".join(cliques)}),
        (PROLOG, "imex-prolog.sh.j2", {"stops": True, "reads_nodes": True, "map_lines": "".join(addresses),
                                       "ready_timeout_s": timeout,
                                       "server_port": SERVER_PORT, "cmd_port": CMD_PORT}),
        (EPILOG, "imex-epilog.sh.j2", {"stops": True, "reads_nodes": False}),
    ):
        text = _env.get_template(template).render(file=name, purpose=_PURPOSE[name], **common, **extra)
        out[name] = text.encode()
    return out


def _host(value: str) -> str:
    if not isinstance(value, str) or not _HOST.fullmatch(value):
        raise ValueError(f"refusing to render IMEX host name {value!r}: expected letters, digits and ._- "
                         "starting with a letter or digit")
    return value


def _address(value: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"refusing to render IMEX address {value!r}")
    try:
        ipaddress.ip_address(value)
    except ValueError:
        if _HOST.fullmatch(value) and not _DIGITS_AND_DOTS.fullmatch(value):
            return value
    else:
        if "%" not in value:  # no scoped IPv6 ("fe80::1%eth0"): IMEX takes a plain address
            return value
    raise ValueError(f"refusing to render IMEX address {value!r}: expected an IPv4/IPv6 address or a host name")


def _clique(value: str) -> str:
    if not isinstance(value, str) or not _CLIQUE.fullmatch(value):
        raise ValueError(f"refusing to render IMEX clique key {value!r}: expected <clusterUUID>.<cliqueId> or a "
                         "slice name")
    return value


def _printable(value: str) -> str:
    # Names in comment lines: nothing in them may end the line.
    return UNPRINTABLE.sub("?", value)
