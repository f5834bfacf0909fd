"""`descendants` (tests/deploy/fleet.py) finds every process below one, grandchildren included: stopping a
test node's sshd ends the connections it serves with it, an SSH multiplexing master's among them, and those
run as its children's children."""

from __future__ import annotations

import os
import subprocess
import time

from tests.deploy.fleet import descendants


def test_children_and_grandchildren_are_found_and_nothing_else():
    parent = subprocess.Popen(["sh", "-c", "sh -c 'sleep 60' & sleep 60 & wait"], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while len(found := descendants(parent.pid)) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        commands = sorted(open(f"/proc/{pid}/cmdline").read().split("\0")[0] for pid in found)
        assert commands == ["sh", "sleep", "sleep"]  # the inner shell, its sleep, and the outer sleep
        assert parent.pid not in found and os.getpid() not in found
    finally:
        os.killpg(parent.pid, 9)
        parent.wait()
