"""The rollout behind SGLang's routers, for real: sglang-router 0.3.2 and smg 1.13.0 (tests/deploy/router.py),
each in turn in the controller's namespace in front of the three test nodes, a bounded load with streams
(tests/deploy/loadgen.py) through it, and real ansible-playbook runs with `sglang_router_url` set.

One fleet for the module and one router per kind (KINDS; `--router-kind` picks one, and `make test` runs each kind
in a stream of its own), every test behind each kind, all of one kind first, each test leaving every node serving
and the router listing exactly the fleet, and starting from the images it needs (`_bring`: what the test before it
in file order leaves, so that in file order nothing is switched twice): a full rollout, a canary whose smoke gate
fails, a run killed mid-drain and its rerun, a rollback of that rollout, a run killed mid-switch and the rollback
after it, the control (a plain swap, which must lose requests), the router's bad inputs, a drain that does not end,
a router that stops answering before it takes the node back, a hung node, and a node lost mid-switch. The router's
retries are off (see router.py), so every request a switch cut or sent to a stopped node would count as failed.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.deploy.fleet import terminate
from tests.deploy.loadgen import LOAD_CONCURRENCY, LOAD_REQUESTS, Background
from tests.deploy.router import KINDS, ROUTED_ENV, Router, kind_port, start_router
from tests.deploy.runner import REPO, RunningPlaybook, ansible_playbook, fleet_status, write_inventory

pytestmark = pytest.mark.slow

SERVICE = "sglang-test"
HOLD_TOKENS = 300  # a direct request of about 2 s (20 ms per forward pass); two at a time are always in flight


def _urls(fleet) -> set[str]:
    return {f"http://{node.address}:30000" for node in fleet.nodes}


def _containers(fleet) -> dict[str, dict]:
    return {node.name: node.containers().get(SERVICE) for node in fleet.nodes}


@dataclass
class Routed:
    """The module's fleet, router and images, and what the tests do with them."""

    fleet: object
    router: Router
    root: Path
    images: dict

    def inventory(
        self, name: str, image: str, host_overrides: dict | None = None, router: bool = True, **overrides
    ) -> Path:
        """An inventory of the fleet for `image` (v1 or v2), with the router unless `router` is false."""
        extra = (
            {
                "sglang_router_url": self.router.url,
                "sglang_router_timeout": 20,
                "sglang_canary_bake": 0,
                "sglang_router_poll_interval": 0.5,
                "sglang_router_kind": self.router.kind,
            }
            if router
            else {}
        )
        return write_inventory(
            self.fleet,
            self.root / f"{name}.json",
            self.images[image],
            host_overrides=host_overrides,
            sglang_env=ROUTED_ENV,
            **{**extra, **overrides},
        )

    def load(self, name: str, prefix: str = "") -> Background:
        return Background(
            self.fleet, self.router.url, LOAD_REQUESTS, LOAD_CONCURRENCY, self.root / f"{name}.load.json", prefix=prefix
        )

    def under_load(self, name: str, playbook: str, inventory: Path, *args: str):
        """One playbook run with the load through the router from before it starts until it ends:
        (its Result, the load's report)."""
        load = self.load(name)
        try:
            result = ansible_playbook(self.fleet, playbook, inventory, *args)
        finally:
            report = load.result()
        return result, report

    def hold(self, node, name: str) -> Background:
        """Requests straight to `node`, not through the router (a client that bypasses it), two of about 2 s
        at a time: while this runs, the node always has one in flight, so its drain cannot end."""
        return Background(
            self.fleet,
            f"http://{node.address}:30000",
            1000,
            2,
            self.root / f"{name}.hold.json",
            max_new_tokens=HOLD_TOKENS,
        )

    def status(self, name: str) -> dict[str, dict]:
        """make fleet-status as JSON rows by host (and the table, under "__output__")."""
        report = self.root / f"{name}.status.json"
        result = ansible_playbook(
            self.fleet, "status.yml", self.inventory(name, "v1"), "-e", f"sglang_status_json={report}"
        )
        assert result.rc == 0, result.output[-4000:]
        doc = json.loads(report.read_text())
        rows = {row["host"]: row for row in doc["nodes"]}
        rows["__output__"], rows["__exit_code__"] = result.output, doc["exit_code"]
        return rows


