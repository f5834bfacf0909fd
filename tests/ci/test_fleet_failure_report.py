"""A fleet test that fails carries the playbook runs it made in its report (tests/deploy/conftest.py), so a
failure on CI can be read from the CI log alone: what the test's playbooks printed, and nothing of the
runs before it, the failed task before the log's tail (CI shows a report's start and end). Run in a
pytest of its own over a stand-in `fleet` fixture (a folder with an ansible.log)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from tests.conftest import TESTS

REPO = TESTS.parent

CONFTEST = """
import types
import pytest
from tests.deploy.conftest import pytest_runtest_call, pytest_runtest_makereport

@pytest.fixture(scope="session")
def fleet(tmp_path_factory):
    root = tmp_path_factory.mktemp("fleet")
    (root / "ansible.log").write_text("===== setup.yml (rc 0)\\nBEFORE THE TEST\\n")
    return types.SimpleNamespace(root=root)
"""

TESTS_FILE = """
def _run(fleet, text):
    with (fleet.root / "ansible.log").open("a") as fh:
        fh.write(text)

def test_fails(fleet):
    _run(fleet, "===== deploy.yml (rc 2)\\nTASK [Check] ***\\nok: [node2]\\n\\nTASK [Free disk] ***\\n"
         "fatal: [node1]: FAILED! =>\\n    msg: 'node1: only 0.2 GB free'\\n\\nTASK [Later] ***\\nok: [node2]\\n"
         + "filler\\n" * 3000)
    assert False

def test_passes(fleet):
    _run(fleet, "===== deploy.yml (rc 0)\\nPASSING RUN\\n")
"""


def test_a_failing_fleet_test_reports_its_own_playbook_runs_only(tmp_path):
    (tmp_path / "conftest.py").write_text(textwrap.dedent(CONFTEST))
    (tmp_path / "test_fleet_report.py").write_text(textwrap.dedent(TESTS_FILE))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", "-q", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "1 failed, 1 passed" in proc.stdout
    assert "playbook runs of this test (the end of the fleet's ansible.log)" in proc.stdout
    failed = proc.stdout.index("failed tasks of this test's playbook runs")
    tail = proc.stdout.index("playbook runs of this test (the end of the fleet's ansible.log)")
    # (the message is in the failing test's source above too, hence the search from the section on)
    assert proc.stdout.index("node1: only 0.2 GB free", failed) < tail
    # the failed block alone: not the tasks that passed around it
    assert "TASK [Check]" not in proc.stdout[failed:tail] and "TASK [Later]" not in proc.stdout[failed:tail]
    assert "BEFORE THE TEST" not in proc.stdout and "PASSING RUN" not in proc.stdout
