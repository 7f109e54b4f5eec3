"""Break-it review of issue 17, secrets: slurm.conf password settings in snapshots."""

from __future__ import annotations

import pytest

from reconciler.targets.configfiles import redact


@pytest.mark.parametrize("line", [
    # Slurm's parser (s_p_parse_line) reads every Key=value pair of a line, not only the first.
    b"AccountingStorageHost=db1 AccountingStoragePass=TopSecretDbPw\n",
    b"ClusterName=c1\tJobCompPass=TopSecretDbPw # comment\n",
])
def test_a_password_setting_after_another_setting_on_its_line_is_redacted(line):
    assert b"TopSecretDbPw" not in redact(line)