@pytest.fixture(scope="module")
def routed(router_kind, fleet, saved_images, tmp_path_factory):
    """Every node serving (v1 where the earlier tests left none) and holding v1 and v2, node1 on v1 without
    ROUTED_ENV, and the router of this kind in front of all three. The first test's rollout switches them to
    ROUTED_ENV (node1 first, the canary)."""
    root = tmp_path_factory.mktemp("routed")
    for version in ("v1", "v2"):
        inventory = write_inventory(fleet, root / f"setup-{version}.json", saved_images[version])
        serving = all((c or {}).get("running") for c in _containers(fleet).values())
        result = ansible_playbook(fleet, "distribute.yml" if serving or version == "v2" else "deploy.yml", inventory)
        assert result.rc == 0, result.output[-4000:]
    result = ansible_playbook(fleet, "rollout.yml", root / "setup-v1.json", "--limit", "node1")
    assert result.rc == 0, result.output[-4000:]
    router = start_router(fleet, sorted(_urls(fleet)), kind=router_kind, port=kind_port(router_kind))
    try:
        yield Routed(fleet=fleet, router=router, root=root, images=saved_images)
    finally:
        router.stop()


@pytest.fixture(autouse=True)
def router_lists_the_fleet(routed):
    """Each test starts (and must end) with the router listing exactly the fleet, all healthy."""
    routed.router.reset(_urls(routed.fleet))
    yield
    routed.router.wait_for(_urls(routed.fleet))


def _no_journals(fleet) -> list[str]:
    return [p.name for node in fleet.nodes for p in node.state_dir.glob(f"{SERVICE}.*.json")]


def _watch(condition, action, done: threading.Event, poll: float = 0.2) -> threading.Thread:
    """Run `action` once `condition()` holds (checked every `poll` s until `done`), in a thread."""
    fired = threading.Event()

    def loop():
        while not done.is_set():
            if condition():
                action()
                fired.set()
                return
            time.sleep(poll)

    thread = threading.Thread(target=loop, daemon=True)
    thread.fired = fired
    thread.start()
    return thread


def _previous_image(node) -> str | None:
    return (node.containers().get(SERVICE + "-previous") or {}).get("image")


def _bring(routed, previous: str | None = None, any_env: bool = False, **images: str) -> None:
    """Give the named nodes (node name -> v1 or v2) that image with ROUTED_ENV (`any_env`: with whatever
    environment they run) and, when `previous` is given, that version as their rollback target: what the test
    before it in file order leaves (then nothing runs), switched here by rollout.yml through the router when the
    test runs alone or after another."""
    (version,) = set(images.values())
    nodes = {node.name: node for node in routed.fleet.nodes if node.name in images}
    wrong = [
        name
        for name, node in nodes.items()
        if not _runs_image(node, routed.images[version].image_id, None if any_env else ROUTED_ENV)
        or (previous and _previous_image(node) != routed.images[previous].image_id)
    ]
    if not wrong:
        return
    for step in [previous, version] if previous else [version]:
        inventory = routed.inventory(f"bring-{step}", step)
        result = ansible_playbook(routed.fleet, "rollout.yml", inventory, "--limit", ",".join(wrong))
        assert result.rc == 0, result.output[-4000:]
    routed.router.wait_for(_urls(routed.fleet))


def _kill_when(run: RunningPlaybook, condition, timeout: float = 600):
    """Kill the run (the controller dying) as soon as `condition()` holds; (its result, whether it held)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and run.proc.poll() is None:
        if condition():
            return run.kill(), True
        time.sleep(0.2)
    return run.kill(), False


def _runs_image(node, image_id: str, env: dict | None = None) -> bool:
    """Whether `node`'s service container runs `image_id`, with `env` among its environment when given."""
    proc = node.dockerd.docker(
        "inspect", "--format", "{{.Image}} {{.State.Running}} {{json .Config.Env}}", SERVICE, check=False
    )
    if proc.returncode != 0:
        return False
    image, running, environment = proc.stdout.strip().split(" ", 2)
    wanted = {f"{key}={value}" for key, value in (env or {}).items()}
    return image == image_id and running == "true" and wanted <= set(json.loads(environment))


# ------------------------------------------------------------------------------------------------ rollouts
def test_rollout_through_the_router_loses_no_request(routed):
    _bring(routed, any_env=True, node1="v1", node2="v1", node3="v1")
    fleet, v2 = routed.fleet, routed.images["v2"]
    result, report = routed.under_load("rollout", "rollout.yml", routed.inventory("rollout", "v2"))
    assert result.rc == 0, result.output[-4000:]
    assert report["failed"] == 0, report["failures"]
    assert report["requests"] > 100
    for node in fleet.nodes:
        container = node.containers()[SERVICE]
        assert container["image"] == v2.image_id and container["running"]
    # per node: out of the router, drained, stopped, started, gated on the node, back in the router
    canary = result.output[: result.output.index('== batch 1 of "Roll out"')]
    order = [
        "Take the node out of the router",
        "Let the requests in flight finish",
        "Stop the running container",
        "Start the new container",
        "Wait for /health and /health_generate",
        "Generate a few greedy tokens",
        "Add the node to the router and wait until it is healthy there",
    ]
    positions = [canary.index(f"{task}]") for task in order]
    assert positions == sorted(positions)
    assert _no_journals(fleet) == []


