"""Real Ansible over SSH into three test nodes, each with its own Docker daemon, rolling out the stand-in
server image (tests/deploy/standin_image.py) with deploy/playbooks.

Every test names the fleet's state it starts from (`fleet_state` marks, built by tests/deploy/fleet_state.py
only where the fleet lacks it: one fleet per session, shared with the other deploy modules): a clean rollout,
a rerun that changes nothing, a preflight failure that stops before any restart, a node whose new container is
unhealthy (rolled back, no later batch touched), an on-demand rollback (also one interrupted between the
renames of its exchange), an image ID mismatch after loading a tarball, the status report, a new
container that exits (the wait stops at once, its log is kept), a distribute whose copy dies half-way on
one node (every staged tarball and partial copy removed), and a node whose Docker daemon is killed during
its batch (the last good container stays the rollback target through the rerun and the rollback, and a
rollback that stops names the nodes it did not reach).
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time

import pytest

from tests.deploy.fleet import A100, H100, H100_OLD_DRIVER, H200
from tests.deploy.fleet_state import NodeShape, State, bring
from tests.deploy.runner import ansible_playbook, write_inventory

pytestmark = pytest.mark.slow

SERVICE = "sglang-test"
PREVIOUS = SERVICE + "-previous"


ON_V1 = NodeShape({SERVICE: ("v1", True)}, ("v1",), ("v1", None))


def _node1(shape: NodeShape):
    return lambda name: shape if name == "node1" else ON_V1


@pytest.fixture(autouse=True)
def starting_state(request, fleet, saved_images, tmp_path_factory):
    """Bring the fleet to the test's `fleet_state`: wiped ("empty"), v1 everywhere after a first deploy ("v1"),
    whatever node1 runs beside that ("v1 on node2 and node3"), node1 switched to v2 ("v2 on node1"), then node1
    rolled back to v1 ("node1 rolled back"). The builds roll out in two batches (the canary, then the rest)."""
    root = tmp_path_factory.mktemp("state")

    def playbook(name: str, version: str, *args: str) -> None:
        inventory = write_inventory(fleet, root / f"{version}.json", saved_images[version])
        result = ansible_playbook(fleet, name, inventory, "-e", '{"sglang_rollout_serial": [1, 2]}', *args)
        assert result.rc == 0, result.output[-4000:]

    states = {
        "empty": State(shape=lambda name: NodeShape({})),
        "v1": State(lambda name: ON_V1, lambda: playbook("deploy.yml", "v1"), "empty"),
        "v1 on node2 and node3": State(lambda name: None if name == "node1" else ON_V1, parent="v1"),
        "v2 on node1": State(
            _node1(NodeShape({SERVICE: ("v2", True), PREVIOUS: ("v1", False)}, ("v1", "v2"), ("v2", "v1"))),
            lambda: playbook("deploy.yml", "v2", "--limit", "node1"),
            "v1",
        ),
        "node1 rolled back": State(
            _node1(NodeShape({SERVICE: ("v1", True), PREVIOUS: ("v2", False)}, ("v1", "v2"), ("v1", "v2"))),
            lambda: playbook("rollback.yml", "v2", "--limit", "node1"),
            "v2 on node1",
        ),
    }
    bring(fleet, saved_images, SERVICE, states, request.node.get_closest_marker("fleet_state").args[0])


def _switch_order(output: str) -> list[str]:
    """Hosts in the order the rollout switched them (from the role's report line)."""
    return re.findall(r"(node\d): switching ", output)


def _running(fleet) -> dict[str, dict]:
    return {node.name: node.containers().get(SERVICE) for node in fleet.nodes}


@pytest.mark.fleet_state("empty")
def test_clean_rollout_canary_first(fleet, saved_images, tmp_path):
    v1 = saved_images["v1"]
    # the smoke gate is the real smoke suite (smoke_tests/, `replayssm-smoke`) against each new server
    reports = tmp_path / "smoke-report"
    inventory = write_inventory(
        fleet,
        tmp_path / "inv.json",
        v1,
        sglang_smoke_mode="command",
        sglang_smoke_command=f"{sys.executable} -m replayssm_smoke.cli --target {{url}} --out {{out}} --quiet",
        sglang_smoke_report_dir=f"{reports}/{{{{ inventory_hostname }}}}",
    )
    result = ansible_playbook(fleet, "deploy.yml", inventory)
    assert result.rc == 0, result.output[-4000:]
    for node in fleet.nodes:
        report = json.loads((reports / node.name / "report.json").read_text())
        assert report["passed"] and report["target"]["url"] == f"http://{node.address}:30000"
    # canary of one, then batches of 25% (one node each with three nodes), in inventory order
    assert _switch_order(result.output) == ["node1", "node2", "node3"]
    assert result.output.count("PLAY [Roll out]") == 3
    # one line per batch with the image names (tags), elapsed time per play
    for batch, node in enumerate(("node1", "node2", "node3"), 1):
        assert f'== batch {batch} of "Roll out": {node} nothing -> {v1.ref} (ok)' in result.output
    assert re.search(r'== "Roll out" took [0-9.]+ s \(3 batches\)', result.output)
    assert re.search(r'== "Distribute the image" took [0-9.]+ s', result.output)
    for node in fleet.nodes:
        container = node.containers()[SERVICE]
        assert container["running"] and container["image"] == v1.image_id
        # the idempotence label and the image reference, in the image labels' namespace
        assert re.fullmatch(r"[0-9a-f]{64}", container["labels"]["org.replayssm.spec"])
        assert container["labels"]["org.replayssm.image-ref"] == v1.ref
        state = node.state(SERVICE)
        assert state["current"]["image_id"] == v1.image_id
        assert "--enable-linear-replayssm-spec" in state["current"]["argv"]
        assert state["current"]["argv"][:3] == ["python3", "-m", "sglang.launch_server"]
        assert state["previous"] is None
    started = [fleet.nodes[i].containers()[SERVICE]["started"] for i in range(3)]
    assert started == sorted(started)


@pytest.mark.fleet_state("v1")
def test_rerun_changes_nothing(fleet, saved_images, tmp_path):
    before = _running(fleet)
    inventory = write_inventory(fleet, tmp_path / "inv.json", saved_images["v1"])
    result = ansible_playbook(fleet, "deploy.yml", inventory)
    assert result.rc == 0, result.output[-4000:]
    assert {host: counts["changed"] for host, counts in result.recap.items()} == {"node1": 0, "node2": 0, "node3": 0}
    assert "up to date, nothing to do" in result.output
    assert _running(fleet) == before


@pytest.mark.fleet_state("v1")
def test_preflight_wrong_gpu_stops_before_any_restart(fleet, saved_images, tmp_path):
    before = _running(fleet)
    fleet.nodes[1].set_gpus(A100, A100)
    try:
        inventory = write_inventory(fleet, tmp_path / "inv.json", saved_images["v2"])
        result = ansible_playbook(fleet, "deploy.yml", inventory)
    finally:
        fleet.nodes[1].set_gpus(H200, H200)
    assert result.rc != 0
    assert "node2: this node has NVIDIA A100-SXM4-80GB" in result.output
    assert "compute capability 9.0" in result.output
    assert "PLAY [Distribute the image]" not in result.output
    assert "PLAY [Roll out]" not in result.output
    assert _running(fleet) == before
    for node in fleet.nodes:  # nothing was even distributed
        assert node.dockerd.docker("image", "inspect", saved_images["v2"].image_id, check=False).returncode != 0


NO_DRIVER = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the "
    "latest NVIDIA driver is installed and running."
)
BAD_NODES = {  # inventory overrides, extra hosts, node3's GPUs, message
    "wrong python": (
        {"node3": {"ansible_python_interpreter": "/usr/bin/python2.7"}},
        {},
        None,
        "node3: /usr/bin/python2.7 is missing or broken",
    ),
    "port in use": (
        {"node3": {"sglang_container_name": "other-service"}},
        {},
        None,
        "node3: port 30000 is in use by something other than the other-service container",
    ),
    "unreachable": ({}, {"ghost": {"ansible_host": "GHOST"}}, None, "UNREACHABLE"),
    "old driver": (
        {},
        {},
        [H100_OLD_DRIVER, H100_OLD_DRIVER],
        "node3: NVIDIA driver 575.51.03 is below 580.65.06, the minimum for the image's cu130 lane",
    ),
    "too few GPUs": ({"node3": {"sglang_tp_size": 4}}, {}, None, "node3: sglang_tp_size is 4 but this node has 2 GPUs"),
    "driver not loaded": ({}, {}, NO_DRIVER, "node3: `{smi} --query-gpu=...` failed (exit 9: " + NO_DRIVER),
}


