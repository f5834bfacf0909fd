"""`status --json` has one schema, written down twice: in `status --help` and in the patcher README. Both
name exactly the keys the command prints (so the two cannot drift apart)."""

import json
import pathlib
import re

from replayssm_overlay.cli import STATUS_SCHEMA_HELP, main

README = pathlib.Path(__file__).resolve().parents[2] / "overlay" / "replayssm_overlay" / "patcher" / "README.md"


def readme_keys() -> set:
    table = README.read_text().split("## `status --json`", 1)[1].split("\n## ", 1)[0]
    first_cells = [line.split("|")[1] for line in table.splitlines() if line.startswith("| `")]
    return {name.removesuffix("[]") for cell in first_cells for name in re.findall(r"`([^`]+)`", cell)}


def help_keys() -> set:
    return {match.group(1) for match in re.finditer(r"^  ([a-z_]+)(?:\[\])?(?: |$)", STATUS_SCHEMA_HELP, re.M)}


def test_the_readme_and_the_help_name_exactly_the_keys_status_prints(sglang_tree, capsys):
    main(["status", "--json", "--sglang-dir", str(sglang_tree)])
    printed = set(json.loads(capsys.readouterr().out))
    assert readme_keys() == printed
    assert help_keys() == printed
