"""Where the repository states a set of SGLang releases, and whether that set is the release table's
(`patcher/releases.py`): the reader behind test_release_prose.py, and what RELEASING.md's last step runs.

A statement is a range ("0.5.20 to 0.5.23", "0.5.19-0.5.23", "up to 0.5.23"), a list ("0.5.20, 0.5.21,
0.5.22 and 0.5.23") or, in code, a literal list of three or more quoted releases. A range that ends at the
newest release must start at the oldest one or at the first ring release; a list must be all of them or
all ring releases; a quoted list belongs nowhere but the table. Anything else is stale, unless it is a
fact about particular releases that no new release changes (which releases keep the GDN kernels in
`fla/`): `FACTS` names each such statement by file and words. Open-ended statements ("0.5.20 on", "from
0.5.20") name no newest release and are not read.
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
}
#: (file, the statement's words): facts about particular releases, which a new release leaves true
FACTS = {
    ("harness/gdn_kernels.py", "up to 0.5.22"),
    ("overlay/replayssm_overlay/patcher/releases.py", "up to 0.5.22"),
    ("overlay/replayssm_overlay/protocol.py", "up to 0.5.22"),
    ("tests/hooks/test_sglang_warmup.py", "0.5.20-0.5.22"),
}
#: not read: measured results, and the files that hold such statements as data (this one, its test)
SKIPPED = ("benchmarks/results/", "tests/structure/release_prose.py", "tests/structure/test_release_prose.py")


def statements(text: str):
    """(kind, words, the releases it names) for every statement of a set of releases in `text`."""
    for kind, pattern in PATTERNS.items():
        for match in pattern.finditer(text):
            words = " ".join(match.group(0).split())
            yield kind, words, re.findall(_RELEASE, words), text.count("\n", 0, match.start()) + 1


def problem(kind: str, releases: list) -> str:
    """Why a statement does not say the table's releases ('' where it does)."""
    newest, oldest, first_ring = SUPPORTED_RELEASES[-1], SUPPORTED_RELEASES[0], RING_RELEASES[0]
    supported, ring = span(SUPPORTED_RELEASES), span(RING_RELEASES)
    expected = f"the table holds {supported}, its ring releases are {ring}"
    if kind == "quoted list":
        return f"a literal list of releases: derive it from patcher/releases.py ({expected})"
    if kind == "list":
        return "" if set(releases) in (set(SUPPORTED_RELEASES), set(RING_RELEASES)) else expected
    if releases[-1] != newest:
        return f"ends at {releases[-1]}, not at the newest release ({expected})"
    if kind == "range" and releases[0] not in (oldest, first_ring):
        return f"starts at {releases[0]}, which begins neither the table nor its ring releases ({expected})"
    return ""


def tracked_files() -> list:
    """The repository's text files, as git tracks them (untracked ones that git does not ignore too)."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.splitlines()
    return [path for path in listed if not path.startswith(SKIPPED) and (ROOT / path).is_file()]


def stale_statements(texts: dict) -> list:
    """'file:line: "words": why' for every statement in `texts` (file -> text) that is neither the table's
    releases nor a listed fact."""
    found = []
    for path, text in texts.items():
        for kind, words, releases, line in statements(text):
            why = "" if (path, words) in FACTS else problem(kind, releases)
            if why:
                found.append(f"{path}:{line}: {words!r}: {why}")
    return found


def repository_texts() -> dict:
    texts = {}
    for path in tracked_files():
        try:
            texts[path] = (ROOT / path).read_text()
        except UnicodeDecodeError:
            continue
    return texts