@pytest.mark.fleet_state("v1")
@pytest.mark.parametrize("case", sorted(BAD_NODES))
def test_bad_node_stops_the_preflight(fleet, saved_images, tmp_path, case):
    host_overrides, extra_hosts, gpus, message = BAD_NODES[case]
    message = message.replace("{smi}", str(fleet.nodes[2].bin_dir / "nvidia-smi"))
    if gpus == NO_DRIVER:
        fleet.nodes[2].break_nvidia_smi(NO_DRIVER)
    elif gpus:
        fleet.nodes[2].set_gpus(*gpus)
    for host in extra_hosts.values():  # an address on the test bridge that no node has
        host["ansible_host"] = fleet.nodes[0].address.rsplit(".", 1)[0] + ".99"
        host.update({k: v for k, v in fleet.nodes[0].inventory_vars().items() if k != "ansible_host"})
    before = _running(fleet)
    inventory = write_inventory(
        fleet, tmp_path / "inv.json", saved_images["v2"], host_overrides=host_overrides, extra_hosts=extra_hosts
    )
    try:
        result = ansible_playbook(fleet, "deploy.yml", inventory, "-e", "ansible_ssh_timeout=3")
    finally:
        fleet.nodes[2].set_gpus(H100, H100)
    assert result.rc != 0
    assert " ".join(message.split()) in " ".join(result.output.split()), result.output[-3000:]
    assert "PLAY [Distribute the image]" not in result.output
    assert _running(fleet) == before


