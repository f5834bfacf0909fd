"""Where the repository states a set of SGLang releases: the reader behind test_release_prose.py, and the
README's release table, the one place that lists them (rendered from the table, `patcher/releases.py`,
and the image lock; `python -m tests.structure.release_prose --write` rewrites it).

A statement is a range ("0.5.20 to 0.5.23", "0.5.19-0.5.23", "up to 0.5.23"), a list ("0.5.20, 0.5.21,
0.5.22 and 0.5.23", "0.5.19,0.5.20,0.5.21", "0.5.19, ..., 0.5.23") or, in code, a literal list of three or
more quoted releases. Prose names the table instead of copying it ("every release of the table", "the ring
releases, 0.5.20 on"), so a new release changes no sentence: a statement in a file is allowed only as a
fact about particular releases that no new release changes (which releases keep the GDN kernels in
`fla/`), which `FACTS` names by file and words. Text generated from the table at run time (the help
texts, `span()`) may state the table's own range. Open-ended statements ("0.5.20 on", "from 0.5.20") name
no newest release and are not read.
"""

import re
import subprocess

from replayssm_overlay.patcher.releases import RING_RELEASES, SUPPORTED_RELEASES, span
from tests.structure.import_graph import ROOT

SERIES = sorted({release.rsplit(".", 1)[0] for release in SUPPORTED_RELEASES})
_RELEASE = "(?:" + "|".join(re.escape(series) for series in SERIES) + r")\.\d+"
PATTERNS = {
    "range": re.compile(rf"(?<![\d.])({_RELEASE})\s*(?:to|through|-|–)\s*({_RELEASE})(?![\d])"),
    "up to": re.compile(rf"\b(?:up to|until)\s+({_RELEASE})(?![\d])"),
    "list": re.compile(rf"(?<![\d.]){_RELEASE}(?:,\s*{_RELEASE})+,?\s+(?:and|or)\s+{_RELEASE}(?![\d])"),
    "quoted list": re.compile(rf"""["']{_RELEASE}["'](?:\s*,\s*["']{_RELEASE}["']){{2,}}"""),
    "comma list": re.compile(
        rf"(?<![\d.]){_RELEASE}(?:,\s*(?:{_RELEASE}|\.\.\.|…)){{2,}}"
        rf"(?![\d])(?!,?\s+(?:and|or)\s)(?!,\s*(?:{_RELEASE}|\.\.\.|…))"
    ),
}
#: (file, the statement's words): facts about particular releases, which a new release leaves true
FACTS = {
    ("harness/gdn_kernels.py", "up to 0.5.22"),
    ("overlay/replayssm_overlay/patcher/releases.py", "up to 0.5.22"),
    ("overlay/replayssm_overlay/protocol.py", "up to 0.5.22"),
    ("tests/hooks/test_sglang_warmup.py", "0.5.20-0.5.22"),
}
#: not read: measured results, the image lock (a place per release by design: tests/releases checks it), and the
#: files that hold such statements as data (this one, its tests)
SKIPPED = (
    "benchmarks/results/",
    "docker/base.lock",
    "tests/structure/release_prose.py",
    "tests/structure/test_release_prose.py",
    "tests/structure/test_pretend_release.py",
)
README = "README.md"
TABLE_START = (
    "<!-- release table, from patcher/releases.py and docker/base.lock: "
    "python -m tests.structure.release_prose --write -->"
)
TABLE_END = "<!-- end of the release table -->"


def statements(text: str):
    """(kind, words, the releases it names) for every statement of a set of releases in `text`."""
    for kind, pattern in PATTERNS.items():
        for match in pattern.finditer(text):
            words = " ".join(match.group(0).split())
            yield kind, words, re.findall(_RELEASE, words), text.count("\n", 0, match.start()) + 1


