"""The releases are listed in one place: prose (README and the other guides, docstrings, comments) names
the release table instead of copying it, so no sentence states a range or list of releases unless it is a
listed fact; the README's release table is the table's rendering; the help texts, generated from the
table, state its own range (`release_prose.py` says what is read). Adding a release then touches the
table entry, the lock and the README's rendered table (`test_pretend_release.py` counts it)."""

import contextlib
import io

import pytest

from replayssm_overlay import cli
from replayssm_overlay.patcher.releases import RING_RELEASES, SUPPORTED_RELEASES
from tests.structure import release_prose


def test_no_file_copies_the_release_table():
    texts = release_prose.repository_texts()
    assert {"README.md", "overlay/replayssm_overlay/hooks/README.md", "notes/decisions.md"} <= set(texts)
    assert release_prose.stale_statements(texts) == []


def test_the_readme_release_table_is_the_tables_rendering():
    readme = (release_prose.ROOT / "README.md").read_text()
    expected = release_prose.release_table((release_prose.ROOT / "docker" / "base.lock").read_text())
    assert release_prose.readme_table(readme) == expected, (
        "README.md's release table is stale: run `.venv/bin/python -m tests.structure.release_prose --write`"
    )
    assert all(f"| {release} |" in expected for release in SUPPORTED_RELEASES)


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
    assert release_prose.stale_statements(texts, generated=True) == []
    ring = f"{RING_RELEASES[0]} to {RING_RELEASES[-1]}"
    assert ring in " ".join(texts["python -m harness.demo --help"].split())


def test_control_stale_ranges_lists_and_literals_are_found():
    newest, oldest, ring = SUPPORTED_RELEASES[-1], SUPPORTED_RELEASES[0], RING_RELEASES
    older = SUPPORTED_RELEASES[-2]
    text = (
        f"patches {oldest} to {newest} and, on {ring[0]}-{older}, the ring;\n"  # stale: ends early
        f"up to {newest} refuses; {', '.join(ring[:-1])} and {newest} keep a ring;\n"  # both right
        f"the same on {ring[1]} to {newest};\n"  # stale: starts mid-way
        f"RELEASES = ({', '.join(repr(r) for r in ring[:3])})\n"
    )  # stale: a literal list
    found = release_prose.stale_statements({"x.py": text}, generated=True)
    assert sorted(int(line.split(":")[1]) for line in found) == [1, 3, 4], found
    # in a file, every statement copies the table: the right ones too, a comma list and an ellipsis too
    text += f"RELEASES={','.join(SUPPORTED_RELEASES[:3])}\nsupported: {oldest}, ..., {newest}\n{ring[0]} on\n"
    found = release_prose.stale_statements({"x.md": text})
    assert sorted(int(line.split(":")[1]) for line in found) == [1, 1, 2, 2, 3, 4, 5, 6], found
    path, words = sorted(release_prose.FACTS)[0]
    assert release_prose.stale_statements({path: words}) == []  # a listed fact stays
    table = release_prose.release_table("LANES_0.5.19=cu130\n")
    readme = f"intro {oldest} to {newest}\n{table}\nend\n"  # the rendered table is not read, the intro is
    assert [hit.split(":")[1] for hit in release_prose.stale_statements({"README.md": readme})] == ["1"]