def _gate_script(path: Path, record: Path) -> str:
    """A smoke gate that records the new container's /generate count (its Prometheus counter) and fails."""
    path.write_text(
        "import sys, urllib.request\n"
        "text = urllib.request.urlopen(sys.argv[1] + '/metrics', timeout=10).read().decode()\n"
        "count = [l for l in text.splitlines() if l.startswith('sglang:prompt_tokens_total')]\n"
        f"open({str(record)!r}, 'w').write(count[0].rsplit(' ', 1)[1] if count else 'missing')\n"
        "print('replayssm-smoke: FAIL')\nprint('prompts   5 ok')\n"
        "print('acceptance   FAIL   0.0 under the floor 1.5')\n"
        "sys.exit(1)\n"
    )
    return f"{sys.executable} {path} {{url}}"


def test_a_canary_that_fails_its_gate_never_gets_routed_traffic(routed, tmp_path):
    _bring(routed, node1="v2", node2="v2", node3="v2")
    fleet = routed.fleet
    before = _containers(fleet)
    record = tmp_path / "canary-prompt-tokens"
    inventory = routed.inventory(
        "canary", "v1", sglang_smoke_mode="command", sglang_smoke_command=_gate_script(tmp_path / "gate.py", record)
    )
    result, report = routed.under_load("canary", "rollout.yml", inventory)
    assert result.rc != 0
    flat = " ".join(result.output.split())
    # the failing gate's own lines, not "non-zero return code"
    assert "node1: the new container failed (The smoke command passed: node1: the smoke gate `" in flat
    assert "exited with 1: replayssm-smoke: FAIL | acceptance FAIL 0.0 under the floor 1.5" in flat
    assert report["failed"] == 0, report["failures"]
    # the canary's new container had served no /generate when its gate ran: no routed request reached it
    # (a labelled counter has no sample before the first request, as in SGLang)
    assert record.read_text() in ("missing", "0.0")
    after = _containers(fleet)
    assert after["node1"]["id"] == before["node1"]["id"] and after["node1"]["running"]
    assert after["node2"] == before["node2"] and after["node3"] == before["node3"]
    failed = fleet.nodes[0].containers()[SERVICE + "-failed"]
    assert failed["image"] == routed.images["v1"].image_id and not failed["running"]
    assert routed.router.healthy_urls() == _urls(fleet)
    assert _no_journals(fleet) == []
    _rollback_after_a_run_that_changed_nothing(routed, before)


def _rollback_after_a_run_that_changed_nothing(routed, before: dict) -> None:
    """After the failed canary (a run that changed nothing, recorded as such), make rollback used to undo the
    rollout before it on every node, naming no run. It now refuses and names both runs and the flag; with the
    flag it undoes that rollout (here on node1); a rollback after that (a run newer than the one that changed
    nothing, whose record node1 keeps) undoes only it: node1 runs its container from before again."""
    fleet, v1, v2 = routed.fleet, routed.images["v1"], routed.images["v2"]
    node1 = fleet.nodes[0]
    unchanged = node1.state(SERVICE)["unchanged_run"]
    assert unchanged["outcome"] == "restored, nothing changed" and unchanged["target"] == v1.ref
    rollout_run = fleet.nodes[1].state(SERVICE)["current"]["run_id"]
    assert rollout_run < unchanged["run_id"]
    inventory = routed.inventory("canary-rollback", "v1")
    result = ansible_playbook(fleet, "rollback.yml", inventory)
    flat = " ".join(result.output.split())
    assert result.rc != 0
    assert (
        f"The last run, {unchanged['run_id']}, changed nothing: its switch of node1 to {v1.ref} failed and the "
        f"container before it was put back: restored, nothing changed. A rollback now would undo the run before "
        f"it, {rollout_run} (a deploy of node1, node2, node3)."
    ) in flat, result.output[-3000:]
    assert "make rollback ANSIBLE_ARGS='-e sglang_service_rollback_past_unchanged=true'" in flat
    assert "PLAY [Roll back]" not in result.output
    assert {n: c["id"] for n, c in _containers(fleet).items()} == {n: c["id"] for n, c in before.items()}

    result = ansible_playbook(
        fleet, "rollback.yml", inventory, "-e", "sglang_service_rollback_past_unchanged=true", "--limit", "node1"
    )
    flat = " ".join(result.output.split())
    assert result.rc == 0, result.output[-4000:]
    assert (
        f"The rollback undoes the last run, {rollout_run} (a deploy of node1), past the run(s) "
        f"{unchanged['run_id']} that changed nothing"
    ) in flat
    assert f"   node1 {v2.ref} -> {v1.ref} (ok)" in result.output
    rollback_run = node1.state(SERVICE)["current"]["run_id"]

    assert node1.state(SERVICE)["unchanged_run"] == unchanged
    result = ansible_playbook(fleet, "rollback.yml", inventory, "--limit", "node1")
    flat = " ".join(result.output.split())
    assert result.rc == 0, result.output[-4000:]
    assert f"The rollback undoes the last run, {rollback_run} (a rollback of node1)." in flat
    assert f"   node1 {v1.ref} -> {v2.ref} (ok)" in result.output
    assert {n: c["id"] for n, c in _containers(fleet).items()} == {n: c["id"] for n, c in before.items()}
    assert routed.router.healthy_urls() == _urls(fleet)


