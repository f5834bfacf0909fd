"""The release notes come from CHANGELOG.md: `scripts/release_notes.py` prints one version's section and
refuses a version without one (exit 2, with the fix), and the release workflow checks the notes before it
builds anything and publishes them after the images."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "release_notes.py"


def _notes(version: str, changelog: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), version, "--changelog", str(changelog)], capture_output=True, text=True
    )


def test_a_version_section_is_printed_and_nothing_of_the_others(tmp_path):
    changelog = tmp_path / "CHANGELOG.md"
    changelog.write_text(
        "# Changelog\n\nintro\n\n## Unreleased\n- next\n\n## 0.2.0\n- second\n- more\n\n## 0.1.0\n- first\n"
    )
    done = _notes("0.2.0", changelog)
    assert done.returncode == 0 and done.stdout == "- second\n- more\n"
    assert _notes("0.1.0", changelog).stdout == "- first\n"


def test_a_version_without_a_section_or_with_an_empty_one_is_refused(tmp_path):
    changelog = tmp_path / "CHANGELOG.md"
    changelog.write_text("# Changelog\n\n## Unreleased\n- next\n\n## 0.1.1\n\n## 0.1.0\n- first\n")
    for version, why in (
        ("0.2.0", "no section `## 0.2.0`"),
        ("0.1.1", "`## 0.1.1` of CHANGELOG.md is empty"),
        ("0.1", "no section `## 0.1`"),
    ):
        done = _notes(version, changelog)
        assert done.returncode == 2 and done.stdout == "" and why in done.stderr and "fix: rename" in done.stderr


def test_the_repository_changelog_has_an_unreleased_section():
    assert _notes("Unreleased", REPO / "CHANGELOG.md").returncode == 0


def test_the_release_workflow_checks_the_notes_first_and_publishes_them_last():
    release = yaml.safe_load((REPO / ".github" / "workflows" / "release.yml").read_text())
    jobs = release["jobs"]
    runs = [step.get("run", "") for step in jobs["pins"]["steps"]]
    assert any("scripts/release_notes.py" in run for run in runs)
    notes = jobs["notes"]
    assert set(notes["needs"]) == {"pins", "image"} and notes["permissions"] == {"contents": "write"}
    publish = notes["steps"][-1]["run"]
    assert 'scripts/release_notes.py "$VERSION" > notes.md' in publish and "--notes-file notes.md" in publish
