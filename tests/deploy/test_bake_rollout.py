"""The canary bake on the test fleet, for real: a router (tests/deploy/router.py) in front of the three nodes,
a load of the live traffic's class ("chat: ...", streams included) through it, and real rollouts whose canary
is baked for a few seconds (roles/sglang_bake, python -m replayssm_smoke.bake) against the nodes still on the
old release.

One fleet for the module and one router per kind (tests/deploy/router.py's KINDS, as test_router_rollout.py), every
test behind each kind, in file order, each bake starting from v1 everywhere: a draft that passes the smoke gate but
collapses on the live class (the double's --accept-length-for, planted on the canary's new container) stops the run
at the canary and rolls it back with no failed request; the control, the same rollout with a good draft, is
promoted and rolls on; a run killed mid-bake bakes the canary again on the next run; bad bake settings are refused
before anything changes; a canary five times slower per token is stopped on its latency rows, and one that sees no
traffic gets no verdict and is rolled back, never promoted.
tests/smoke/test_bake.py checks each verdict on stand-in servers in seconds.
"""

from __future__ import annotations

import json
import re

import pytest

from tests.deploy.bake_thresholds import THRESHOLDS
from tests.deploy.loadgen import LOAD_CONCURRENCY, LOAD_REQUESTS, Background
from tests.deploy.router import ROUTED_ENV, kind_port, start_router
from tests.deploy.runner import RunningPlaybook, ansible_playbook, fleet_status, write_inventory
from tests.deploy.test_router_rollout import SERVICE, Routed, _containers, _kill_when, _no_journals, _urls

pytestmark = pytest.mark.slow

LIVE = "chat: "
LIVE_CLASS = "prose"  # the class the live traffic is labelled with (the thresholds profile has its baseline)
# A short bake sees about 16 requests per node: 16 new tokens each (the double varies acceptance per prompt, so
# a few tokens per request would make each request's accept length all but two-valued) and a tolerance of 20%
# keep a good canary's window within it; a collapsed draft is at a third of the old nodes.
BAKE = {
    "sglang_canary_bake": 6,
    "sglang_bake_poll": 2,
    "sglang_bake_min_requests": 8,
    "sglang_bake_min_class_requests": 8,
    "sglang_bake_max_wait": 10,
    "sglang_bake_accept_tolerance": 0.2,
}
LOAD_TOKENS = 16


def _env(extra: str) -> dict:
    return {"SGLANG_DOUBLE_ARGS": f"{ROUTED_ENV['SGLANG_DOUBLE_ARGS']} {extra}"}


@pytest.fixture(scope="module")
def baked(router_kind, fleet, saved_images, tmp_path_factory):
    """The fleet on v1 with ROUTED_ENV, holding v2, and a router of this kind in front of all three."""
    root = tmp_path_factory.mktemp("baked")
    (root / "thresholds.yaml").write_text(THRESHOLDS)
    for version in ("v2", "v1"):
        inventory = write_inventory(fleet, root / f"setup-{version}.json", saved_images[version], sglang_env=ROUTED_ENV)
        result = ansible_playbook(fleet, "deploy.yml" if version == "v1" else "distribute.yml", inventory)
        assert result.rc == 0, result.output[-4000:]
    router = start_router(fleet, sorted(_urls(fleet)), kind=router_kind, port=kind_port(router_kind, module_offset=50))
    try:
        yield Routed(fleet=fleet, router=router, root=root, images=saved_images)
    finally:
        router.stop()


def _inventory(baked: Routed, name: str, canary_env: dict | None = None, image: str = "v2", **overrides):
    """An inventory of `image` with the bake on, node1 (the canary) with `canary_env`."""
    bake = {
        **BAKE,
        "sglang_bake_thresholds": str(baked.root / "thresholds.yaml"),
        "sglang_bake_report_dir": str(baked.root / "bake"),
        **overrides,
    }
    hosts = {"node1": {"sglang_env": canary_env}} if canary_env else None
    return baked.inventory(name, image, host_overrides=hosts, **bake)


def _rollout(baked: Routed, name: str, canary_env: dict | None = None, **overrides):
    """rollout.yml of v2 under the live load, node1 (the canary) with `canary_env`: (result, load report)."""
    inventory = _inventory(baked, name, canary_env, **overrides)
    load = _live_load(baked, name)
    try:
        result = ansible_playbook(baked.fleet, "rollout.yml", inventory)
    finally:
        report = load.result()
    return result, report


def _live_load(baked: Routed, name: str) -> Background:
    """The live traffic's class through the router, streams included, until the test stops it."""
    return Background(
        baked.fleet,
        baked.router.url,
        LOAD_REQUESTS,
        LOAD_CONCURRENCY,
        baked.root / f"{name}.load.json",
        max_new_tokens=LOAD_TOKENS,
        prefix=LIVE,
        request_class=LIVE_CLASS,
    )


def _back_to_v1(baked: Routed) -> None:
    result = ansible_playbook(baked.fleet, "rollout.yml", baked.inventory("reset", "v1"))
    assert result.rc == 0, result.output[-4000:]


