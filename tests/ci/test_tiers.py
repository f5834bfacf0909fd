"""The unit tier is chosen by folder in tests/conftest.py (`--tier unit`, what `make test-fast` runs, in
random order), and each test can be run by itself (`scripts/tests_alone.py`, which the release workflow
runs over every deploy module once per release)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from tests.conftest import TESTS, UNIT_TIER, in_unit_tier

REPO = TESTS.parent


def test_the_unit_tier_names_existing_folders_and_files_and_selects_by_folder():
    assert all((TESTS / entry).exists() for entry in UNIT_TIER)
    assert in_unit_tier(TESTS / "patcher" / "test_new_module.py")  # a new file of a unit folder joins it
    assert in_unit_tier(TESTS / "monitoring")  # the way to one file of a heavy folder
    assert in_unit_tier(TESTS / "monitoring" / "test_overlay_metrics.py")
    assert not in_unit_tier(TESTS / "monitoring" / "test_alert_rules.py")
    assert not in_unit_tier(TESTS / "deploy") and not in_unit_tier(TESTS / "docker" / "test_image.py")


def test_make_test_fast_runs_the_unit_tier_in_random_order():
    recipe = subprocess.run(["make", "-n", "test-fast"], cwd=REPO, capture_output=True, text=True).stdout
    assert "-p randomly --tier unit" in recipe and "import pytest_randomly" in recipe
    assert "-p no:randomly" in (REPO / "pyproject.toml").read_text()  # nowhere else


def test_tests_alone_runs_each_test_in_its_own_process_and_names_who_fails_alone(tmp_path):
    (tmp_path / "test_order.py").write_text(
        "SEEN = []\n\n\ndef test_writes():\n    SEEN.append(1)\n\n\ndef test_reads():\n    assert SEEN\n"
    )
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "tests_alone.py"),
            str(tmp_path / "test_order.py"),
            "--",
            "--rootdir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 of 2 passed alone; failed alone: " in done.stdout and "test_order.py::test_reads" in done.stdout


def test_the_release_workflow_runs_each_deploy_module_test_alone():
    jobs = yaml.safe_load((REPO / ".github" / "workflows" / "release.yml").read_text())["jobs"]
    alone = jobs["tests-alone"]
    runs = " ".join(step.get("run", "") for step in alone["steps"])
    assert "scripts/tests_alone.py" in runs and "${{ matrix.module }}" in runs
    assert Path(REPO / "tests" / "deploy").is_dir()