@pytest.mark.fleet_state("v1")
def test_a_node_whose_shell_start_up_prints_passes_the_preflight(fleet, saved_images, tmp_path):
    """The Python probe runs through the login shell on a terminal: lines a node's ~/.bashrc prints (a
    banner, a version manager's warning on stderr) come before the probe's own."""
    bashrc = fleet.nodes[2].root / "home" / ".bashrc"
    bashrc.write_text("echo 'Welcome to node3'\necho 'pyenv: cannot rehash' >&2\n")
    try:
        inventory = write_inventory(fleet, tmp_path / "inv.json", saved_images["v2"])
        result = ansible_playbook(fleet, "preflight.yml", inventory, "--limit", "node3")
    finally:
        bashrc.unlink()
    assert result.rc == 0, result.output[-3000:]
    assert result.recap["node3"]["failed"] == 0


@pytest.mark.fleet_state("v1")
def test_preflight_checks_space_where_the_tarball_is_staged(fleet, saved_images, tmp_path):
    """A (sparse) 8 TiB tarball: more than any test node's staging folder holds."""
    huge = tmp_path / "huge.tar.gz"
    with huge.open("wb") as fh:
        fh.truncate(8 << 40)
    before = _running(fleet)
    inventory = write_inventory(fleet, tmp_path / "inv.json", saved_images["v2"], sglang_image_tarball=str(huge))
    result = ansible_playbook(fleet, "preflight.yml", inventory)
    assert result.rc != 0
    flat = " ".join(result.output.split())
    stage = fleet.nodes[0].root / "stage"
    assert re.search(
        rf"node1: only [0-9.]+ MiB free at {re.escape(str(stage))}; staging huge.tar.gz needs "
        r"[0-9.]+ MiB",
        flat,
    ), result.output[-3000:]
    assert _running(fleet) == before


@pytest.mark.fleet_state("v1")
def test_tarball_with_wrong_image_id_is_refused(fleet, saved_images, tmp_path):
    v2 = saved_images["v2"]
    before = _running(fleet)
    wrong_id = "sha256:" + "0" * 64
    inventory = write_inventory(fleet, tmp_path / "inv.json", v2, sglang_image_id=wrong_id)
    result = ansible_playbook(fleet, "deploy.yml", inventory, "--limit", "node3")
    assert result.rc != 0
    assert f"loaded as {v2.image_id}, not the expected {wrong_id}; refused" in result.output
    assert "PLAY [Roll out]" not in result.output
    assert _running(fleet) == before
    # the wrongly loaded image was removed again, and the staged tarball too
    assert fleet.nodes[2].dockerd.docker("image", "inspect", v2.image_id, check=False).returncode != 0
    assert not list((fleet.nodes[2].root / "stage").glob("*.tar*"))


