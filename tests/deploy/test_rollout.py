"""Real Ansible over SSH into three test nodes, each with its own Docker daemon, rolling out the
stand-in server image (tests/deploy/standin_image.py) with deploy/playbooks.

The tests run in file order and build on each other (one fleet per session): a clean rollout, a rerun
that changes nothing, a preflight failure that stops before any restart, a node whose new container is
unhealthy (rolled back, no later batch touched), an on-demand rollback, an image ID mismatch after
loading a tarball, and the status report.
"""

from __future__ import annotations

import json
import re
import sys

import pytest

from tests.deploy.fleet import A100, H100, H100_OLD_DRIVER, H200
from tests.deploy.runner import ansible_playbook, write_inventory

pytestmark = pytest.mark.slow

SERVICE = "sglang-test"


def _switch_order(output: str) -> list[str]:
    """Hosts in the order the rollout switched them (from the role's report line)."""
    return re.findall(r"(node\d): switching ", output)


def _running(fleet) -> dict[str, dict]:
    return {node.name: node.containers().get(SERVICE) for node in fleet.nodes}


def test_clean_rollout_canary_first(fleet, saved_images, tmp_path):
    v1 = saved_images["v1"]
    # the smoke gate is the real smoke suite (smoke_tests/, `replayssm-smoke`) against each new server
    reports = tmp_path / "smoke-report"
    inventory = write_inventory(
        fleet, tmp_path / "inv.json", v1, sglang_smoke_mode="command",
        sglang_smoke_command=f"{sys.executable} -m replayssm_smoke.cli --target {{url}} --out {{out}} --quiet",
        sglang_smoke_report_dir=f"{reports}/{{{{ inventory_hostname }}}}")
    result = ansible_playbook(fleet, "deploy.yml", inventory)
    assert result.rc == 0, result.output[-4000:]
    for node in fleet.nodes:
        report = json.loads((reports / node.name / "report.json").read_text())
        assert report["passed"] and report["target"]["url"] == f"http://{node.address}:30000"
    # canary of one, then batches of 25% (one node each with three nodes), in inventory order
    assert _switch_order(result.output) == ["node1", "node2", "node3"]
    assert result.output.count("PLAY [Roll out]") == 3
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


def test_rerun_changes_nothing(fleet, saved_images, tmp_path):
    before = _running(fleet)
    inventory = write_inventory(fleet, tmp_path / "inv.json", saved_images["v1"])
    result = ansible_playbook(fleet, "deploy.yml", inventory)
    assert result.rc == 0, result.output[-4000:]
    assert {host: counts["changed"] for host, counts in result.recap.items()} == {
        "node1": 0, "node2": 0, "node3": 0}
    assert "up to date, nothing to do" in result.output
    assert _running(fleet) == before


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


BAD_NODES = {  # inventory overrides, extra hosts, node3's GPUs, message
    "wrong python": ({"node3": {"ansible_python_interpreter": "/usr/bin/python2.7"}}, {}, None,
                     "node3: /usr/bin/python2.7 is missing or broken"),
    "port in use": ({"node3": {"sglang_container_name": "other-service"}}, {}, None,
                    "node3: port 30000 is in use by something other than the other-service container"),
    "unreachable": ({}, {"ghost": {"ansible_host": "GHOST"}}, None, "UNREACHABLE"),
    "old driver": ({}, {}, [H100_OLD_DRIVER, H100_OLD_DRIVER], "node3: NVIDIA driver 575.51.03 is below 580.65.06, the minimum for the "
                   "image's cu130 lane"),
    "too few GPUs": ({"node3": {"sglang_tp_size": 4}}, {}, None, "node3: sglang_tp_size is 4 but this node has 2 GPUs"),
}


