"""A release in a few places: a pretend release added to a copy of the repository, as RELEASING.md says,
touches the table entry, the image lock and at most three more places. Its three patched files are
byte-identical to the newest release's (the hashes are copied), the case RELEASING.md covers. With the
table entry alone the release checks fail, naming only the lock and the README's rendered table (no
sentence of prose); after the lock lines, the rewritten README table and the changelog line they pass,
and the copy differs from the repository in exactly those files."""

import filecmp
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from replayssm_overlay.patcher.releases import SUPPORTED_RELEASES

ROOT = Path(__file__).resolve().parents[2]
TABLE = "overlay/replayssm_overlay/patcher/releases.py"
CHECKS = [
    "tests/structure/test_release_prose.py",
    "tests/releases/test_release_coverage.py",
    "-k",
    "release_table or readme or help_texts or control_stale or image_lock or releasing_md",
]


def _copy(dest: Path) -> list:
    files = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    files = [name for name in files if (ROOT / name).is_file()]
    for name in files:
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, dest / name)
    subprocess.run(["git", "init", "-q"], cwd=dest, check=True)  # release_prose lists files with git
    return files


def _failures(repo: Path, tmp: Path) -> dict:
    """test id -> failure message, of the release checks run in `repo` (its own table and files)."""
    report = tmp / "report.xml"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
            f"--junitxml={report}",
            *CHECKS,
        ],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=600,
    )
    cases = ET.parse(report).getroot().iter("testcase")
    return {
        case.get("name"): (case.find("failure").get("message") or "")
        for case in cases
        if case.find("failure") is not None or case.find("error") is not None
    }


def _add_table_entry(repo: Path, new: str) -> None:
    path = repo / TABLE
    text = path.read_text()
    newest = re.search(rf'\n    "{re.escape(SUPPORTED_RELEASES[-1])}": {{\n.*?\n    }},\n', text, re.S).group(0)
    path.write_text(text.replace(newest, newest + newest.replace(SUPPORTED_RELEASES[-1], new, 1)))


def _add_lock_lines(repo: Path, new: str) -> None:
    path = repo / "docker" / "base.lock"
    text = path.read_text()
    text = re.sub(r"^RELEASES=(.*)$", lambda m: f"RELEASES={m.group(1)},{new}", text, count=1, flags=re.M)
    path.write_text(
        text.rstrip("\n") + f"\n\nLANES_{new}=cu130\nBASE_TAG_{new}_cu130=v{new}-cu130\n"
        f"BASE_DIGEST_{new}_cu130=sha256:UNPINNED-run-make-pin-base\nBASE_IMAGE_ID_{new}_cu130=\n"
    )


def test_a_pretend_release_touches_the_table_the_lock_and_two_more_places(tmp_path):
    repo = tmp_path / "repo"
    files = _copy(repo)
    major, minor, patch = SUPPORTED_RELEASES[-1].split(".")
    new = f"{major}.{minor}.{int(patch) + 1}"

    _add_table_entry(repo, new)
    failed = _failures(repo, tmp_path)
    assert set(failed) == {
        "test_the_readme_release_table_is_the_tables_rendering",
        f"test_the_image_lock_pins_a_base_for_every_lane_of_the_release[{new}]",
    }, "\n".join(f"{name}: {message}" for name, message in failed.items())

    _add_lock_lines(repo, new)
    subprocess.run(
        [sys.executable, "-m", "tests.structure.release_prose", "--write"],
        cwd=repo,
        check=True,
        capture_output=True,
        env={**os.environ, "PYTHONPATH": f"{repo / 'overlay'}:{repo}"},
    )
    changelog = repo / "CHANGELOG.md"
    changelog.write_text(changelog.read_text().replace("## Unreleased\n", f"## Unreleased\n\n- SGLang {new}.\n", 1))
    assert _failures(repo, tmp_path) == {}

    touched = sorted(name for name in files if not filecmp.cmp(ROOT / name, repo / name, shallow=False))
    assert touched == ["CHANGELOG.md", "README.md", "docker/base.lock", TABLE]
    assert f"| {new} | ring |" in (repo / "README.md").read_text()