@pytest.mark.fleet_state("v1")
def test_deploy_smoke_checks_every_node_and_fails_on_a_broken_one(fleet, saved_images, tmp_path):
    inventory = write_inventory(fleet, tmp_path / "inv.json", saved_images["v1"], sglang_health_retries=2)
    before = _running(fleet)
    result = ansible_playbook(fleet, "smoke.yml", inventory)
    assert result.rc == 0, result.output[-4000:]
    assert {host: counts["failed"] for host, counts in result.recap.items()} == {"node1": 0, "node2": 0, "node3": 0}
    fleet.nodes[2].dockerd.docker("stop", "-t", "1", SERVICE)
    try:
        result = ansible_playbook(fleet, "smoke.yml", inventory)
    finally:
        fleet.nodes[2].dockerd.docker("start", SERVICE)
    assert result.rc != 0
    assert result.recap["node3"]["failed"] == 1 and result.recap["node1"]["failed"] == 0
    assert _running(fleet)["node1"] == before["node1"]


@pytest.mark.fleet_state("v2 on node1")
def test_rollback_brings_back_the_previous_container(fleet, saved_images, tmp_path):
    v1, v2 = saved_images["v1"], saved_images["v2"]
    inventory = write_inventory(fleet, tmp_path / "inv.json", v2)
    result = ansible_playbook(fleet, "rollback.yml", inventory, "--limit", "node1")
    assert result.rc == 0, result.output[-4000:]
    containers = fleet.nodes[0].containers()
    assert containers[SERVICE]["image"] == v1.image_id and containers[SERVICE]["running"]
    assert containers[SERVICE + "-previous"]["image"] == v2.image_id
    assert not containers[SERVICE + "-previous"]["running"]
    state = fleet.nodes[0].state(SERVICE)
    assert state["current"]["image_id"] == v1.image_id and state["previous"]["image_id"] == v2.image_id

    # a rollback whose gate fails swaps back: node1 keeps running the same v1 container
    before = fleet.nodes[0].containers()
    failing = write_inventory(
        fleet, tmp_path / "failing.json", v2, sglang_smoke_mode="command", sglang_smoke_command="/bin/false {url}"
    )
    result = ansible_playbook(fleet, "rollback.yml", failing, "--limit", "node1")
    assert result.rc != 0
    assert "node1: rollback failed (The smoke command passed: node1: the smoke gate `/bin/false" in result.output
    assert "swapped back to the container that ran before (healthy)" in " ".join(result.output.split())
    after = fleet.nodes[0].containers()
    assert {name: (c["id"], c["image"], c["running"]) for name, c in after.items()} == {
        name: (c["id"], c["image"], c["running"]) for name, c in before.items()
    }
    assert fleet.nodes[0].state(SERVICE)["current"]["image_id"] == v1.image_id

    # a node that was never switched has nothing to roll back to: a clear refusal, nothing changed
    before = fleet.nodes[2].containers()
    result = ansible_playbook(fleet, "rollback.yml", inventory, "--limit", "node3")
    assert result.rc != 0
    assert "node3: no sglang-test-previous container to roll back to" in result.output
    assert fleet.nodes[2].containers() == before


def _interrupt_exchange(node, after_renames: bool) -> None:
    """Leave node's containers as a rollback's exchange (swap.yml) interrupted there would: its journal
    written, the service container stopped and renamed to -swap, and, when `after_renames`, every
    rename done and the new one started, but the state file not yet rewritten."""
    before = node.containers()
    node.state_dir.joinpath(f"{SERVICE}.swapping.json").write_text(
        json.dumps({"serving_id": before[SERVICE]["id"], "previous_id": before[SERVICE + "-previous"]["id"]})
    )
    node.dockerd.docker("stop", "-t", "1", SERVICE)
    node.dockerd.docker("rename", SERVICE, SERVICE + "-swap")
    if after_renames:
        node.dockerd.docker("rename", SERVICE + "-previous", SERVICE)
        node.dockerd.docker("rename", SERVICE + "-swap", SERVICE + "-previous")
        node.dockerd.docker("start", SERVICE)


