"""The ids that cross module seams, as ``NewType``s of ``str`` (free at run time: each is its
``str``): discovery names them, the layout keys on them, the targets render them.

- ``Hostname``: one compute tray (host) as its NodeReport ``hostname`` names it, which is also
  its Slurm node name and its Kubernetes Node name: ``gb-r01-n07`` (letters, digits, ``.``,
  ``_``, ``-``; at most 253 characters).
- ``ClusterUUID``: an NVLink domain, the fabric cluster UUID its GPUs report, lower case:
  ``dc6e40c4-d722-4357-9ba6-5291dd461278``.
- ``CliqueKey``: an NVLink partition, ``<lowercase cluster UUID>.<decimal clique id>`` (as GFD
  labels ``nvidia.com/gpu.clique``).
- ``SliceName``: a slice of a rack, ``<rack>/<slice>`` (``r01/s0``, ``r01/c3``); a whole-rack
  slice is named like its rack (``r01``).
- ``BlockName``: a slice's name where ``/`` cannot stand, ``layout.model.flat_name`` of it
  (``r01-s0``): a Slurm block name, a Kubernetes label value.
"""

from __future__ import annotations

from typing import NewType

Hostname = NewType("Hostname", str)
ClusterUUID = NewType("ClusterUUID", str)
CliqueKey = NewType("CliqueKey", str)
SliceName = NewType("SliceName", str)
BlockName = NewType("BlockName", str)