def test_a_run_killed_mid_drain_is_put_back_by_the_next_run(routed):
    """The controller dies while node2 drains (a client that bypasses the router keeps it busy): node2 is
    out of the router, its router journal says so; the rerun puts it back, then switches it and the rest."""
    _bring(routed, node1="v2", node2="v2", node3="v2")
    fleet, v1 = routed.fleet, routed.images["v1"]
    node2 = fleet.nodes[1]
    url2 = f"http://{node2.address}:30000"
    load = routed.load("mid-drain")
    hold = routed.hold(node2, "mid-drain")
    try:
        run = RunningPlaybook(fleet, "rollout.yml", routed.inventory("mid-drain", "v1"))
        killed, fired = _kill_when(run, lambda: url2 not in routed.router.workers())
        assert fired, killed.output[-3000:]
        time.sleep(1)
        assert _containers(fleet)["node2"]["image"] == routed.images["v2"].image_id  # draining, not stopped
        held = hold.result()  # the direct client goes away; what it had in flight finishes
        assert (node2.state_dir / f"{SERVICE}.unrouted.json").exists()
        result = ansible_playbook(fleet, "rollout.yml", routed.inventory("mid-drain", "v1"))
    finally:
        hold.kill()
        report = load.result()
    assert result.rc == 0, result.output[-4000:]
    assert report["failed"] == 0, report["failures"]
    assert held["failed"] == 0, held["failures"]  # the requests the drain waited for finished
    for node in fleet.nodes:
        assert node.containers()[SERVICE]["image"] == v1.image_id, node.name
    assert _no_journals(fleet) == []


def test_rollback_through_the_router_loses_no_request(routed):
    """Rolls back the whole rollout of v1, node1 included: the killed first attempt switched it, so the
    rerun found it up to date."""
    _bring(routed, previous="v2", node1="v1", node2="v1", node3="v1")
    fleet, v1, v2 = routed.fleet, routed.images["v1"], routed.images["v2"]
    result, report = routed.under_load("rollback", "rollback.yml", routed.inventory("rollback", "v1"))
    assert result.rc == 0, result.output[-4000:]
    assert report["failed"] == 0, report["failures"]
    for node in fleet.nodes:
        assert node.containers()[SERVICE]["image"] == v2.image_id, node.name
        assert f"   {node.name} {v1.ref} -> {v2.ref} (ok)" in result.output
    assert _no_journals(fleet) == []


def test_a_rollback_after_an_interrupted_deploy_undoes_only_that_deploy(routed):
    """The deploy is killed while the canary's new container starts. Rollback used to restore the canary,
    then swap every other node to its -previous (a release older than what it ran): now it restores the
    canary (from its journal, back into the router) and leaves the others alone, saying so."""
    _bring(routed, node1="v2", node2="v2", node3="v2")
    fleet, v1, v2 = routed.fleet, routed.images["v1"], routed.images["v2"]
    before = _containers(fleet)
    load = routed.load("interrupted-switch")
    try:
        run = RunningPlaybook(fleet, "rollout.yml", routed.inventory("interrupted-switch", "v1"))
        killed, fired = _kill_when(run, lambda: _runs_image(fleet.nodes[0], v1.image_id))
        assert fired, killed.output[-3000:]
        status = routed.status("interrupted-switch")
        result = ansible_playbook(fleet, "rollback.yml", routed.inventory("interrupted-switch", "v1"))
    finally:
        report = load.result()
    # fleet-status showed the interrupted canary: out of the router, its switch journal flagged
    assert status["node1"]["routed"] == "no" and status["node1"]["switch_journal"], status["node1"]
    assert "* node1: INTERRUPTED SWITCH to " + v1.ref in status["__output__"]
    assert "* node1: OUT OF THE ROUTER since" in status["__output__"]
    assert status["node2"]["routed"] == "yes" and not status["node2"]["notes"]
    assert result.rc == 0, result.output[-4000:]
    assert report["failed"] == 0, report["failures"]
    after = _containers(fleet)
    assert {name: c["id"] for name, c in after.items()} == {name: c["id"] for name, c in before.items()}
    assert all(c["image"] == v2.image_id and c["running"] for c in after.values())
    # the journal restore reads as what it did, not as a failed switch
    assert f"   node1 {v1.ref} -> {v2.ref} (undid an interrupted switch, {v2.ref} back (healthy))" in result.output
    for name in ("node2", "node3"):
        assert f"   {name} {v2.ref} -> {v2.ref} (left alone, the last run did not switch it)" in result.output
    assert "did not finish on" not in result.output
    assert _no_journals(fleet) == []