@pytest.mark.fleet_state("node1 rolled back")
@pytest.mark.parametrize("after_renames", [False, True], ids=["after-the-first-rename", "before-the-state-file"])
def test_a_rollback_interrupted_mid_exchange_loses_no_container(fleet, saved_images, tmp_path, after_renames):
    """Without the exchange's journal the rerun found no <name> (or the two names swapped against the
    state file), rolled back from there and left the serving container orphaned as -swap (or rolled
    the wrong way); now the names are put back first, the rollback runs once, a second one rolls forward."""
    node = fleet.nodes[0]
    inventory = write_inventory(fleet, tmp_path / "inv.json", saved_images["v2"])
    before = node.containers()
    serving, kept = before[SERVICE], before[SERVICE + "-previous"]
    _interrupt_exchange(node, after_renames)
    result = ansible_playbook(fleet, "rollback.yml", inventory, "--limit", "node1")
    assert result.rc == 0, result.output[-4000:]
    assert (
        "node1: an earlier rollback was interrupted while exchanging sglang-test and sglang-test-previous; "
        "both containers have their names from before it again"
    ) in " ".join(result.output.split())
    after = node.containers()
    assert set(after) == set(before) and SERVICE + "-swap" not in after
    assert after[SERVICE]["id"] == kept["id"] and after[SERVICE]["running"]
    assert after[SERVICE + "-previous"]["id"] == serving["id"] and not after[SERVICE + "-previous"]["running"]
    assert node.state(SERVICE)["current"]["container_id"] == kept["id"]
    assert not node.state_dir.joinpath(f"{SERVICE}.swapping.json").exists()
    result = ansible_playbook(fleet, "rollback.yml", inventory, "--limit", "node1")
    assert result.rc == 0, result.output[-4000:]
    again = node.containers()
    assert again[SERVICE]["id"] == serving["id"] and again[SERVICE]["running"]
    assert again[SERVICE + "-previous"]["id"] == kept["id"]


@pytest.mark.fleet_state("node1 rolled back")
def test_an_exchange_journal_naming_a_gone_container_changes_nothing_and_says_so(fleet, saved_images, tmp_path):
    node = fleet.nodes[0]
    inventory = write_inventory(fleet, tmp_path / "inv.json", saved_images["v2"])
    before = node.containers()
    journal = node.state_dir / f"{SERVICE}.swapping.json"
    journal.write_text(json.dumps({"serving_id": before[SERVICE]["id"], "previous_id": "0" * 64}))
    try:
        result = ansible_playbook(fleet, "rollback.yml", inventory, "--limit", "node1")
        kept = journal.exists()
    finally:
        journal.unlink(missing_ok=True)
    assert result.rc != 0
    flat = " ".join(result.output.split())
    assert "names containers that are gone (000000000000), so their names cannot be put back" in flat
    assert "remove the journal and rerun" in flat
    assert kept and node.containers() == before


@pytest.mark.fleet_state("node1 rolled back")
def test_status_reports_every_node(fleet, saved_images, tmp_path):
    v1 = saved_images["v1"]
    inventory = write_inventory(fleet, tmp_path / "inv.json", v1)
    report = tmp_path / "status.json"
    result = ansible_playbook(fleet, "status.yml", inventory, "-e", f"sglang_status_json={report}")
    assert result.rc == 0, result.output[-4000:]
    table = [line for line in result.output.splitlines() if re.match(r"\s+(HOST\s+SERVICE|node\d\s)", line)]
    assert re.search(r"HOST\s+SERVICE\s+PORT\s+RUNNING\s+HEALTHY", table[0]) and len(table) == 8
    assert re.search(r"HOST\s+SERVICE\s+FOLD\s+SELF-CHECK", table[4])  # the second table: what each node serves with
    assert max(map(len, table)) <= 120
    rows = {row["host"]: row for row in json.loads(report.read_text())["nodes"]}
    assert set(rows) == {"node1", "node2", "node3"}
    for row in rows.values():
        assert row["running"] and row["healthy"] and row["image_id"] == v1.image_id
        assert row["matches_state"]
    assert rows["node1"]["previous_image_id"] == saved_images["v2"].image_id
    assert rows["node3"]["previous_image_id"] == ""


