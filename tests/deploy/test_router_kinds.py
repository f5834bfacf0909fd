"""The rollout's router module (deploy/roles/sglang_router/library/sglang_router_worker.py) and its drain module
against both real routers, sglang-router 0.3.2 and smg 1.13.0, on loopback in front of two stand-in servers:
each router is told apart by its own answers, a named kind it does not answer as is refused, a removal ends
when the router routes the node nothing new (smg: while it is still listed as draining, before its 5 s settle
time), the node's own load then decides when its requests are done (a stream through the router still in
flight is waited for, and finishes), and a node put back while smg still drains it is added once it is gone.
One router of each kind for the module; the modules run as Ansible runs them (arguments file in, JSON out).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from tests.deploy.fleet import terminate
from tests.deploy.router import ROUTERS, router_command
from tests.deploy.runner import DEPLOY

pytestmark = pytest.mark.slow

LIBRARY = DEPLOY / "roles" / "sglang_router" / "library"
DOUBLE = DEPLOY.parent / "tests" / "doubles" / "sglang_server.py"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _module(name: str, args: dict, tmp_path) -> dict:
    """A module as Ansible runs it: one JSON file of arguments in, one JSON result on stdout."""
    path = tmp_path / f"{name}-{time.monotonic_ns()}.json"
    path.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    proc = subprocess.run(
        [sys.executable, str(LIBRARY / f"{name}.py"), str(path)], capture_output=True, text=True, timeout=120
    )
    return json.loads(proc.stdout)


def _wait(check, timeout: float = 60.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.3)


def _get(url: str):
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return json.loads(reply.read())
    except OSError:
        return None


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """Two stand-in servers on loopback (metrics on, 20 ms per forward pass)."""
    procs, urls = [], []
    for _ in range(2):
        port = _free_port()
        procs.append(
            subprocess.Popen(
                [sys.executable, str(DOUBLE), "--port", str(port), "--quiet", "--step-ms", "20", "--enable-metrics"],
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        )
        urls.append(f"http://127.0.0.1:{port}")
    try:
        for url in urls:
            _wait(lambda u=url: _get(u + "/v1/loads") is not None, what=url)
        yield urls
    finally:
        for proc in procs:
            terminate(proc)


@pytest.fixture(scope="module", params=sorted(ROUTERS))
def router(request, servers, tmp_path_factory):
    """(kind, URL) of a router of each kind in front of both servers, health checks every second."""
    kind = request.param
    port = _free_port()
    log = tmp_path_factory.mktemp(kind) / "router.log"
    with log.open("ab") as out:
        proc = subprocess.Popen(
            router_command(kind, "127.0.0.1", port, servers, 1, _free_port()),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait(
            lambda: len([w for w in (_get(url + "/workers") or {}).get("workers", []) if w["is_healthy"]]) == 2,
            what=f"{kind} listing both servers healthy ({log})",
        )
        yield kind, url
    finally:
        terminate(proc)


def test_the_router_is_told_apart_by_its_own_answers(router, tmp_path):
    kind, url = router
    listed = _module("sglang_router_worker", {"router_url": url}, tmp_path)
    assert listed["kind"] == kind and len(listed["workers"]) == 2, listed
    named = _module("sglang_router_worker", {"router_url": url, "kind": kind}, tmp_path)
    assert not named.get("failed") and named["kind"] == kind


def test_a_named_kind_the_router_does_not_answer_as_is_refused(router, tmp_path):
    kind, url = router
    other = next(k for k in ROUTERS if k != kind)
    result = _module("sglang_router_worker", {"router_url": url, "kind": other}, tmp_path)
    assert result["failed"]
    assert f"answers as {kind}, not as sglang_router_kind={other}; set sglang_router_kind to {kind}" in result["msg"]


def test_removal_then_the_nodes_own_load_then_back(router, servers, tmp_path):
    """A long stream goes through the router to the second server; the node leaves the router (smg: it is
    draining, and the module does not sit out the settle time), the drain waits for the stream, which ends
    whole; put back at once, the node is listed healthy again (smg: after its settle time ended)."""
    kind, url = router
    node = servers[1]
    streams: list[bytes] = []

    def stream():
        body = json.dumps({"text": "long", "stream": True, "sampling_params": {"max_new_tokens": 120}}).encode()
        req = urllib.request.Request(url + "/generate", data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as reply:
            streams.append(reply.read())

    loads = lambda: (_get(node + "/v1/loads") or {"loads": [{}]})["loads"][0].get("num_running_reqs", 0)  # noqa: E731
    senders = [threading.Thread(target=stream) for _ in range(2)]  # round robin: one of them reaches the node
    for sender in senders:
        sender.start()
    _wait(lambda: loads() > 0, timeout=20, what="a stream on the node")
    out = _module(
        "sglang_router_worker",
        {"router_url": url, "worker_url": node, "state": "absent", "poll_interval": 0.2, "kind": kind},
        tmp_path,
    )
    assert out["changed"] and not out.get("failed"), out
    if kind == "smg":
        assert out["worker"]["status"] == "draining" and out["waited_s"] < 5, out
    else:
        assert out["worker"] is None
    drained = _module("sglang_wait_drained", {"base_url": node, "timeout": 60, "poll_interval": 0.2}, tmp_path)
    assert drained["drained"] and drained["waited_s"] > 0, drained  # the stream was still running
    for sender in senders:
        sender.join(timeout=60)
    assert len(streams) == 2 and all(s.rstrip().endswith(b"data: [DONE]") for s in streams)
    back = _module(
        "sglang_router_worker",
        {"router_url": url, "worker_url": node, "state": "present", "poll_interval": 0.2, "timeout": 60, "kind": kind},
        tmp_path,
    )
    assert not back.get("failed") and back["worker"]["is_healthy"], back
    assert {w["url"] for w in back["workers"] if w["is_healthy"]} == set(servers)