def test_control_a_plain_swap_under_the_same_load_loses_requests(routed):
    """Without the router integration the same switch loses requests: the assertions above can fail."""
    _bring(routed, node1="v2")
    result, report = routed.under_load(
        "plain", "rollout.yml", routed.inventory("plain", "v1", router=False), "--limit", "node1"
    )
    assert result.rc == 0, result.output[-4000:]
    assert report["failed"] > 0, report


# ------------------------------------------------------------------------------------------------ bad input
BAD_ROUTERS = {  # inventory overrides (ROUTER = the router's URL), setup, message
    "router does not answer": (
        {"sglang_router_url": "http://{ctl}:9"},
        None,
        "the router at http://{ctl}:9 does not answer GET /workers",
    ),
    "URL names something else": (
        {"sglang_router_url": "http://{node1}:30000"},
        None,
        "http://{node1}:30000 answered GET /workers with HTTP 404",
    ),
    "URL with a path": (
        {"sglang_router_url": "ROUTER/v1"},
        None,
        "sglang_router_url ('ROUTER/v1') and sglang_router_worker_url",
    ),
    "node the router does not know": (
        {},
        "drop node3",
        "node3: the router at ROUTER does not list http://{node3}:30000",
    ),
    "floor": (
        {"sglang_router_min_healthy": 3},
        None,
        "batch 1 (1 node(s): node1) would take 1 of the 3 healthy workers of the router at ROUTER out at once, "
        "leaving 2, below its floor sglang_router_min_healthy=3",
    ),
    "unknown router kind": (
        {"sglang_router_kind": "nginx"},
        None,
        "sglang_router_kind must be one of: auto, smg, sglang-router",  # the role's argument spec
    ),
    "router of another kind": (
        {"sglang_router_kind": "OTHER"},
        None,
        "the router at ROUTER answers as KIND, not as sglang_router_kind=OTHER",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_ROUTERS))
def test_bad_router_settings_stop_the_run_before_anything_changes(routed, case):
    overrides, setup, message = BAD_ROUTERS[case]
    fleet = routed.fleet
    names = {"ctl": fleet.controller_address, **{n.name: n.address for n in fleet.nodes}}

    def fill(text):
        other = next(kind for kind in KINDS if kind != routed.router.kind)
        return (
            text.replace("ROUTER", routed.router.url)
            .replace("KIND", routed.router.kind)
            .replace("OTHER", other)
            .format(**names)
        )

    overrides = {k: fill(v) if isinstance(v, str) else v for k, v in overrides.items()}
    if setup == "drop node3":
        routed.router.remove(f"http://{fleet.nodes[2].address}:30000")
    before = _containers(fleet)
    try:
        playbook = "deploy.yml" if case == "router does not answer" else "router_preflight.yml"
        result = ansible_playbook(fleet, playbook, routed.inventory(f"bad-{case}", "v2", **overrides))
    finally:
        routed.router.reset(_urls(fleet))
    assert result.rc != 0
    assert " ".join(fill(message).split()) in " ".join(result.output.split()), result.output[-3000:]
    assert "PLAY [Distribute the image]" not in result.output and "PLAY [Roll out]" not in result.output
    assert _containers(fleet) == before
    assert _no_journals(fleet) == []


