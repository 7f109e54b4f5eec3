"""Break-it review of issue 17, secrets: slurm.conf password settings in snapshots."""

from __future__ import annotations

import pytest

from reconciler.targets.slurm.configfiles import redact


@pytest.mark.parametrize("line, shown", [
    # Slurm's parser (s_p_parse_line) reads every Key=value pair of a line, not only the first.
    (b"AccountingStorageHost=db1 AccountingStoragePass=TopSecretDbPw\n",
     b"AccountingStorageHost=db1 AccountingStoragePass=REDACTED-by-rackctl-snapshot\n"),
    (b"ClusterName=c1\tJobCompPass=TopSecretDbPw # comment\n",
     b"ClusterName=c1\tJobCompPass=REDACTED-by-rackctl-snapshot # comment\n"),
    (b"ClusterName=c1  StoragePass = \"Top Secret\"\\#DbPw x=1\n",
     b"ClusterName=c1  StoragePass = REDACTED-by-rackctl-snapshot x=1\n"),
    # not a setting: a key that merely ends a word of a value
    (b"Feature=bypass=1\n", b"Feature=bypass=1\n"),
])
def test_a_password_setting_after_another_setting_on_its_line_is_redacted(line, shown):
    assert redact(line) == shown