@pytest.fixture
def on_v1(baked):
    """Each test starts with every node on v1 (ROUTED_ENV) and the router listing the fleet."""
    baked.router.reset(_urls(baked.fleet))
    running = {name: (c or {}).get("image") for name, c in _containers(baked.fleet).items()}
    if set(running.values()) != {baked.images["v1"].image_id}:
        _back_to_v1(baked)
    yield
    baked.router.wait_for(_urls(baked.fleet))


def _last_bake(node) -> dict:
    return json.loads((node.state_dir / "bake" / f"{SERVICE}.json").read_text())


def test_a_draft_that_collapses_on_the_live_class_is_stopped_at_the_canary(baked, on_v1):
    result, report = _rollout(baked, "collapse", _env(f"--accept-length-for={LIVE.strip()}=1.0"))
    v1 = baked.images["v1"].image_id
    assert result.rc != 0
    assert report["failed"] == 0, report["failures"]
    assert {name: c["image"] for name, c in _containers(baked.fleet).items()} == {
        "node1": v1,
        "node2": v1,
        "node3": v1,
    }  # the canary rolled back, the others never switched
    assert baked.router.healthy_urls() == _urls(baked.fleet)
    assert _no_journals(baked.fleet) == []
    flat = " ".join(result.output.split())
    assert "The canary was taken out of the router and rolled back" in flat
    assert "   node1 " in result.output and "(rolled back after its bake, back on" in result.output
    last = _last_bake(baked.fleet.nodes[0])
    assert last["verdict"] == "fail" and "accept length" in last["failed_rows"]
    # the live traffic is labelled with its class: the class's own row fails too, against its own baseline
    assert f"accept length, class {LIVE_CLASS}" in last["failed_rows"], last["failed_rows"]
    row = next(r for r in last["rows"] if r["metric"] == "accept length")
    assert row["verdict"] == "FAIL" and row["canary"] < row["old"] * 0.9
    assert "node1: baking on live traffic for 6 s" in flat  # its gates had passed
    assert re.search(r"accept length\s+\S+\s+\S+\s+2\.8\s+.*FAIL", result.output), result.output[-3000:]
    assert report["requests"] > 20 and any(r["stream"] for r in report["records"])


def test_the_same_rollout_with_a_good_draft_is_promoted(baked, on_v1):
    result, report = _rollout(baked, "good", sglang_rollout_serial=[1, 2])
    assert result.rc == 0, result.output[-4000:]
    assert report["failed"] == 0, report["failures"]
    v2 = baked.images["v2"].image_id
    assert all(c["image"] == v2 for c in _containers(baked.fleet).values())
    last = _last_bake(baked.fleet.nodes[0])
    assert last["verdict"] == "promote" and last["old"] == ["node2", "node3"], last
    # no weight is set: round robin gives the canary an even share of the bake's traffic, 1/3 here
    served = next(r for r in last["rows"] if r["metric"] == "requests")
    assert 0.2 <= served["canary"] / (served["canary"] + served["old"]) <= 0.5, served
    assert "bake of node1 against node2, node3, 6 s of live traffic ending " in result.output
    assert "PASSED, promote" in result.output
    # make fleet-status shows the canary's last bake, and where its numbers came from
    report = baked.root / "good-status.json"
    status = fleet_status(baked.fleet, _inventory(baked, "good-status"), "-e", f"sglang_status_json={report}")
    assert status.rc == 0, status.output[-4000:]
    bake = {row["host"]: row for row in json.loads(report.read_text())["nodes"]}["node1"]["last_bake"]
    assert bake["verdict"] == "promote" and bake["source"] == "the nodes' /metrics", bake
    assert bake["line"].endswith("PASSED, promote (numbers from the nodes' /metrics)")
    # the printed line is YAML (a quote doubled), maybe folded
    assert "PASSED, promote (numbers from the nodes" in " ".join(status.output.split())
    assert _no_journals(baked.fleet) == []


