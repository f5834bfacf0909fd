"""Every set of releases the repository states (README and the other guides, docstrings, comments, the
command lines' help) is the release table's: a range that ends at the newest release
starts at the oldest or at the first ring release, a list names all of them or all ring releases, no code
keeps a literal list (`release_prose.py` says what is read). Adding a release to the table makes every
statement that ends at the old newest one fail here, naming file and line, until it is updated or listed
as a fact (RELEASING.md)."""

import contextlib
import io

import pytest

from replayssm_overlay import cli
from replayssm_overlay.patcher.releases import RING_RELEASES, SUPPORTED_RELEASES
from tests.structure import release_prose


def test_every_release_range_and_list_in_the_repository_is_the_tables():
    texts = release_prose.repository_texts()
    assert {"README.md", "overlay/replayssm_overlay/hooks/README.md", "notes/decisions.md"} <= set(texts)
    assert release_prose.stale_statements(texts) == []


def _help_texts() -> dict:
    """Every --help of `replayssm-overlay` (each subcommand's too) and of `make demo`'s script."""
    from harness import demo

    texts, parsers = {}, [("replayssm-overlay", cli.build_parser())]
    while parsers:
        name, parser = parsers.pop()
        texts[f"{name} --help"] = parser.format_help()
        for action in parser._subparsers._group_actions if parser._subparsers else ():
            parsers += [(f"{name} {sub}", child) for sub, child in action.choices.items()]
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        demo.main(["--help"])
    texts["python -m harness.demo --help"] = out.getvalue()
    return texts


def test_the_help_texts_name_the_tables_releases():
    texts = _help_texts()
    assert "replayssm-overlay status --help" in texts and "replayssm-overlay kernels build --help" in texts
    assert release_prose.stale_statements(texts) == []
    ring = f"{RING_RELEASES[0]} to {RING_RELEASES[-1]}"
    assert ring in " ".join(texts["python -m harness.demo --help"].split())


def test_control_stale_ranges_lists_and_literals_are_found():
    newest, oldest, ring = SUPPORTED_RELEASES[-1], SUPPORTED_RELEASES[0], RING_RELEASES
    older = SUPPORTED_RELEASES[-2]
    text = (f"patches {oldest} to {newest} and, on {ring[0]}-{older}, the ring;\n"  # stale: ends early
            f"up to {newest} refuses; {', '.join(ring[:-1])} and {newest} keep a ring;\n"  # both right
            f"the same on {ring[1]} to {newest};\n"  # stale: starts mid-way
            f"RELEASES = ({', '.join(repr(r) for r in ring[:3])})\n")  # stale: a literal list
    found = release_prose.stale_statements({"x.py": text})
    assert sorted(int(line.split(":")[1]) for line in found) == [1, 3, 4], found
    path, words = sorted(release_prose.FACTS)[0]
    assert release_prose.stale_statements({path: words}) == []  # a listed fact stays
