#!/usr/bin/python
"""Wait until an SGLang server answers its health endpoints, and stop at once if its container dies.

Why a module and not `uri` + `until`: the retry loop of a task can only re-run that one request, so a
container that exited in its first second was still polled for the whole budget (60 x 10 s by default)
and every normal model-load poll printed as `FAILED - RETRYING`. This module polls the endpoints in
order and, between polls, the container's state through the Docker CLI on the node; it returns quietly
once all answer 200, and fails with the exit code and the last log lines as soon as the container is
no longer running (or is being restarted by its restart policy, or was started again by a restarted
Docker daemon, or is paused). The whole wait is bounded by its budget, retries x delay seconds: a server
that accepts connections but never answers (hung) cannot stretch one poll past what is left of it.
A container stopped with exit code 0 was sent SIGTERM (SGLang exits 0 after its drain); where the
daemon's socket was re-created meanwhile, the daemon itself restarted, and the message says so.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: sglang_wait_ready
short_description: Wait for an SGLang server's health endpoints, failing fast when its container exits
description:
  - Polls each URL in I(urls) in order until it answers HTTP 200, for at most I(retries) x I(delay) seconds.
  - Between polls it inspects I(container) and fails at once, with its exit code and last log lines, when it is not
    running.
options:
  urls: {description: URLs to wait for, in order, type: list, elements: str, required: true}
  timeout: {description: Seconds one request may take (at most what is left of the budget), type: int, default: 10}
  retries: {description: Polls before giving up, type: int, default: 60}
  delay: {description: Seconds between polls, type: int, default: 10}
  container: {description: Container whose state is checked between polls ("" to skip), type: str, default: ""}
  docker_cli: {description: Docker client on the node, type: str, default: docker}
  docker_host: {description: DOCKER_HOST of the daemon, type: str, default: "unix:///var/run/docker.sock"}
  log_lines: {description: Log lines returned when the container died, type: int, default: 20}
  must_pass: {description: Fail when the server does not become ready (false only reports), type: bool, default: true}
author: sglang-replayssm-overlay
"""

EXAMPLES = r"""
- name: Wait for the server
  sglang_wait_ready:
    urls: [http://127.0.0.1:30000/health, http://127.0.0.1:30000/health_generate]
    container: sglang-overlay
"""

RETURN = r"""
healthy: {description: every URL answered 200, type: bool, returned: always}
waited_s: {description: seconds spent waiting, type: float, returned: always}
exited: {description: the container stopped running during the wait, type: bool, returned: always}
exit_code: {description: the container's exit code when it exited, type: int, returned: when exited}
log_tail: {description: the container's last log lines when it exited, type: list, returned: when exited}
"""


def _docker(module, *args):
    env = {"DOCKER_HOST": module.params["docker_host"]}
    return module.run_command([module.params["docker_cli"], *args], environ_update=env)


def _socket_identity(docker_host):
    """The daemon socket's inode and creation time (a restarted daemon re-creates it), or None (tcp://)."""
    if not docker_host.startswith("unix://"):
        return None
    try:
        st = os.stat(docker_host[len("unix://") :])
    except OSError:
        return None
    return st.st_ino, st.st_ctime_ns


def _container_state(module):
    """The container's State, or None when it is not found; fails the module when the daemon does not answer."""
    rc, out, err = _docker(
        module,
        "inspect",
        "--type",
        "container",
        "--format",
        "{{json .State}}\t{{.RestartCount}}\t{{.Created}}\t{{.Id}}",
        module.params["container"],
    )
    if rc == 0:
        state, restarts, created, container_id = out.strip().rsplit("\t", 3)
        return {**json.loads(state), "RestartCount": int(restarts), "Created": created, "Id": container_id}
    if "no such" in err.lower():
        return None
    module.fail_json(
        msg=f"the Docker daemon at {module.params['docker_host']} does not answer while waiting for "
        f"{module.params['container']}: {err.strip() or out.strip()}",
        healthy=False,
        exited=False,
        daemon_down=True,
        waited_s=0.0,
    )