@pytest.mark.parametrize("serial", ["[3]", '["100%"]', "3"])
def test_a_first_batch_of_every_node_is_refused_without_a_router(routed, serial):
    """The guard used to pass these ("a canary and no batch of every node"); only a router's floor stopped
    them, and without a router nothing did."""
    fleet = routed.fleet
    before = _containers(fleet)
    result = ansible_playbook(
        fleet,
        "rollout.yml",
        routed.inventory("whole", "v1", router=False),
        "-e",
        f'{{"sglang_rollout_serial": {serial}}}',
    )
    assert result.rc != 0
    flat = " ".join(result.output.split())
    assert (
        f"the first batch of SERIAL={json.dumps(json.loads(serial))} is every node of the play (3: node1, node2, "
        f"node3): every one of them would be down at once"
    ) in flat, result.output[-3000:]
    assert "SERIAL='[1,\"25%\"]'" in flat
    assert "PLAY [Roll out]" not in result.output
    assert _containers(fleet) == before


def test_a_drain_that_does_not_end_puts_the_node_back_and_stops(routed):
    _bring(routed, node1="v1")
    fleet = routed.fleet
    before = _containers(fleet)
    hold = routed.hold(fleet.nodes[0], "endless")
    try:
        result = ansible_playbook(
            fleet, "rollout.yml", routed.inventory("endless", "v2", sglang_router_drain_timeout=2), "--limit", "node1"
        )
    finally:
        held = hold.result()
    assert result.rc != 0
    flat = " ".join(result.output.split())
    drained = re.search(
        r"node1: [12] request\(s\) still in flight ([0-9.]+) s after the router stopped sending it "
        r"any \(sglang_router_drain_timeout=2\)\. Nothing was stopped",
        flat,
    )
    assert drained, result.output[-3000:]
    assert float(drained.group(1)) >= 2.0  # the last poll comes at the timeout, not one poll interval before it
    assert held["failed"] == 0
    assert _containers(fleet) == before
    assert routed.router.healthy_urls() == _urls(fleet)
    assert _no_journals(fleet) == []


def test_a_router_that_does_not_take_the_node_back_stops_the_run_and_the_next_run_puts_it_back(routed):
    """The router freezes (SIGSTOP) while node1's new container starts: the switch passes its gates on the
    node, the router does not answer the re-add; the run stops saying so, the node serves, its router
    journal stays, and the next run puts it back."""
    _bring(routed, node1="v1")
    fleet, v2 = routed.fleet, routed.images["v2"]
    url1 = f"http://{fleet.nodes[0].address}:30000"
    inventory = routed.inventory("frozen", "v2", sglang_router_timeout=5)
    done = threading.Event()
    run = RunningPlaybook(fleet, "rollout.yml", inventory, "--limit", "node1")
    watcher = _watch(
        lambda: _runs_image(fleet.nodes[0], v2.image_id), lambda: os.kill(routed.router.proc.pid, signal.SIGSTOP), done
    )
    try:
        result = run.wait(timeout=600)
    finally:
        done.set()
        os.kill(routed.router.proc.pid, signal.SIGCONT)
    assert watcher.fired.is_set(), result.output[-3000:]
    assert result.rc != 0
    flat = " ".join(result.output.split())
    assert f"node1: the node serves, but the router did not take it back: the router at {routed.router.url} " in flat
    assert "stays, so the next make deploy or make rollback puts it back first" in flat
    assert fleet.nodes[0].containers()[SERVICE]["image"] == v2.image_id
    assert url1 not in routed.router.workers()
    assert (fleet.nodes[0].state_dir / f"{SERVICE}.unrouted.json").exists()
    result = ansible_playbook(fleet, "rollout.yml", inventory, "--limit", "node1")
    assert result.rc == 0, result.output[-4000:]
    assert "node1: up to date, nothing to do" in result.output
    assert routed.router.healthy_urls() == _urls(fleet)
    assert _no_journals(fleet) == []


FOREIGN_PORT = 30200  # a server of the test double in the controller's namespace: a worker the inventory lacks