@pytest.mark.fleet_state("node1 rolled back")
def test_failed_smoke_gate_restores_the_node_and_keeps_its_rollback_target(fleet, saved_images, tmp_path):
    v1, v2 = saved_images["v1"], saved_images["v2"]
    before = fleet.nodes[0].containers()
    inventory = write_inventory(
        fleet, tmp_path / "inv.json", v2, sglang_smoke_mode="command", sglang_smoke_command="/bin/false --target {url}"
    )
    result = ansible_playbook(fleet, "rollout.yml", inventory, "--limit", "node1")
    assert result.rc != 0
    assert (
        "node1: the new container failed (The smoke command passed: node1: the smoke gate `/bin/false" in result.output
    )
    after = fleet.nodes[0].containers()
    assert after[SERVICE]["id"] == before[SERVICE]["id"] and after[SERVICE]["running"]
    assert after[SERVICE]["image"] == v1.image_id
    # the rollback target from before the failed attempt is still there, the failed one is kept stopped
    assert after[SERVICE + "-previous"]["id"] == before[SERVICE + "-previous"]["id"]
    assert set(after) == {SERVICE, SERVICE + "-previous", SERVICE + "-failed"}
    assert after[SERVICE + "-failed"]["image"] == v2.image_id and not after[SERVICE + "-failed"]["running"]
    assert "kept, stopped, as sglang-test-failed" in " ".join(result.output.split())


@pytest.mark.fleet_state("v1 on node2 and node3")
def test_unhealthy_new_container_is_rolled_back_and_stops_the_rollout(fleet, saved_images, tmp_path):
    v1, v2 = saved_images["v1"], saved_images["v2"]
    before = _running(fleet)
    inventory = write_inventory(
        fleet,
        tmp_path / "inv.json",
        v2,
        host_overrides={"node2": {"sglang_extra_args": ["--unhealthy"]}},
        sglang_health_retries=4,
    )
    result = ansible_playbook(fleet, "deploy.yml", inventory)
    assert result.rc != 0
    assert _switch_order(result.output) == ["node1", "node2"]
    assert "node2: the new container failed" in result.output
    assert "Restored the previous container (image " + v1.image_id + "), healthy again." in result.output
    after = _running(fleet)
    # the canary took v2
    assert after["node1"]["image"] == v2.image_id and after["node1"]["running"]
    # node2 runs its old container again: same container, v1, healthy; its state file still says v1
    assert after["node2"]["id"] == before["node2"]["id"] and after["node2"]["image"] == v1.image_id
    assert after["node2"]["running"]
    assert fleet.nodes[1].state(SERVICE)["current"]["image_id"] == v1.image_id
    assert "sglang-test-previous" not in fleet.nodes[1].containers()
    # node3 (the next batch) was never restarted: same container, same start time, same state file
    assert after["node3"] == before["node3"]
    assert fleet.nodes[2].state(SERVICE)["current"]["image_id"] == v1.image_id


@pytest.mark.fleet_state("v1")
def test_dead_new_container_stops_the_wait_at_once_and_keeps_its_log(fleet, saved_images, tmp_path):
    """The new container exits at start: with 600 polls 1 s apart the old wait ran 10 minutes (the run's
    timeout here is 5); now it stops at the exit, names the exit code and shows the log tail."""
    v1, v2 = saved_images["v1"], saved_images["v2"]
    before = fleet.nodes[0].containers()
    inventory = write_inventory(
        fleet,
        tmp_path / "inv.json",
        v2,
        host_overrides={"node1": {"sglang_extra_args": ["--exit-code", "3"]}},
        sglang_health_retries=600,
    )
    result = ansible_playbook(fleet, "deploy.yml", inventory, "--limit", "node1", timeout=300)
    assert result.rc != 0
    flat = " ".join(result.output.split())
    assert "node1: the new container failed (Wait for /health and /health_generate: container sglang-test " in flat
    assert "after exiting with code 3" in flat or "exited with code 3" in flat
    assert "loading the model failed (asked by --exit-code)" in flat  # the log tail
    assert "FAILED - RETRYING" not in result.output
    after = fleet.nodes[0].containers()
    assert after[SERVICE]["id"] == before[SERVICE]["id"] and after[SERVICE]["running"]
    previous = SERVICE + "-previous"
    assert (after.get(previous) or {}).get("id") == (before.get(previous) or {}).get("id")
    failed = after[SERVICE + "-failed"]
    assert failed["image"] == v2.image_id and not failed["running"]
    logs = fleet.nodes[0].dockerd.docker("logs", SERVICE + "-failed")
    assert "loading the model failed" in logs.stdout + logs.stderr
    assert fleet.nodes[0].state(SERVICE)["current"]["image_id"] == v1.image_id