def test_a_run_killed_mid_bake_bakes_the_canary_again_on_the_next_run(baked):
    """The controller dies while the canary bakes (a rollout back to v1, from where the test before left the
    fleet): the canary's bake journal stays, and the next run (the canary up to date by then) bakes it again
    before the next batch, then rolls on."""
    fleet = baked.fleet
    running = {name: (c or {}).get("image") for name, c in _containers(fleet).items()}
    assert set(running.values()) == {baked.images["v2"].image_id}, "the test before left another state"
    journal = fleet.nodes[0].state_dir / f"{SERVICE}.baking.json"
    inventory = _inventory(baked, "killed", None, image="v1", sglang_rollout_serial=[1, 2])
    load = _live_load(baked, "killed")
    try:
        run = RunningPlaybook(fleet, "rollout.yml", inventory)
        killed, fired = _kill_when(run, journal.exists)
        assert fired, killed.output[-3000:]
        assert journal.exists()
        result = ansible_playbook(fleet, "rollout.yml", inventory)
    finally:
        report = load.result()
    assert result.rc == 0, result.output[-4000:]
    assert report["failed"] == 0, report["failures"]
    assert "node1: resuming the bake an earlier run left unfinished: baking" in " ".join(result.output.split())
    assert _last_bake(fleet.nodes[0])["verdict"] == "promote"
    assert all(c["image"] == baked.images["v1"].image_id for c in _containers(fleet).values())
    assert _no_journals(fleet) == []


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"sglang_canary_bake": 1, "sglang_bake_poll": 5}, "a bake of 1 s is shorter than one reading interval (5 s)"),
        ({"sglang_bake_accept_tolerance": 1.5}, "is not a fraction in [0, 1)"),
        ({"sglang_bake_thresholds": ""}, "has no baseline_accept_length: the bake compares the canary's acceptance"),
        ({"sglang_rollout_serial": ["50%"]}, "does not start with a canary of one node"),
        (
            {"sglang_bake_prometheus_url": "http://127.0.0.1:9"},
            "Prometheus at http://127.0.0.1:9 does not answer: cannot reach http://127.0.0.1:9/api/v1/status/config",
        ),
    ],
)
def test_bad_bake_settings_stop_the_run_before_anything_changes(baked, overrides, message):
    """v2 against a fleet on v1 (where the test before left it): refused, nothing changed."""
    before = _containers(baked.fleet)
    bake = {**BAKE, "sglang_bake_thresholds": str(baked.root / "thresholds.yaml"), **overrides}
    result = ansible_playbook(baked.fleet, "rollout.yml", baked.inventory("bad-bake", "v2", **bake))
    assert result.rc != 0
    assert message in " ".join(result.output.split()), result.output[-3000:]
    assert "PLAY [Roll out]" not in result.output
    assert _containers(baked.fleet) == before


def _stopped_at_the_canary(baked: Routed, result) -> dict:
    """The checks every stopped bake shares: the run failed, the canary rolled back and is in the router again,
    the other nodes never switched, no journal left; the canary's last bake."""
    v1 = baked.images["v1"].image_id
    assert result.rc != 0
    assert {name: c["image"] for name, c in _containers(baked.fleet).items()} == {
        "node1": v1,
        "node2": v1,
        "node3": v1,
    }, result.output[-3000:]
    assert baked.router.healthy_urls() == _urls(baked.fleet)
    assert _no_journals(baked.fleet) == []
    assert "The canary was taken out of the router and rolled back" in " ".join(result.output.split())
    assert "(rolled back after its bake, back on" in result.output
    return _last_bake(baked.fleet.nodes[0])


def test_a_slower_canary_is_stopped_at_the_canary(baked, on_v1):
    """The canary's forward passes take five times as long (the double's --step-ms; twice could hide on a loaded
    machine, where the old nodes' steps stretch too); its draft is as good as the old nodes'. The control is
    test_the_same_rollout_with_a_good_draft_is_promoted (the same load, --step-ms 20)."""
    slow = int(ROUTED_ENV["SGLANG_DOUBLE_ARGS"].split("--step-ms ")[1].split()[0]) * 5
    result, report = _rollout(baked, "slow", _env(f"--step-ms {slow}"))
    assert report["failed"] == 0, report["failures"]
    last = _stopped_at_the_canary(baked, result)
    assert last["verdict"] == "fail" and "ITL p99 (s)" in last["failed_rows"], last
    assert "accept length" not in last["failed_rows"]  # the draft is fine; only the speed is not
    row = next(r for r in last["rows"] if r["metric"] == "ITL p99 (s)")
    assert row["canary"] > row["old"] * (1 + 0.5)
    assert re.search(r"ITL p99 \(s\)\s+\S+\s+\S+\s+-\s+<= old x 1\.50\s+FAIL", result.output), result.output[-3000:]
    assert re.search(r"FAILED on [^:]*ITL p99 \(s\)", " ".join(result.output.split())), result.output[-3000:]
    assert last["source"] == "the nodes' /metrics" and "numbers from the nodes' /metrics" in result.output


def test_too_little_traffic_gives_no_verdict_and_rolls_the_canary_back(baked, on_v1):
    """No load through the router: the canary serves nothing in its bake nor in the wait after it, so there is no
    verdict; the run says so and stops, the canary rolled back (a canary nobody used is not promoted)."""
    result = ansible_playbook(baked.fleet, "rollout.yml", _inventory(baked, "idle"))
    last = _stopped_at_the_canary(baked, result)
    assert last["verdict"] == "no-verdict" and last["requests"] == 0, last
    assert last["failed_rows"] == ["requests"]
    assert last["waited_s"] >= BAKE["sglang_bake_max_wait"] - BAKE["sglang_bake_poll"]
    flat = " ".join(result.output.split())
    assert (
        f"NO VERDICT: the canary served 0 request(s), fewer than the {BAKE['sglang_bake_min_requests']} a verdict "
        f"needs, in {BAKE['sglang_canary_bake']} s + " in flat
    ), flat[-3000:]