def test_a_journaled_node_goes_back_into_the_router_only_after_its_gates(routed, tmp_path):
    """node1 is out of the router with its router journal, as a run killed before the gates of a container it
    started leaves it, and answers /health; its smoke gate fails. The next run used to put it back after one
    /health 200; now it runs the gates a switch runs and leaves it out, saying why. Then, with it back,
    fleet-status exits 0 and lists a worker the router has that the inventory does not."""
    _bring(routed, node1="v2")
    fleet = routed.fleet
    node1 = fleet.nodes[0]
    url1 = f"http://{node1.address}:30000"
    routed.router.remove(url1)
    routed.router.wait_for(_urls(fleet) - {url1})
    journal = node1.state_dir / f"{SERVICE}.unrouted.json"
    journal.write_text(
        json.dumps(
            {
                "router_url": routed.router.url,
                "worker_url": url1,
                "serving_id": "",
                "taken_out_at": "2026-01-01T00:00:00Z",
            }
        )
    )
    failing = routed.inventory(
        "journaled",
        "v2",
        sglang_smoke_mode="command",
        sglang_smoke_command=_gate_script(tmp_path / "gate.py", tmp_path / "count"),
    )
    result = ansible_playbook(fleet, "rollout.yml", failing, "--limit", "node1")
    assert result.rc == 0, result.output[-4000:]
    flat = " ".join(result.output.split())
    assert (
        f"node1: taken out of the router at {routed.router.url} by these playbooks, it stays out: it failed its "
        f"gates (The smoke command passed: node1: the smoke gate `"
    ) in flat, result.output[-3000:]
    assert "acceptance FAIL 0.0 under the floor 1.5" in flat
    assert url1 not in routed.router.workers() and journal.exists()
    # a run whose gates pass puts such a node back: the rerun after a run killed mid-drain, above
    journal.unlink()
    routed.router.reset(_urls(fleet))

    foreign_url = f"http://{fleet.controller_address}:{FOREIGN_PORT}"
    foreign = subprocess.Popen(
        fleet.netns_cmd(
            sys.executable,
            str(REPO / "tests" / "doubles" / "sglang_server.py"),
            "--host",
            fleet.controller_address,
            "--port",
            str(FOREIGN_PORT),
        ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    report = tmp_path / "status.json"
    try:
        routed.router.add(foreign_url)
        routed.router.wait_for(_urls(fleet) | {foreign_url})
        status = fleet_status(fleet, routed.inventory("journaled-status", "v2"), "-e", f"sglang_status_json={report}")
    finally:
        routed.router.remove(foreign_url)
        terminate(foreign)
    assert status.rc == 0, status.output[-4000:]
    assert "fleet-status: 0, every node serving and routed" in status.output
    assert f"* router {routed.router.url} also routes to {foreign_url} (healthy): not ours" in status.output
    doc = json.loads(report.read_text())
    assert doc["exit_code"] == 0 and doc["flagged"] == []
    assert doc["foreign_workers"] == [{"router": routed.router.url, "url": foreign_url, "is_healthy": True}]


def test_a_hung_node_is_restarted_not_called_up_to_date(routed):
    """node3's container is paused (running, not answering). The rerun used to say "up to date"; now it is
    restarted in place (same container, the rollback target kept) and must pass its gates."""
    _bring(routed, previous="v1", node3="v2")
    fleet = routed.fleet
    node3 = fleet.nodes[2]
    before = node3.containers()
    node3.dockerd.docker("pause", SERVICE)
    try:
        result = ansible_playbook(fleet, "rollout.yml", routed.inventory("hung", "v2"), "--limit", "node3")
    finally:
        node3.dockerd.docker("unpause", SERVICE, check=False)
    assert result.rc == 0, result.output[-4000:]
    assert "node3: runs " in result.output and "with these settings but does not serve" in result.output
    assert "(hung: answers neither /health nor /v1/loads within 5 s" in " ".join(result.output.split())
    assert "up to date, nothing to do" not in result.output
    assert "   node3 " in result.output and "(restarted)" in result.output
    after = node3.containers()
    assert after[SERVICE]["id"] == before[SERVICE]["id"] and after[SERVICE]["running"]
    assert after[SERVICE + "-previous"]["id"] == before[SERVICE + "-previous"]["id"]
    assert routed.router.healthy_urls() == _urls(fleet)


# the frozen node's drain and stop timeouts: the switch must take less than either, and a switch that waits out
# neither takes 40-90 s on 2 cores shared with the other test streams
FROZEN_WAIT = 240


def test_a_frozen_node_on_a_new_spec_is_called_hung_and_switched_without_a_drain(routed, tmp_path):
    """node2's server is SIGSTOPped, then a new image rolls out to it. The switch used to take it out of the
    router, wait the whole drain timeout for a load it never answered and stop with "-1 request(s) still in
    flight"; now the probe names it hung at once, no drain waits, it is stopped without SGLang's shutdown
    grace and switched, and the batch line says it was down. While it is frozen the router lists it unhealthy:
    the floor refusal names it, and fleet-status exits 1."""
    _bring(routed, node2="v2")
    fleet, v1, v2 = routed.fleet, routed.images["v1"], routed.images["v2"]
    node2 = fleet.nodes[1]
    url2 = f"http://{node2.address}:30000"
    report = tmp_path / "status.json"
    before = node2.containers()
    node2.dockerd.docker("kill", "--signal", "STOP", SERVICE)
    try:
        status = fleet_status(fleet, routed.inventory("frozen-status", "v1"), "-e", f"sglang_status_json={report}")
        deadline = time.monotonic() + 120  # until the router's own health checks have seen it
        while url2 in routed.router.healthy_urls() and time.monotonic() < deadline:
            time.sleep(1)
        floor = ansible_playbook(
            fleet, "router_preflight.yml", routed.inventory("frozen-floor", "v1", sglang_router_min_healthy=3)
        )
        result = ansible_playbook(
            fleet,
            "rollout.yml",
            routed.inventory(
                "frozen", "v1", sglang_router_drain_timeout=FROZEN_WAIT, sglang_service_stop_timeout=FROZEN_WAIT
            ),
            "--limit",
            "node2",
        )
    finally:
        for name in (SERVICE, SERVICE + "-previous"):
            node2.dockerd.docker("kill", "--signal", "CONT", name, check=False)
    assert floor.rc != 0
    assert f"leaving 1, below its floor sglang_router_min_healthy=3 (the router lists {url2} as unhealthy)" in " ".join(
        floor.output.split()
    ), floor.output[-3000:]
    assert status.rc == 1, status.output[-3000:]
    assert re.search(r"fleet-status: 1, \d+ thing\(s\) flagged on node2\b", status.output), status.output[-3000:]
    doc = json.loads(report.read_text())
    assert doc["exit_code"] == 1 and doc["flagged"] and all(f.startswith("node2: ") for f in doc["flagged"])
    assert result.rc == 0, result.output[-4000:]
    flat = " ".join(result.output.split())
    assert (f"node2: switching {v2.ref} -> {v1.ref} (hung: answers neither /health nor /v1/loads within 5 s") in flat
    assert "HUNG, so no drain waits for it and it is stopped at once" in flat
    assert re.search(r'== batch 1 of "Roll out": node2 \S+ -> \S+ \(ok, was down before its switch: hung', flat)
    assert '"Roll out" did not finish on' not in result.output
    took = re.search(r'== "Roll out" took ([0-9.]+) s', result.output)
    assert float(took.group(1)) < FROZEN_WAIT  # neither the drain timeout nor the stop timeout was waited out
    after = node2.containers()
    assert after[SERVICE]["image"] == v1.image_id and after[SERVICE]["running"]
    assert after[SERVICE + "-previous"]["id"] == before[SERVICE]["id"]  # the frozen one is the rollback target
    assert routed.router.healthy_urls() == _urls(fleet)
    assert _no_journals(fleet) == []


def test_a_node_lost_mid_switch_says_so_and_status_lists_every_node(routed):
    """node3's sshd stops while its new container starts: the batch line says the node was lost, and why
    (it used to show only FAILED); fleet-status then lists every node, node3 unreachable and node2 with
    its Docker daemon down (both used to be dropped); the rerun puts node3 back and finishes."""
    _bring(routed, node3="v2")
    fleet, v1 = routed.fleet, routed.images["v1"]
    node2, node3 = fleet.nodes[1], fleet.nodes[2]
    done = threading.Event()
    run = RunningPlaybook(fleet, "rollout.yml", routed.inventory("lost", "v1"), "--limit", "node3")
    watcher = _watch(lambda: _runs_image(node3, v1.image_id), node3.stop_sshd, done)
    try:
        result = run.wait(timeout=600)
        done.set()
        node2.dockerd.kill()
        try:
            status = routed.status("lost")
        finally:
            node2.dockerd.start_again()
            node2.dockerd.docker("start", SERVICE)  # a daemon that crashed does not start it again by itself
    finally:
        done.set()
        if node3.sshd is None:
            node3.start_sshd()
            fleet.wait_for_ssh(node3)
    assert watcher.fired.is_set(), result.output[-3000:]
    assert result.rc != 0
    assert re.search(
        r"== batch 1 of \"Roll out\": node3 \S+ -> \S+ \(LOST mid-switch at 'switching': .+; its "
        r"journals name what to put back",
        result.output,
    ), result.output[-3000:]
    assert set(status) - {"__output__", "__exit_code__"} == {"node1", "node2", "node3"}
    assert status["__exit_code__"] == 1  # something flagged
    assert not status["node3"]["reachable"] and status["node3"]["notes"][0].startswith("UNREACHABLE over SSH")
    assert any(note.startswith("DOCKER does not answer") for note in status["node2"]["notes"]), status["node2"]
    assert status["node1"]["routed"] == "yes" and not status["node1"]["notes"]
    assert re.search(r"^\s+node3 \*\s", status["__output__"], re.M)
    result = ansible_playbook(fleet, "rollout.yml", routed.inventory("lost", "v1"), "--limit", "node3")
    assert result.rc == 0, result.output[-4000:]
    assert node3.containers()[SERVICE]["image"] == v1.image_id
    assert _no_journals(fleet) == []
