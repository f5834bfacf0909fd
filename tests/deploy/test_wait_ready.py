"""The health wait's own module (deploy/roles/sglang_verify/library/sglang_wait_ready.py) against a real
node daemon: a container its restart policy has already started again still reports the code it died with.

The rollout test of a dying server hits this only when the first poll comes after the restart (a loaded
CI machine, 2278 s run); here the restart is made certain: the container exits 3 once, then sleeps.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

from tests.deploy.runner import DEPLOY

MODULE = DEPLOY / "roles" / "sglang_verify" / "library" / "sglang_wait_ready.py"
NAME = "rso-wait-ready-test"
EXIT_ONCE = "if [ -e /exited-once ]; then exec sleep 600; fi; touch /exited-once; exit 3"


def _run_module(args: dict, tmp_path) -> dict:
    """The module as Ansible runs it: one JSON file of arguments in, one JSON result on stdout."""
    path = tmp_path / "args.json"
    path.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    proc = subprocess.run([sys.executable, str(MODULE), str(path)], capture_output=True, text=True, timeout=120)
    return json.loads(proc.stdout)


def _wait_restarted(daemon, timeout: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = json.loads(daemon.docker("inspect", "--format", "{{json .}}", NAME).stdout)
        if state["State"]["Running"] and not state["State"]["Restarting"] and state["RestartCount"] >= 1:
            return state
        time.sleep(0.2)
    raise AssertionError(f"{NAME} was not restarted within {timeout} s")


def test_a_container_restarted_by_its_policy_reports_the_code_it_died_with(fleet, saved_images, tmp_path):
    daemon = fleet.nodes[0].dockerd
    v1 = saved_images["v1"]
    daemon.docker("load", "-i", str(v1.tarball), timeout=300)
    daemon.docker("rm", "-f", NAME, check=False)
    daemon.docker("run", "-d", "--name", NAME, "--network", "none", "--restart", "unless-stopped",
                  "--entrypoint", "/bin/sh", v1.ref, "-c", EXIT_ONCE)
    try:
        state = _wait_restarted(daemon)
        assert state["State"]["ExitCode"] == 0  # what the daemon shows once it started the container again
        result = _run_module({"urls": ["http://127.0.0.1:9/health"], "retries": 3, "delay": 1,
                              "container": NAME, "docker_host": daemon.host}, tmp_path)
    finally:
        daemon.docker("rm", "-f", NAME, check=False)
    assert result.get("failed") and result["exited"], result
    assert result["exit_code"] == 3, result
    assert f"container {NAME} was restarted after exiting with code 3 while waiting for" in result["msg"]