# node3's local rsync (`ansible_rsync_path`): the real rsync, killed mid-file as when the connection dies
# mid-copy. It passes on only the first `limit` bytes of the sender's stream (the tarball is gzip, so
# compression does not shrink it), waits until the temporary file holds some of them and SIGKILLs rsync;
# then it waits (bounded) until the receiver has kept what arrived (--partial, in .~tmp~/ under
# --delay-updates), and exits 12 as rsync does. Merely slowing the copy raced it: rsync writes its temporary
# file beside the tarball, not in .~tmp~/, and an 80 MB copy between namespaces ends in well under a second.
DYING_RSYNC = """#!{python}
import os, pathlib, select, subprocess, sys, time
stage = pathlib.Path({stage_dir!r})
partial = stage / ".~tmp~" / {name!r}
copy = subprocess.Popen(["rsync", *sys.argv[1:]], stdin=subprocess.PIPE)
passed = 0
while passed < {limit} and select.select([0], [], [], 10)[0]:
    chunk = os.read(0, min(65536, {limit} - passed))
    if not chunk:
        break
    copy.stdin.write(chunk)
    copy.stdin.flush()
    passed += len(chunk)
deadline = time.monotonic() + 30
while time.monotonic() < deadline and not any(
        p.stat().st_size for p in stage.rglob("*" + {name!r} + "*") if p.is_file()):
    time.sleep(0.05)
copy.kill()
copy.wait()
copy.stdin.close()
deadline = time.monotonic() + 30
while not partial.is_file() and time.monotonic() < deadline:
    time.sleep(0.05)
kept = sorted(map(str, partial.parent.iterdir())) if partial.parent.is_dir() else []
pathlib.Path({marker!r}).write_text("\\n".join(kept))
sys.exit(12)
"""


@pytest.mark.fleet_state("v1 on node2 and node3")
def test_failed_distribute_on_one_node_leaves_no_staged_tarball_anywhere(fleet, saved_images, tmp_path):
    """node3's copy dies half-way (its rsync is killed) while node1 copies the same tarball in the same
    task (node1 first drops v2 and the containers kept on it, so that it must copy): node1 still loads and
    removes its staged tarball, node3 removes the tarball and the partial copy rsync kept in .~tmp~/, the
    message says so, and the run stops before any restart."""
    v2 = saved_images["v2"]
    node1, node3 = fleet.nodes[0], fleet.nodes[2]
    for name, container in node1.containers().items():
        if container["image"] == v2.image_id and name != SERVICE:
            node1.dockerd.docker("rm", "-f", name)
    node1.dockerd.docker("rmi", v2.image_id, check=False)
    assert node3.dockerd.docker("image", "inspect", v2.image_id, check=False).returncode != 0
    before = _running(fleet)
    killed = tmp_path / "rsync-killed"
    dying = tmp_path / "dying-rsync"
    dying.write_text(
        DYING_RSYNC.format(
            python=sys.executable,
            stage_dir=str(node3.root / "stage"),
            name=v2.tarball.name,
            limit=v2.tarball.stat().st_size // 2,
            marker=str(killed),
        )
    )
    dying.chmod(0o755)
    inventory = write_inventory(
        fleet, tmp_path / "inv.json", v2, host_overrides={"node3": {"ansible_rsync_path": str(dying)}}
    )
    result = ansible_playbook(fleet, "distribute.yml", inventory)
    assert result.rc != 0
    assert f".~tmp~/{v2.tarball.name}" in killed.read_text()  # the copy died with a partial file kept
    said = " ".join(result.output.split())
    assert "the image did not reach node3" in said
    assert "Every node that staged the tarball removed it and the partial copy rsync keeps." in said
    for node in fleet.nodes:  # nothing staged anywhere, rsync's partial folder (.~tmp~/) included
        assert [str(p) for p in (node.root / "stage").rglob("*")] == [], node.name
    assert _running(fleet) == before


def _kill_daemon_when_switching(node, image_id: str, killed: threading.Event, done: threading.Event) -> None:
    """SIGKILL `node`'s dockerd as soon as its service container runs `image_id` (the batch's health wait);
    watches until `done` (the deploy returned), however long the batches before it take on a slow machine."""
    while not done.is_set():
        proc = node.dockerd.docker("inspect", "--format", "{{.Image}} {{.State.Running}}", SERVICE, check=False)
        if proc.stdout.split() == [image_id, "true"]:
            time.sleep(1)
            node.dockerd.kill()
            killed.set()
            return
        time.sleep(0.3)


