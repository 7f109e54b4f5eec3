"""One bad rack never freezes the fleet (issue 20), end to end: ``benchmarks/held.py``'s scenario
on a 24-rack fleet, both targets (Slurm files and the fake API server), both inventory forms.

Five findings, each in a rack of its own (a miscabled tray, a report dated 2099, a report claiming
the next rack's cluster UUID and chassis serial, two trays sharing an IMEX address, a host
reported twice), beside a new tier and three unhealthy trays: ``plan`` exits 2 holding exactly
the racks of the last four (the forged report holds its rack and the next), ``apply`` writes the
new tier and the drains, and nothing of a held rack (``benchmarks/held.py`` checks each). The same
check runs on 2,000 racks as ``python -m benchmarks.held``.
"""

from __future__ import annotations

import pytest

from benchmarks import held


@pytest.mark.parametrize("form", ["file", "dir"])
def test_held_racks_leave_the_rest_of_the_fleet_to_go_ahead(tmp_path, form):
    problems, _ = held.check(tmp_path, 24, form)
    assert problems == []