def _last_exit_code(module, state):
    """The code the container last exited with. Once its restart policy has started it again, State.ExitCode
    reads 0 (the daemon resets it on every start), so the record is the daemon's `die` events since the
    container was created; State.ExitCode is the answer when there are none (or the CLI has no events)."""
    if state.get("Running") or state.get("Restarting"):
        rc, out, _ = _docker(
            module,
            "events",
            "--since",
            state["Created"],
            "--until",
            f"{time.time():.3f}",
            "--filter",
            f"container={state['Id']}",
            "--filter",
            "event=die",
            "--format",
            "{{.Actor.Attributes.exitCode}}",
        )
        codes = [line.strip() for line in out.splitlines() if line.strip().lstrip("-").isdigit()] if rc == 0 else []
        if codes:
            return int(codes[-1])
    return state.get("ExitCode", -1)


def _status(url, timeout):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as reply:
            return reply.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (OSError, ValueError):
        return 0


def _stopped_how(module, state, first_started, socket_at_start):
    """Why the container is not (or no longer the same) running container, in words; None while it is."""
    restarted_daemon = socket_at_start is not None and _socket_identity(module.params["docker_host"]) not in (
        None,
        socket_at_start,
    )
    daemon_note = (
        (
            f" (the Docker daemon at {module.params['docker_host']} restarted during the wait: its socket was "
            f"re-created; a daemon stopping stops its containers)"
        )
        if restarted_daemon
        else ""
    )
    if state is None:
        return "does not exist" + daemon_note, -1
    if state.get("Paused"):
        return f"is paused (docker unpause {module.params['container']}), so it cannot answer", -1
    running = state.get("Running") and not state.get("Restarting")
    if running and state["RestartCount"] == 0 and state.get("StartedAt") == first_started:
        return None, None
    exit_code = _last_exit_code(module, state)
    if running and state["RestartCount"] == 0:
        return f"was started again at {state.get('StartedAt')}{daemon_note}", exit_code
    if state.get("Running") or state.get("Restarting"):
        return f"was restarted after exiting with code {exit_code}{daemon_note}", exit_code
    if exit_code == 0:
        return (
            f"was stopped (exit code 0: SGLang exits 0 after a SIGTERM, from `docker stop` or a Docker daemon "
            f"that stops){daemon_note}"
        ), exit_code
    return f"exited with code {exit_code}{daemon_note}", exit_code


def main():
    module = AnsibleModule(
        argument_spec={
            "urls": {"type": "list", "elements": "str", "required": True},
            "timeout": {"type": "int", "default": 10},
            "retries": {"type": "int", "default": 60},
            "delay": {"type": "int", "default": 10},
            "container": {"type": "str", "default": ""},
            "docker_cli": {"type": "str", "default": "docker"},
            "docker_host": {"type": "str", "default": "unix:///var/run/docker.sock"},
            "log_lines": {"type": "int", "default": 20},
            "must_pass": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    params = module.params
    start = time.monotonic()
    budget = max(params["retries"], 1) * params["delay"]
    deadline = start + budget
    socket_at_start = _socket_identity(params["docker_host"])
    first_started = None
    pending = list(params["urls"])
    attempt = 0
    while True:
        attempt += 1
        if params["container"]:
            state = _container_state(module)
            if first_started is None and state is not None:
                first_started = state.get("StartedAt")
            what, exit_code = _stopped_how(module, state, first_started, socket_at_start)
            if what is not None:
                rc, out, err = _docker(module, "logs", "--tail", str(params["log_lines"]), params["container"])
                tail = (out + err).splitlines()[-params["log_lines"] :] if rc == 0 else []
                module.fail_json(
                    msg=f"container {params['container']} {what} while waiting for {pending[0]}",
                    healthy=False,
                    exited=True,
                    exit_code=exit_code,
                    log_tail=tail,
                    waited_s=round(time.monotonic() - start, 1),
                )
        while pending and time.monotonic() < deadline:
            if _status(pending[0], max(0.5, min(params["timeout"], deadline - time.monotonic()))) != 200:
                break
            pending.pop(0)
        if not pending:
            module.exit_json(
                changed=False, healthy=True, exited=False, waited_s=round(time.monotonic() - start, 1), attempts=attempt
            )
        if time.monotonic() + params["delay"] > deadline:
            break
        time.sleep(params["delay"])
    waited = round(time.monotonic() - start, 1)
    result = {"healthy": False, "exited": False, "waited_s": waited}
    msg = (
        f"{pending[0]} did not answer 200 within the wait's budget of {budget} s ({params['retries']} polls "
        f"{params['delay']} s apart, each request cut at {params['timeout']} s; waited {waited} s)"
    )
    if params["must_pass"]:
        module.fail_json(msg=msg, **result)
    module.exit_json(changed=False, msg=msg, **result)


if __name__ == "__main__":
    main()
