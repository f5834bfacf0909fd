"""Session fixtures of the rollout tests: the stand-in server images and a fleet of three test nodes.

Both are built once per session and torn down (processes stopped by PID, namespaces deleted,
directories removed) when the session ends, also after a failure.
"""

from __future__ import annotations

import os
import shutil

import pytest

from tests.deploy.fleet import start_fleet
from tests.deploy.standin_image import build_saved_images


def _require_root_tools() -> None:
    if os.geteuid() != 0:
        pytest.skip("the rollout tests create network namespaces and Docker daemons: run them as root")
    missing = [
        t for t in ("ip", "nsenter", "dockerd", "docker", "debootstrap", "ssh", "rsync") if shutil.which(t) is None
    ]
    if missing or not os.path.exists("/usr/sbin/sshd"):
        pytest.fail(f"missing tools for the rollout tests: {missing or ['sshd']}; run scripts/setup-system.sh")


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
