"""`--help` of `replayssm-overlay` and every subcommand teaches: an example, text
wrapped to the terminal, every default shown, and only files that exist named."""

import argparse
import pathlib
import re

import pytest

from replayssm_overlay.cli import build_parser, main
from replayssm_overlay.patcher.target import find_sglang_dir

REPO = pathlib.Path(__file__).resolve().parents[2]
COMMANDS = [
    [],
    ["apply"],
    ["verify"],
    ["revert"],
    ["diff"],
    ["status"],
    ["metrics"],
    ["kernels"],
    ["kernels", "build"],
    ["kernels", "check"],
    ["kernels", "status"],
    ["plan"],
]
WIDTH = 80
NO_DEFAULT = ("help", "version")


def help_text(capsys, command) -> str:
    with pytest.raises(SystemExit) as done:
        main([*command, "--help"])
    assert done.value.code == 0
    return capsys.readouterr().out


def parser_of(command) -> argparse.ArgumentParser:
    parser = build_parser()
    for word in command:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[word]
    return parser


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "top")
def test_help_has_an_example_and_is_wrapped(capsys, monkeypatch, command):
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    text = help_text(capsys, command)
    assert re.search(r"^examples?:$", text, re.M), text
    assert re.search(r"^  replayssm-overlay " + " ".join(command), text, re.M), text
    too_long = [line for line in text.splitlines() if len(line) > WIDTH]
    assert too_long == [], too_long


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "top")
def test_every_option_shows_its_default(capsys, monkeypatch, command):
    monkeypatch.setenv("COLUMNS", "1000")  # one line per option
    parser = parser_of(command)
    formatter = parser._get_formatter()
    for action in parser._actions:
        if not action.option_strings or action.dest in NO_DEFAULT or action.required or action.nargs == 0:
            continue  # positionals, --help/--version, required options, flags (off unless given)
        shown = formatter._expand_help(action) if action.help else ""
        assert "default" in shown, f"{' '.join(command)} {action.option_strings[0]}: {shown!r}"
    if command == ["apply"]:
        assert "(default: 30.0)" in help_text(capsys, command)  # --lock-timeout


@pytest.mark.parametrize("command", [["kernels"], ["kernels", "build"]])
def test_kernels_help_names_only_files_that_exist(capsys, command):
    text = help_text(capsys, command)
    named = set(re.findall(r"[\w./-]+\.(?:py|json|md|yaml|toml|lock|whl)\b", text))
    roots = (REPO, REPO / "overlay" / "replayssm_overlay", find_sglang_dir())
    missing = [name for name in named if not any((root / name).exists() for root in roots)]
    assert missing == [], missing