@pytest.mark.fleet_state("v1")
def test_killed_docker_daemon_keeps_the_last_good_container_through_rerun_and_rollback(fleet, saved_images, tmp_path):
    v1, v2 = saved_images["v1"], saved_images["v2"]
    node2 = fleet.nodes[1]
    good = {node.name: node.containers()[SERVICE]["id"] for node in fleet.nodes}  # every node runs v1
    assert {c["image"] for c in _running(fleet).values()} == {v1.image_id}
    node3_before = fleet.nodes[2].containers()
    slow = write_inventory(
        fleet,
        tmp_path / "slow.json",
        v2,
        host_overrides={"node2": {"sglang_extra_args": ["--start-delay", "60"]}},
        sglang_health_retries=90,
    )
    killed, done = threading.Event(), threading.Event()
    killer = threading.Thread(target=_kill_daemon_when_switching, args=(node2, v2.image_id, killed, done))
    killer.start()
    try:
        result = ansible_playbook(fleet, "deploy.yml", slow)
    finally:
        done.set()
        killer.join(timeout=60)
        interrupted_state = node2.state(SERVICE)
        journal = node2.state_dir / f"{SERVICE}.switching.json"
        journal_kept = journal.exists()
        if not node2.dockerd.alive():
            node2.dockerd.start_again()
    assert killed.is_set(), "node2 never ran the new image; the deploy said:\n" + result.output[-4000:]
    assert result.rc != 0
    flat = " ".join(result.output.split())
    assert (
        f"node2: the Docker daemon at {node2.dockerd.host} does not answer" in flat
        or f"The Docker daemon at {node2.dockerd.host} does not answer" in flat
    ), result.output[-4000:]
    assert "start Docker again, then rerun make deploy or make rollback; both put it back first" in flat
    assert "FAILED - RETRYING" not in result.output  # the model-load wait is quiet
    assert '== batch 2 of "Roll out": node2 ' + v1.ref + " -> " + v2.ref + " (FAILED)" in result.output
    # the state file was not touched (the switch never succeeded), the journal names the last good container
    assert interrupted_state["current"]["image_id"] == v1.image_id and journal_kept
    assert fleet.nodes[2].containers() == node3_before  # no later batch

    # the daemon is back: the rerun puts node2 back first, then switches it with the last good as previous
    result = ansible_playbook(fleet, "deploy.yml", write_inventory(fleet, tmp_path / "inv.json", v2))
    assert result.rc == 0, result.output[-4000:]
    assert f"node2: an earlier switch to {v2.ref} was interrupted" in " ".join(result.output.split())
    for node in fleet.nodes:
        containers = node.containers()
        assert containers[SERVICE]["image"] == v2.image_id and containers[SERVICE]["running"], node.name
        assert containers[SERVICE + "-previous"]["id"] == good[node.name], node.name
        state = node.state(SERVICE)
        assert state["current"]["container_id"] == containers[SERVICE]["id"]
        assert state["previous"]["container_id"] == good[node.name] and state["previous"]["image_id"] == v1.image_id
    assert node2.containers()[SERVICE + "-failed"]["image"] == v2.image_id
    assert not node2.containers()[SERVICE + "-failed"]["running"]
    assert not journal.exists()

    # rollback: every node back on its last good container, and a summary per node
    inventory = write_inventory(fleet, tmp_path / "inv.json", v2)
    result = ansible_playbook(fleet, "rollback.yml", inventory)
    assert result.rc == 0, result.output[-4000:]
    for node in fleet.nodes:
        current = node.containers()[SERVICE]
        assert current["id"] == good[node.name] and current["running"], node.name
        assert f"   {node.name} {v2.ref} -> {v1.ref} (ok)" in result.output
    assert '== summary of "Roll back":' in result.output and "did not finish on" not in result.output

    # a rollback that stops at its canary names every node it did not bring back
    fleet.nodes[0].dockerd.docker("rm", SERVICE + "-previous")
    result = ansible_playbook(fleet, "rollback.yml", inventory)
    assert result.rc != 0
    assert "node2 NOT DONE (not reached: an earlier batch failed)" in result.output
    assert '== "Roll back" did not finish on: node1, node2, node3' in result.output
    assert {node.name: node.containers()[SERVICE]["id"] for node in fleet.nodes} == good
