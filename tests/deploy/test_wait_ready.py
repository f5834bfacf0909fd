"""The health wait's own module (deploy/roles/sglang_verify/library/sglang_wait_ready.py) against a real
node daemon: a container its restart policy has already started again still reports the code it died with;
a hung server (stopped process, or paused container) cannot stretch the wait past its budget; a Docker
daemon restarted during the wait is named as such.

The rollout test of a dying server hits this only when the first poll comes after the restart (a loaded
CI machine, 2278 s run); here the restart is made certain: the container exits 3 once, then sleeps.
"""

from __future__ import annotations

import json
import os
import signal
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
    daemon.docker(
        "run",
        "-d",
        "--name",
        NAME,
        "--network",
        "none",
        "--restart",
        "unless-stopped",
        "--entrypoint",
        "/bin/sh",
        v1.ref,
        "-c",
        EXIT_ONCE,
    )
    try:
        state = _wait_restarted(daemon)
        assert state["State"]["ExitCode"] == 0  # what the daemon shows once it started the container again
        result = _run_module(
            {
                "urls": ["http://127.0.0.1:9/health"],
                "retries": 3,
                "delay": 1,
                "container": NAME,
                "docker_host": daemon.host,
            },
            tmp_path,
        )
    finally:
        daemon.docker("rm", "-f", NAME, check=False)
    assert result.get("failed") and result["exited"], result
    assert result["exit_code"] == 3, result
    assert f"container {NAME} was restarted after exiting with code 3 while waiting for" in result["msg"]


def _run_in_node(node, args: dict, tmp_path) -> subprocess.Popen:
    """The module run as Ansible would on `node` (inside its namespace, where its containers listen)."""
    path = tmp_path / f"args-{time.monotonic_ns()}.json"
    path.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    return subprocess.Popen(
        ["nsenter", f"--net=/run/netns/{node.netns}", "--", sys.executable, str(MODULE), str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _serve(node, image, port: int, **args) -> dict:
    """The stand-in server (the test double of SGLang) in a container NAME on `node`'s network, restarted by
    its policy; returns the module's arguments for it (`args` override them)."""
    daemon = node.dockerd
    daemon.docker("load", "-i", str(image.tarball), timeout=300)
    daemon.docker("rm", "-f", NAME, check=False)
    daemon.docker(
        "run",
        "-d",
        "--name",
        NAME,
        "--network",
        "host",
        "--restart",
        "unless-stopped",
        image.ref,
        "python3",
        "-m",
        "sglang.launch_server",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    )
    return {
        "urls": [f"http://127.0.0.1:{port}/health"],
        "retries": 30,
        "delay": 1,
        "timeout": 60,
        "container": NAME,
        "docker_host": daemon.host,
        **args,
    }


def test_a_hung_server_is_given_up_on_within_the_budget(fleet, saved_images, tmp_path):
    """A server that takes connections but never answers (its process stopped) used to hold each poll for
    the request timeout (60 s): a 3 x 1 s budget took minutes. A paused container is named at once."""
    node = fleet.nodes[0]
    daemon = node.dockerd
    args = _serve(node, saved_images["v1"], 30999)
    try:
        ready = json.loads(_run_in_node(node, args, tmp_path).communicate(timeout=120)[0])
        assert ready.get("healthy"), ready
        pid = int(daemon.docker("inspect", "--format", "{{.State.Pid}}", NAME).stdout)
        os.kill(pid, signal.SIGSTOP)  # the server's process in our container: it accepts, never answers
        try:
            tic = time.monotonic()
            hung = json.loads(_run_in_node(node, {**args, "retries": 3}, tmp_path).communicate(timeout=300)[0])
            took = time.monotonic() - tic
        finally:
            os.kill(pid, signal.SIGCONT)
        daemon.docker("pause", NAME)
        paused = json.loads(_run_in_node(node, args, tmp_path).communicate(timeout=300)[0])
    finally:
        daemon.docker("unpause", NAME, check=False)
        daemon.docker("rm", "-f", NAME, check=False)
    assert hung.get("failed") and not hung["healthy"], hung
    assert "did not answer 200 within the wait's budget of 3 s" in hung["msg"], hung
    assert took < 15, took
    assert paused.get("failed") and f"container {NAME} is paused (docker unpause {NAME})" in paused["msg"], paused


def test_a_docker_daemon_restart_during_the_wait_is_named(fleet, saved_images, tmp_path):
    """The daemon restarts while the wait polls (the poll after it is made to come after it): that used to
    read "container exited with code 0" (or went unnoticed once the policy had started it again)."""
    node = fleet.nodes[1]
    daemon = node.dockerd
    args = _serve(node, saved_images["v1"], 30998, urls=["http://127.0.0.1:9/health"], retries=60, timeout=5)
    wait = _run_in_node(node, args, tmp_path)
    try:
        time.sleep(3)  # polling
        wait.send_signal(signal.SIGSTOP)
        daemon.restart()
        wait.send_signal(signal.SIGCONT)
        out, err = wait.communicate(timeout=120)
    finally:
        if wait.poll() is None:
            wait.kill()
        daemon.docker("rm", "-f", NAME, check=False)
    result = json.loads(out or "{}")
    assert result.get("failed") and result["exited"], (out, err)
    assert f"the Docker daemon at {daemon.host} restarted during the wait" in result["msg"], result
    assert "exited with code 0" not in result["msg"]