def problem(kind: str, releases: list) -> str:
    """Why a statement generated from the table (a help text) does not say the table's releases ('' where
    it does)."""
    newest, oldest, first_ring = SUPPORTED_RELEASES[-1], SUPPORTED_RELEASES[0], RING_RELEASES[0]
    supported, ring = span(SUPPORTED_RELEASES), span(RING_RELEASES)
    expected = f"the table holds {supported}, its ring releases are {ring}"
    if kind == "quoted list":
        return f"a literal list of releases: derive it from patcher/releases.py ({expected})"
    if kind in ("list", "comma list"):
        return "" if set(releases) in (set(SUPPORTED_RELEASES), set(RING_RELEASES)) else expected
    if releases[-1] != newest:
        return f"ends at {releases[-1]}, not at the newest release ({expected})"
    if kind == "range" and releases[0] not in (oldest, first_ring):
        return f"starts at {releases[0]}, which begins neither the table nor its ring releases ({expected})"
    return ""


def tracked_files() -> list:
    """The repository's text files, as git tracks them (untracked ones that git does not ignore too)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    return [path for path in listed if not path.startswith(SKIPPED) and (ROOT / path).is_file()]


def stale_statements(texts: dict, generated: bool = False) -> list:
    """'file:line: "words": why' for every statement in `texts` (file -> text) that is not a listed fact;
    with `generated` (text rendered from the table at run time), the table's own range or list is allowed."""
    found = []
    for path, text in texts.items():
        for kind, words, releases, line in statements(_outside_table(text) if path == README else text):
            if (path, words) in FACTS:
                continue
            why = (
                problem(kind, releases)
                if generated
                else (
                    'copies the release table: name it instead ("every release of the table", "the ring releases, '
                    f'{RING_RELEASES[0]} on"), or add it to FACTS if it is a fact no new release changes'
                )
            )
            if why:
                found.append(f"{path}:{line}: {words!r}: {why}")
    return found


def _outside_table(text: str) -> str:
    """`text` with the release table's lines blanked (kept as empty lines, so line numbers hold)."""
    start, end = text.find(TABLE_START), text.find(TABLE_END)
    if start < 0 or end < start:
        return text
    return text[:start] + "\n" * text.count("\n", start, end) + text[end:]


def release_table(lock_text: str) -> str:
    """The README's release table, from the table and the lock's lanes (between its two marker lines)."""
    lanes = dict(line.split("=", 1) for line in lock_text.splitlines() if line.startswith("LANES_"))
    rows = [
        TABLE_START,
        "| SGLang | GDN ReplaySSM protocol | what commits DFLASH/DSPARK | image lanes (`docker/base.lock`) |",
        "|---|---|---|---|",
    ]
    for release in SUPPORTED_RELEASES:
        protocol, commit = (
            ("ring", "the release's own MTP commit")
            if release in RING_RELEASES
            else ("fold (raw window)", "the overlay's fold")
        )
        lanes_of = ", ".join(f"`{lane}`" for lane in lanes.get(f"LANES_{release}", "").split(",") if lane)
        rows.append(f"| {release} | {protocol} | {commit} | {lanes_of or 'none'} |")
    return "\n".join(rows + [TABLE_END])


def readme_table(readme_text: str) -> str:
    """The release table as the README holds it now ('' if it has none)."""
    start, end = readme_text.find(TABLE_START), readme_text.find(TABLE_END)
    return readme_text[start : end + len(TABLE_END)] if 0 <= start < end else ""


def write_readme_table(root=ROOT) -> bool:
    """Rewrite the README's release table from the table and the lock; whether it changed."""
    readme = root / README
    text = readme.read_text()
    old, new = readme_table(text), release_table((root / "docker" / "base.lock").read_text())
    if not old:
        raise SystemExit(f"{readme}: no release table (the line {TABLE_START!r} and the end line)")
    if old != new:
        readme.write_text(text.replace(old, new))
    return old != new


def repository_texts() -> dict:
    texts = {}
    for path in tracked_files():
        try:
            texts[path] = (ROOT / path).read_text()
        except UnicodeDecodeError:
            continue
    return texts


if __name__ == "__main__":
    import sys

    if sys.argv[1:] != ["--write"]:
        raise SystemExit(
            "usage: python -m tests.structure.release_prose --write   (rewrites README.md's release table)"
        )
    print("README.md's release table " + ("rewritten" if write_readme_table() else "was up to date"))
