"""Session fixtures of the rollout tests: the stand-in server images and a fleet of three test nodes.

Both are built once per session and torn down (processes stopped by PID, namespaces deleted,
directories removed) when the session ends, also after a failure. A failing test that used the fleet gets
the playbook runs it made (the fleet's ansible.log since the test began) in its report, the failed tasks
first (tests/deploy/failure_report.py), so a failure on CI can be read from the CI log alone.
"""

from __future__ import annotations

import os
import shutil

import pytest

from tests.deploy.failure_report import failed_tasks
from tests.deploy.fleet import start_fleet
from tests.deploy.router import KINDS
from tests.deploy.standin_image import build_saved_images

#: where the fleet's ansible.log stood when a test's call began
_LOG_START = pytest.StashKey[int]()
#: the most of a failing test's playbook output its report carries (the end of it)
REPORTED_LOG_CHARS = 12000


def _require_root_tools() -> None:
    if os.geteuid() != 0:
        pytest.skip("the rollout tests create network namespaces and Docker daemons: run them as root")
    missing = [
        t for t in ("ip", "nsenter", "dockerd", "docker", "debootstrap", "ssh", "rsync") if shutil.which(t) is None
    ]
    if missing or not os.path.exists("/usr/sbin/sshd"):
        pytest.fail(f"missing tools for the rollout tests: {missing or ['sshd']}; run scripts/setup-system.sh")


def pytest_generate_tests(metafunc):
    """A test behind a router (one that uses the `router_kind` fixture) runs once per router kind: every kind of
    KINDS, or the one `--router-kind` names. Module scope: all of a module's tests behind one kind, then the
    next kind's."""
    if "router_kind" in metafunc.fixturenames:
        metafunc.parametrize("router_kind", selected_kinds(metafunc.config.getoption("--router-kind")), scope="module")


def selected_kinds(option: str) -> tuple[str, ...]:
    """The router kinds `--router-kind` selects (tests/conftest.py refuses an unknown one at start)."""
    return KINDS if option == "both" else (option,)


@pytest.fixture(scope="session")
def saved_images(tmp_path_factory):
    """{'v1': SavedImage, 'v2': SavedImage}: `make save`-style tarballs of the stand-in server image."""
    _require_root_tools()
    return build_saved_images(tmp_path_factory.mktemp("images"))


@pytest.fixture(scope="session")
def fleet(tmp_path_factory):
    """Three SSH-reachable test nodes with their own Docker daemons (see tests/deploy/fleet.py)."""
    _require_root_tools()
    fleet = start_fleet(tmp_path_factory.mktemp("fleet"), count=3)
    try:
        yield fleet
    finally:
        fleet.stop()


def _ansible_log(item):
    fleet = getattr(item, "funcargs", {}).get("fleet")
    return fleet.root / "ansible.log" if fleet is not None else None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    log = _ansible_log(item)
    if log is not None:
        item.stash[_LOG_START] = log.stat().st_size if log.exists() else 0
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    log = _ansible_log(item)
    if report.failed and call.when == "call" and log is not None and log.exists():
        with log.open("rb") as fh:
            fh.seek(item.stash.get(_LOG_START, 0))
            runs = fh.read().decode(errors="replace")
        failed = failed_tasks(runs)
        if failed:
            report.sections.append(("failed tasks of this test's playbook runs", failed))
        if runs.strip():
            report.sections.append(
                ("playbook runs of this test (the end of the fleet's ansible.log)", runs[-REPORTED_LOG_CHARS:])
            )
    return report
