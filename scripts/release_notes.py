"""Print the release notes of one overlay version: its section of CHANGELOG.md, for the release workflow
to publish (`gh release create --notes-file`).

Why a script: the tag must not publish without notes, so a version with no section, or an empty one, is
refused (exit 2, with the fix) before anything is built. Standard library only (the workflow's plain python3).

    python3 scripts/release_notes.py 0.1.0 [--changelog CHANGELOG.md] > notes.md
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

CHANGELOG = Path(__file__).resolve().parent.parent / "CHANGELOG.md"


class NoNotes(Exception):
    """The changelog has no usable section for the version. Not an `OverlayError`: the release workflow
    runs this script with a plain python3, where the overlay is not installed."""

    code = "no-release-notes"


def section(text: str, version: str) -> str:
    """The body of `## <version>` (up to the next `## ` heading), stripped; NoNotes if absent or empty."""
    heading = re.compile(rf"^## \[?{re.escape(version)}\]?(?:\s|$)")
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if heading.match(line)), None)
    if start is None:
        raise NoNotes(f"CHANGELOG.md has no section `## {version}`")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    body = "\n".join(lines[start + 1 : end]).strip()
    if not body:
        raise NoNotes(f"the section `## {version}` of CHANGELOG.md is empty")
    return body


def main(argv=None) -> int:
    summary = __doc__.partition("\n\n")[0]
    parser = argparse.ArgumentParser(description=summary)
    parser.add_argument("version", help="the overlay version (pyproject.toml), e.g. 0.1.0")
    parser.add_argument("--changelog", type=Path, default=CHANGELOG, help="default: the repository's CHANGELOG.md")
    args = parser.parse_args(argv)
    try:
        print(section(args.changelog.read_text(), args.version))
    except NoNotes as err:
        print(
            f"error: {err}\n  fix: rename `## Unreleased` to `## {args.version}` in the commit that sets the "
            'version (RELEASING.md, "Publish"), then tag that commit',
            file=sys.stderr,
        )
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
