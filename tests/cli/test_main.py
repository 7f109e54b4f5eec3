"""The command table of ``cli.main``: each command's parser is built from its own module only when
it is named, and what the help shows is the same as when every command was built."""

from __future__ import annotations

import re

import pytest

from reconciler.cli import main as cli


def help_text(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as exit_:
        cli.main(list(argv))
    assert exit_.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("argv", [("--help",), ("--help", "plan"), ("-h", "validate"), ("--no-progress", "-h", "apply")])
def test_the_top_level_help_lists_every_command(capsys, argv):
    listed = re.findall(r"^    ([a-z]+)(?: |$)", help_text(capsys, *argv), re.M)  # not the wrapped lines
    assert listed == list(cli.COMMANDS)


@pytest.mark.parametrize("argv", [("bogus",), ("--", "plan")])
def test_a_usage_error_names_every_command(capsys, argv):
    with pytest.raises(SystemExit) as exit_:
        cli.main(list(argv))
    assert exit_.value.code == 1
    assert "(choose from " + ", ".join(map(repr, cli.COMMANDS)) + ")" in capsys.readouterr().err


@pytest.mark.parametrize("command", sorted(cli.COMMANDS))
def test_each_command_help_gives_its_exit_codes(capsys, command):
    argv = (command, "slurm", "--help") if command in ("verify", "collect") else (command, "--help")
    text = help_text(capsys, *argv)
    assert text.startswith(f"usage: rackctl {command}")
    assert "exit codes" in text
    if command in ("report", "status"):  # their own section only, as before the command table
        assert text.count("exit codes") == 1, text


def test_a_named_command_builds_only_its_module():
    built = cli._parser(["status"])
    choices = next(a for a in built._actions if a.dest == "command").choices
    assert list(choices) == ["report", "status"]  # both commands of cli/view.py
    assert list(next(a for a in cli._parser()._actions if a.dest == "command").choices) == list(cli.COMMANDS)