@pytest.mark.parametrize("case", sorted(BAD_NODES))
def test_bad_node_stops_the_preflight(fleet, saved_images, tmp_path, case):
    host_overrides, extra_hosts, gpus, message = BAD_NODES[case]
    if gpus:
        fleet.nodes[2].set_gpus(*gpus)
    for host in extra_hosts.values():  # an address on the test bridge that no node has
        host["ansible_host"] = fleet.nodes[0].address.rsplit(".", 1)[0] + ".99"
        host.update({k: v for k, v in fleet.nodes[0].inventory_vars().items() if k != "ansible_host"})
    before = _running(fleet)
    inventory = write_inventory(fleet, tmp_path / "inv.json", saved_images["v2"], host_overrides=host_overrides,
                                extra_hosts=extra_hosts)
    try:
        result = ansible_playbook(fleet, "deploy.yml", inventory, "-e", "ansible_ssh_timeout=3")
    finally:
        fleet.nodes[2].set_gpus(H100, H100)
    assert result.rc != 0
    assert " ".join(message.split()) in " ".join(result.output.split()), result.output[-3000:]
    assert "PLAY [Distribute the image]" not in result.output
    assert _running(fleet) == before


def test_unhealthy_new_container_is_rolled_back_and_stops_the_rollout(fleet, saved_images, tmp_path):
    v1, v2 = saved_images["v1"], saved_images["v2"]
    before = _running(fleet)
    inventory = write_inventory(fleet, tmp_path / "inv.json", v2, host_overrides={
        "node2": {"sglang_extra_args": ["--unhealthy"]}}, sglang_health_retries=4)
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
    failing = write_inventory(fleet, tmp_path / "failing.json", v2, sglang_smoke_mode="command",
                              sglang_smoke_command="/bin/false {url}")
    result = ansible_playbook(fleet, "rollback.yml", failing, "--limit", "node1")
    assert result.rc != 0
    assert "node1: rollback failed (Run the smoke command against the server" in result.output
    assert "swapped back to the container that ran before (healthy)" in " ".join(result.output.split())
    after = fleet.nodes[0].containers()
    assert {name: (c["id"], c["image"], c["running"]) for name, c in after.items()} == {
        name: (c["id"], c["image"], c["running"]) for name, c in before.items()}
    assert fleet.nodes[0].state(SERVICE)["current"]["image_id"] == v1.image_id

    # a node that was never switched has nothing to roll back to: a clear refusal, nothing changed
    before = fleet.nodes[2].containers()
    result = ansible_playbook(fleet, "rollback.yml", inventory, "--limit", "node3")
    assert result.rc != 0
    assert "node3: no sglang-test-previous container to roll back to" in result.output
    assert fleet.nodes[2].containers() == before


def test_failed_smoke_gate_restores_the_node_and_keeps_its_rollback_target(fleet, saved_images, tmp_path):
    v1, v2 = saved_images["v1"], saved_images["v2"]
    before = fleet.nodes[0].containers()
    inventory = write_inventory(fleet, tmp_path / "inv.json", v2, sglang_smoke_mode="command",
                                sglang_smoke_command="/bin/false --target {url}")
    result = ansible_playbook(fleet, "rollout.yml", inventory, "--limit", "node1")
    assert result.rc != 0
    assert "node1: the new container failed (Run the smoke command against the server" in result.output
    after = fleet.nodes[0].containers()
    assert after[SERVICE]["id"] == before[SERVICE]["id"] and after[SERVICE]["running"]
    assert after[SERVICE]["image"] == v1.image_id
    # the rollback target from before the failed attempt is still there, and nothing else is left over
    assert after[SERVICE + "-previous"]["id"] == before[SERVICE + "-previous"]["id"]
    assert set(after) == {SERVICE, SERVICE + "-previous"}


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


def test_status_reports_every_node(fleet, saved_images, tmp_path):
    v1 = saved_images["v1"]
    inventory = write_inventory(fleet, tmp_path / "inv.json", v1)
    report = tmp_path / "status.json"
    result = ansible_playbook(fleet, "status.yml", inventory, "-e", f"sglang_status_json={report}")
    assert result.rc == 0, result.output[-4000:]
    assert re.search(r"HOST\s+SERVICE\s+PORT\s+RUNNING\s+HEALTHY", result.output)
    rows = {row["host"]: row for row in json.loads(report.read_text())["nodes"]}
    assert set(rows) == {"node1", "node2", "node3"}
    for row in rows.values():
        assert row["running"] and row["healthy"] and row["image_id"] == v1.image_id
        assert row["matches_state"]
    assert rows["node1"]["previous_image_id"] == saved_images["v2"].image_id
    assert rows["node3"]["previous_image_id"] == ""


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
