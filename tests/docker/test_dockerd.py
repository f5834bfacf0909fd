"""The private-daemon helper itself: it starts a daemon that answers, and `stop()` leaves nothing behind."""

from __future__ import annotations

import os

from tests.infra.dockerd import start_dockerd


def test_dockerd_answers_and_stop_removes_process_and_dirs(tmp_path):
    daemon = start_dockerd(tmp_path / "d")
    try:
        assert daemon.host.startswith("unix:///tmp/dkr-")
        assert daemon.docker("info", "--format", "{{.Driver}}").stdout.strip() == "vfs"
        assert daemon.alive()
    finally:
        daemon.stop()
    assert not daemon.alive()
    assert not os.path.exists(daemon.run_dir)
    assert not os.path.exists(daemon.root)

