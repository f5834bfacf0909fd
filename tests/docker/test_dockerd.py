"""The private-daemon helper itself: it starts a daemon that answers (with either storage driver, and
inside a network namespace), and `stop()` leaves no process and no directory behind."""

from __future__ import annotations

import os
import subprocess
import uuid

import pytest

from tests.infra.dockerd import start_dockerd


@pytest.mark.parametrize("driver", ["vfs", None])
def test_dockerd_answers_and_stop_removes_process_and_dirs(tmp_path, driver):
    daemon = start_dockerd(tmp_path / "d", storage_driver=driver)
    try:
        assert daemon.host.startswith("unix:///tmp/dkr-")
        assert daemon.storage_driver in ("overlay2", "vfs") and (driver is None or daemon.storage_driver == driver)
        assert daemon.docker("info", "--format", "{{.Driver}}").stdout.strip() == daemon.storage_driver
        assert daemon.alive()
    finally:
        daemon.stop()
    assert not daemon.alive()
    assert not os.path.exists(daemon.run_dir)
    assert not os.path.exists(daemon.root)


def test_dockerd_in_a_network_namespace(tmp_path):
    netns = f"rso-dk-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", netns], check=True)
    try:
        daemon = start_dockerd(tmp_path / "d", netns=netns)
        try:
            assert os.stat(f"/proc/{daemon.pid}/ns/net").st_ino == os.stat(f"/run/netns/{netns}").st_ino
            assert daemon.docker("version", "--format", "{{.Server.Version}}").stdout.strip()
        finally:
            daemon.stop()
        assert not daemon.alive()
    finally:
        subprocess.run(["ip", "netns", "delete", netns], check=True)
