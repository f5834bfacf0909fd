"""The deploy tree without any node: ansible-lint (production profile), --syntax-check of every
playbook, the inventory-level preflight (no connection, no facts) on the example inventory and on bad
inventories, and the flag filter the roles render SGLang's command line with.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
BIN = Path(sys.executable).parent
PLAYBOOKS = sorted(p.name for p in (DEPLOY / "playbooks").glob("*.yml"))


def _env() -> dict[str, str]:
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(DEPLOY / "ansible.cfg"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_DEPRECATION_WARNINGS="False",
    )
    env["PATH"] = f"{BIN}:{env.get('PATH', '/usr/bin:/bin')}"
    return env


def _playbook(inventory: Path, playbook: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(inventory), str(DEPLOY / "playbooks" / playbook), *args],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=DEPLOY,
        timeout=300,
    )


@pytest.mark.slow
def test_ansible_lint_production_profile():
    proc = subprocess.run(
        [str(BIN / "ansible-lint"), "--profile", "production", "--nocolor"],
        capture_output=True,
        text=True,
        cwd=DEPLOY,
        env=_env(),
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]


@pytest.mark.parametrize("playbook", PLAYBOOKS)
def test_syntax_check(playbook):
    proc = _playbook(DEPLOY / "inventories" / "example", playbook, "--syntax-check")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_example_inventory_passes_the_inventory_preflight():
    proc = _playbook(DEPLOY / "inventories" / "example", "preflight.yml", "--tags", "static")
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert "failed=0" in proc.stdout and "gpu06" in proc.stdout


GOOD = {
    "ansible_host": "192.0.2.1",  # never contacted: the inventory level asserts on the controller
    "sglang_image_source": "registry",
    "sglang_image": "registry.example/overlay@sha256:" + "a" * 64,
    "sglang_model_path": "/models/target",
    "sglang_draft_model_path": "/models/draft",
    "sglang_speculative_algorithm": "DFLASH",
    "sglang_flags": {"enable-linear-replayssm-spec": True, "speculative-num-draft-tokens": 16},
}
BAD = {
    "no model path": ({"sglang_model_path": ""}, "set sglang_model_path to the absolute path"),
    "DFLASH without draft": ({"sglang_draft_model_path": ""}, "DFLASH needs a draft model"),
    "DSPARK non-static ragged verify": (
        {"sglang_speculative_algorithm": "DSPARK", "sglang_env": {"SGLANG_RAGGED_VERIFY_MODE": "dynamic"}},
        "needs SGLANG_RAGGED_VERIFY_MODE=static (got 'dynamic')",
    ),
    "ReplaySSM flag missing": (
        {"sglang_flags": {"speculative-num-draft-tokens": 16}},
        "DFLASH without\n--enable-linear-replayssm-spec",
    ),
    "decode ring and spec-verify": (
        {"sglang_flags": {"enable-linear-replayssm-spec": True, "enable-linear-replayssm": True}},
        "exclude each other",
    ),
    "block size differs from draft tokens": (
        {
            "sglang_flags": {
                "enable-linear-replayssm-spec": True,
                "speculative-num-draft-tokens": 16,
                "speculative-dflash-block-size": 8,
            }
        },
        "speculative-dflash-block-size (8) differs from",
    ),
    "image without digest": ({"sglang_image": "registry.example/overlay:latest"}, "has no digest"),
    "tarball mode without image ID": (
        {"sglang_image_source": "tarball", "sglang_image": "overlay:1", "sglang_image_tarball": "/nonexistent.tar"},
        "tarball mode needs",
    ),
    "missing tarball": (
        {
            "sglang_image_source": "tarball",
            "sglang_image": "overlay:1",
            "sglang_image_tarball": "/nonexistent/overlay.tar",
            "sglang_image_id": "sha256:" + "b" * 64,
        },
        "/nonexistent/overlay.tar does not exist on the\ncontroller",
    ),
    "role-owned flag in extra args": ({"sglang_extra_args": ["--port", "1234"]}, "sglang_extra_args set\nport"),
    "unknown CUDA lane": ({"sglang_image_cuda_lane": "cu999"}, "unknown sglang_image_cuda_lane 'cu999'"),
    "misspelled variable": (
        {"sglang_tp_sise": 4, "sglang_health_retries": 3},
        "unknown variable(s) sglang_tp_sise (did you mean sglang_tp_size?)",
    ),
    "registry mode through an ssh docker host": (
        {"sglang_docker_host": "ssh://gpu01"},
        "needs a unix:// socket or a plain tcp:// address",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_inventory_is_refused_before_any_node_is_contacted(case, tmp_path):
    overrides, message = BAD[case]
    inventory = tmp_path / "inv.json"
    inventory.write_text(json.dumps({"sglang_nodes": {"hosts": {"gpu01": {**GOOD, **overrides}}}}))
    proc = _playbook(inventory, "preflight.yml")
    assert proc.returncode != 0
    flat = " ".join(proc.stdout.split())
    assert "gpu01: " in proc.stdout and " ".join(message.split()) in flat, proc.stdout[-3000:]
    assert "PLAY [Preflight, level 2 - nodes]" not in proc.stdout


NOTHING_TO_DO = {  # ansible-playbook arguments that select no node, and what the run must say
    "misspelled group": (
        ["-i", "inventories/example", "-e", "sglang_hosts=sglang_nodez"],
        "'sglang_nodez' matches no host of the inventory",
    ),
    "missing inventory": (
        ["-i", "/nonexistent/inventory"],
        "Completely failed to parse inventory source /nonexistent/inventory",
    ),
    "limit matches nothing": (
        ["-i", "inventories/example", "--limit", "gpu99"],
        "Could not match supplied host pattern, ignoring: gpu99",
    ),
    "limit outside the group": (
        ["-i", "inventories/example", "-e", "sglang_hosts=dspark", "--limit", "gpu01"],
        "--limit 'gpu01' selects none of the 2 hosts of 'dspark', so nothing would be done",
    ),
}


@pytest.mark.parametrize("case", sorted(NOTHING_TO_DO))
def test_a_run_that_selects_no_node_fails(case):
    args, message = NOTHING_TO_DO[case]
    proc = subprocess.run(
        [str(BIN / "ansible-playbook"), *args, str(DEPLOY / "playbooks" / "status.yml")],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=DEPLOY,
        timeout=300,
    )
    assert proc.returncode != 0, proc.stdout[-2000:]
    assert message in " ".join((proc.stdout + proc.stderr).split())


def test_make_refuses_an_inventory_that_does_not_exist():
    proc = subprocess.run(
        ["make", "-f", "deploy/deploy.mk", "deploy", "INVENTORY=deploy/inventories/nope"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert proc.returncode == 2
    assert "INVENTORY=deploy/inventories/nope does not exist" in proc.stderr


def test_driver_floor_comes_from_the_base_lock(tmp_path):
    lock = tmp_path / "base.lock"
    lock.write_text("# a lock in docker/base.lock's format\nCUDA_LANE=cu777\nDRIVER_FLOOR_cu777=999.1.2\n")
    inventory = tmp_path / "inv.json"
    inventory.write_text(
        json.dumps({"sglang_nodes": {"hosts": {"gpu01": {**GOOD, "sglang_image_cuda_lane": "cu777"}}}})
    )
    proc = _playbook(
        inventory,
        "preflight.yml",
        "--tags",
        "static",
        "-e",
        f"sglang_preflight_base_lock={lock}",
        "-e",
        "sglang_hosts=gpu01",
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    proc = _playbook(inventory, "preflight.yml", "--tags", "static")  # without the lock: unknown lane
    assert proc.returncode != 0 and "unknown sglang_image_cuda_lane 'cu777'" in proc.stdout


def test_image_and_container_labels_share_one_namespace():
    """The image's labels (docker/) and the rollout's container labels (deploy/) are all org.replayssm.*."""
    label = re.compile(r"\b[a-z][a-z0-9-]*\.replayssm\.[a-z][a-z0-9.-]*")
    files = [
        f
        for tree in ("deploy", "docker")
        for f in (REPO / tree).rglob("*")
        if f.is_file() and f.suffix in {"", ".yml", ".py", ".md"} and "collections" not in f.parts
    ]
    found = {m for f in files for m in label.findall(f.read_text())}
    assert any(name.startswith("org.replayssm.spec") for name in found)
    assert any(name.startswith("org.replayssm.overlay.") for name in found)
    assert {name for name in found if not name.startswith("org.replayssm.")} == set()


def _filter_plugin(role: str, name: str):
    path = DEPLOY / "roles" / role / "filter_plugins" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _filters():
    return _filter_plugin("sglang", "sglang_filters")


def test_flag_mapping_renders_sglang_arguments():
    f = _filters()
    flags = {
        "enable-linear-replayssm-spec": True,
        "speculative-num-draft-tokens": 16,
        "disable-overlap-schedule": False,
        "mamba-ssm-dtype": "float32",
        "json-model-override-args": None,
        "--page-size": 1,
    }
    assert f.sglang_flag_args(flags) == [
        "--enable-linear-replayssm-spec",
        "--speculative-num-draft-tokens",
        "16",
        "--mamba-ssm-dtype",
        "float32",
        "--page-size",
        "1",
    ]
    assert f.sglang_flag_names(flags) == [
        "enable-linear-replayssm-spec",
        "speculative-num-draft-tokens",
        "mamba-ssm-dtype",
        "page-size",
    ]
    with pytest.raises(Exception, match="must be a mapping"):
        f.sglang_flag_args(["--enable-linear-replayssm-spec"])


def test_status_table_fits_120_columns():
    f = _filters()
    row = {
        "host": "h" * 16,
        "service": "s" * 16,
        "port": 30000,
        "running": True,
        "healthy": False,
        "routed": "yes",
        "image_id": "sha256:" + "a" * 64,
        "deployed_at": "2026-12-01T09:00:00Z",
        "previous_image_id": "b" * 64,
        "notes": [],
    }
    lost = {"host": "g" * 16, "service": "s" * 16, "port": 30000, "notes": ["UNREACHABLE over SSH: timed out"]}
    lines = f.sglang_status_table([row, {**row, "previous_image_id": "", "routed": "-"}, lost]).splitlines()
    assert lines[0].split() == [
        "HOST",
        "SERVICE",
        "PORT",
        "RUNNING",
        "HEALTHY",
        "ROUTED",
        "IMAGE",
        "ID",
        "DEPLOYED",
        "PREVIOUS",
    ]
    assert lines[1].split() == [
        "h" * 16,
        "s" * 16,
        "30000",
        "yes",
        "no",
        "yes",
        "a" * 12,
        "2026-12-01T09:00:00Z",
        "b" * 12,
    ]
    assert lines[2].split()[-1] == "-" and lines[2].split()[5] == "-"
    # a node that could not be read is listed, marked, with "?" where nothing is known, and its note below
    assert lines[3].split() == ["g" * 16, "*", "s" * 16, "30000", "?", "?", "-", "-", "-", "-"]
    assert lines[4] == "* " + "g" * 16 + ": UNREACHABLE over SSH: timed out"
    assert max(map(len, lines[:4])) <= 120 - len("        ")  # the default callback indents a block by 8


def test_the_status_verdict_flags_what_is_not_serving_and_routed():
    f = _filters()
    good = {"host": "n1", "reachable": True, "notes": [], "running": True, "healthy": True, "routed": "yes"}
    rows = [
        good,
        {**good, "host": "n2", "healthy": False, "routed": "ill"},
        {"host": "n3", "reachable": False, "notes": ["UNREACHABLE over SSH: timed out"], "routed": "-"},
        {**good, "host": "n4", "routed": "no"},
        {**good, "host": "n5", "routed": "-"},
    ]
    foreign = f.sglang_foreign_workers(
        {
            "http://r:1": [
                {"url": "http://n1:30000", "is_healthy": True},
                {"url": "http://x:30000", "is_healthy": False},
                {"url": "http://n9:30000/", "is_healthy": True},
            ]
        },
        ["http://n1:30000/"],
        ["n9"],
    )
    assert foreign == [{"router": "http://r:1", "url": "http://x:30000", "is_healthy": False}]
    verdict = f.sglang_status_verdict(rows, foreign)
    assert verdict["exit_code"] == 1
    assert verdict["flagged"] == [
        "n2: it does not answer /health with 200",
        "n2: the router lists it as unhealthy",
        "n3: UNREACHABLE over SSH: timed out",
        "n4: the router does not route to it",
    ]
    assert verdict["text"].splitlines() == [
        "* router http://r:1 also routes to http://x:30000 (unhealthy): not ours, no node of the inventory has "
        "that URL",
        "fleet-status: 1, 4 thing(s) flagged on n2, n3, n4",
    ]
    assert f.sglang_status_verdict([good])["text"] == "fleet-status: 0, every node serving and routed"


@pytest.mark.parametrize(
    "args, message",
    [
        (["/nonexistent/inventory"], "fleet-status: 2, could not run: give an inventory that exists"),
        (
            ["inventories/example", "-e", "sglang_hosts=sglang_nodez"],
            "fleet-status: 2, could not run: ansible-playbook exited 2",
        ),
    ],
)
def test_fleet_status_that_cannot_run_exits_2(args, message):
    proc = subprocess.run(
        [str(DEPLOY / "fleet-status"), *args],
        capture_output=True,
        text=True,
        cwd=DEPLOY,
        env={**_env(), "ANSIBLE_PLAYBOOK": str(BIN / "ansible-playbook")},
        timeout=300,
    )
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert message in proc.stderr


def test_make_fleet_status_runs_the_script_with_the_options():
    proc = subprocess.run(
        [
            "make",
            "--no-print-directory",
            "-n",
            "-f",
            "deploy/deploy.mk",
            "fleet-status",
            "INVENTORY=deploy/inventories/example",
            "LIMIT=gpu0*",
            "STATUS_JSON=s.json",
            "ANSIBLE_PLAYBOOK=ansible-playbook",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    assert [word for word in proc.stdout.split() if word != "\\"] == [
        "ANSIBLE_CONFIG=deploy/ansible.cfg",
        "ANSIBLE_PLAYBOOK=ansible-playbook",
        "deploy/fleet-status",
        "deploy/inventories/example",
        "--limit",
        "'gpu0*'",
        "-e",
        f"sglang_status_json={REPO}/s.json",
    ]


def test_watch_table_fits_120_columns_and_says_what_it_does_not_know():
    f = _filters()
    report = {
        "started_at": "2026-12-06T09:00:00Z",
        "passed": False,
        "exit_code": 1,
        "duration_s": 12.5,
        "gates": [{"name": "acceptance.code", "passed": False}, {"name": "exactness.parity", "passed": None}],
    }
    smoke = f.sglang_smoke_summary(report)
    assert smoke == {
        "started_at": "2026-12-06T09:00:00Z",
        "passed": False,
        "exit_code": 1,
        "duration_s": 12.5,
        "failed_gates": ["acceptance.code"],
        "error": None,
    }
    overlay = {
        "fold_in_use": ["overlay-cuda", "sglang"],
        "selfcheck_outcomes": {"passed": 7, "mismatch": 1},
        "fallback_shapes": ["B=8 T=16"],
    }
    row = {"host": "h" * 16, "service": "s" * 16, "overlay": overlay, "last_smoke": smoke}
    unknown = {"host": "n2", "service": "s", "overlay": None, "last_smoke": None}
    lines = f.sglang_watch_table([row, unknown]).splitlines()
    assert lines[0].split() == ["HOST", "SERVICE", "FOLD", "SELF-CHECK", "FALLBACKS", "LAST", "SMOKE"]
    assert lines[1].split() == [
        "h" * 16,
        "s" * 16,
        "overlay-cuda,sglang",
        "mismatch",
        "x1,",
        "passed",
        "x7",
        "1",
        "FAIL",
        "2026-12-06T09:00:00Z",
    ]
    assert lines[2].split() == ["n2", "s", "-", "-", "-", "never"]
    one_fold = f.sglang_watch_line({**row, "overlay": {**overlay, "fold_in_use": ["sglang-mtp-commit"]}})
    assert len(one_fold) <= 120 - len("        ")  # the default callback indents a block by 8


def test_the_last_bake_keeps_its_verdict_and_says_where_its_numbers_came_from():
    f = _filters()
    report = {
        "verdict": "fail",
        "headline": "bake of node1 against node2: FAILED on accept length",
        "ended_at": "2026-12-06T09:00:00Z",
        "run_id": "r1",
        "image": "rso:v2",
        "failed_rows": ["accept length"],
        "source": "Prometheus http://prom:9090 (job sglang)",
        "rows": [{"metric": "accept length"}],
        "table": "...",
    }
    bake = f.sglang_bake_summary(report)
    assert set(bake) == {"verdict", "headline", "ended_at", "run_id", "image", "failed_rows", "source", "line"}
    assert bake["line"] == (
        "bake of node1 against node2: FAILED on accept length (numbers from Prometheus http://prom:9090 (job sglang))"
    )
    # a bake that could not be measured has no source: its headline alone
    unmeasured = f.sglang_bake_summary({"verdict": "no-verdict", "headline": "bake of node1: NO VERDICT"})
    assert unmeasured["line"] == "bake of node1: NO VERDICT" and unmeasured["source"] is None


def test_image_names_are_tags_not_ids():
    f = _filters()
    assert f.sglang_image_name("rso:v2") == "rso:v2"
    assert f.sglang_image_name("reg.example/ml/sglang@sha256:" + "c" * 64) == "reg.example/ml/sglang@sha256:" + "c" * 12
    assert f.sglang_image_name("sha256:" + "d" * 64) == "d" * 12
    assert f.sglang_image_name("") == f.sglang_image_name(None) == "nothing"


def test_unknown_variables_are_named_with_a_suggestion():
    f = _filters()
    names = [
        "sglang_tp_sise",
        "sglang_port",
        "sglang_hosts",
        "sglang_frobnicate",
        "ansible_host",
        "sglang_health_retries",
    ]
    assert f.sglang_unknown_variables(names, DEPLOY / "roles") == [
        "sglang_frobnicate",
        "sglang_tp_sise (did you mean sglang_tp_size?)",
    ]
    with pytest.raises(Exception, match="no role defaults found"):
        f.sglang_unknown_variables(names, REPO / "docker")


@pytest.mark.parametrize(
    "target",
    ["deploy", "preflight", "plan", "rollback", "fleet-status", "deploy-smoke", "deploy-monitor", "deploy-alerts"],
)
def test_make_targets_need_an_inventory(target):
    proc = subprocess.run(["make", "-f", "deploy/deploy.mk", target], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 2
    assert f"INVENTORY is not set: make {target} INVENTORY=path/to/inventory" in proc.stderr


def test_make_deploy_runs_the_deploy_playbook_with_batches_and_limit():
    proc = subprocess.run(
        [
            "make",
            "--no-print-directory",
            "-n",
            "-f",
            "deploy/deploy.mk",
            "deploy",
            "INVENTORY=deploy/inventories/example",
            "LIMIT=gpu0*",
            'SERIAL=[1,"50%"]',
            "ANSIBLE_PLAYBOOK=ansible-playbook",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [
        "ANSIBLE_CONFIG=deploy/ansible.cfg",
        "ansible-playbook",
        "-i",
        "deploy/inventories/example",
        "--limit",
        "'gpu0*'",
        "-e",
        """'{"sglang_rollout_serial":""",
        """[1,"50%"]}'""",
        "deploy/playbooks/deploy.yml",
    ]


@pytest.mark.parametrize("serial", ["[0]", "[]", '["0%"]', "[1, -1]", '[1, "x"]', "0"])
def test_a_batch_plan_without_a_canary_is_refused(serial):
    """Ansible reads SERIAL='[0]' or '[]' as one batch of every node: the guard refuses them before any play."""
    proc = _playbook(DEPLOY / "inventories" / "example", "rollout.yml", "-e", f'{{"sglang_rollout_serial": {serial}}}')
    assert proc.returncode != 0
    flat = " ".join(proc.stdout.split())
    assert "the batch plan (SERIAL, sglang_rollout_serial) is" in flat and "no canary" in flat, proc.stdout[-2000:]
    assert "PLAY [Roll out]" not in proc.stdout


@pytest.mark.parametrize(
    "serial, message",
    [
        (
            '["100%"]',
            'the first batch of SERIAL=["100%"] is every node of the play (6: gpu01, gpu02, gpu03, gpu04, gpu05, '
            "gpu06)",
        ),
        (
            "[4]",
            "the first batch of SERIAL=[4] (gpu01, gpu02, gpu03, gpu04) is every node of the service group "
            "dflash_gdn (gpu01, gpu02, gpu03, gpu04)",
        ),
    ],
)
def test_a_first_batch_of_a_whole_service_is_refused(serial, message):
    proc = _playbook(DEPLOY / "inventories" / "example", "rollout.yml", "-e", f'{{"sglang_rollout_serial": {serial}}}')
    assert proc.returncode != 0
    assert message + ": every one of them would be down at once" in " ".join(proc.stdout.split()), proc.stdout[-2000:]
    assert "PLAY [Roll out]" not in proc.stdout


def _router_filters():
    return _filter_plugin("sglang_router", "sglang_router_filters")


def test_batches_are_ansibles():
    f = _router_filters()
    hosts = [f"n{i}" for i in range(1, 11)]
    assert f.sglang_batches([1, "25%"], hosts) == [
        ["n1"],
        ["n2", "n3"],
        ["n4", "n5"],
        ["n6", "n7"],
        ["n8", "n9"],
        ["n10"],
    ]
    assert f.sglang_batches(3, hosts[:4]) == [["n1", "n2", "n3"], ["n4"]]
    assert f.sglang_batches([1, "1%"], hosts[:3]) == [["n1"], ["n2"], ["n3"]]  # a percentage is at least one


def test_a_first_batch_leaves_a_canary():
    f = _router_filters()
    groups = {
        "all": ["a", "b", "c", "d", "e"],
        "fleet": ["a", "b", "c", "d", "e"],
        "one": ["a", "b"],
        "two": ["c", "d"],
        "solo": ["e"],
        "other": ["a", "z"],
    }
    assert f.sglang_first_batch_problems([1, "25%"], groups["fleet"], groups, "fleet") == []
    assert f.sglang_first_batch_problems([3], ["a", "b", "c"], groups, "fleet") == [
        "the first batch of SERIAL=[3] is every node of the play (3: a, b, c)"
    ]
    assert f.sglang_first_batch_problems(2, groups["fleet"], groups, "fleet") == [
        "the first batch of SERIAL=2 (a, b) is every node of the service group one (a, b)"
    ]
    assert f.sglang_first_batch_problems([1], ["e"], groups, "fleet") == []  # one node: no canary to spare


def test_the_floor_counts_each_routers_healthy_workers():
    f = _router_filters()
    nodes = {h: {"router": "http://r", "worker_url": f"http://{h}:1", "floor": 2} for h in ("a", "b", "c", "d")}
    nodes["d"] = {"router": "http://other", "worker_url": "http://d:1", "floor": 1}
    listings = {
        "http://r": [
            {"url": "http://a:1", "is_healthy": True},
            {"url": "http://b:1", "is_healthy": True},
            {"url": "http://c:1", "is_healthy": False},
            {"url": "http://x:1", "is_healthy": True},
        ],
        "http://other": [{"url": "http://d:1", "is_healthy": True}],
    }
    assert f.sglang_router_floor_problems([["a"], ["c"]], nodes, listings) == []
    problems = f.sglang_router_floor_problems([["a", "b"], ["d"]], nodes, listings)
    assert problems == [
        "batch 1 (2 node(s): a, b) would take 2 of the 3 healthy workers of the router at http://r out at once, "
        "leaving 1, below its floor sglang_router_min_healthy=2 (the router lists http://c:1 as unhealthy)",
        "batch 2 (1 node(s): d) would take 1 of the 1 healthy workers of the router at http://other out at once, "
        "leaving 0, below its floor sglang_router_min_healthy=1",
    ]
    assert f.sglang_router_floor_problems([["a", "b"]], nodes, listings, False)[0].startswith("the batch (2 node(s)")


WRONG_TYPES = {  # a variable of a wrong type or value, and what Ansible's role argument check says
    "flags not a mapping": ({"sglang_flags": "enable-linear-replayssm-spec"}, "sglang_flags"),
    "port not a number": ({"sglang_port": "http"}, "sglang_port"),
    "unknown image source": ({"sglang_image_source": "ftp"}, "sglang_image_source must be one of: registry, tarball"),
}


@pytest.mark.parametrize("case", sorted(WRONG_TYPES))
def test_a_wrong_type_is_refused_by_the_role_argument_specs_before_any_task(case, tmp_path):
    overrides, message = WRONG_TYPES[case]
    inventory = tmp_path / "inv.json"
    inventory.write_text(json.dumps({"sglang_nodes": {"hosts": {"gpu01": {**GOOD, **overrides}}}}))
    proc = _playbook(inventory, "preflight.yml", "--tags", "static")
    assert proc.returncode != 0
    flat = " ".join(proc.stdout.split())
    assert "Validation of arguments failed" in flat and message in flat, proc.stdout[-3000:]
    assert "TASK [sglang_preflight : Ansible is recent enough]" not in proc.stdout  # before the role's first task


def test_ansible_doc_renders_every_role_spec():
    roles = sorted(p.name for p in (DEPLOY / "roles").iterdir() if p.is_dir())
    proc = subprocess.run(
        [str(BIN / "ansible-doc"), "-t", "role", "-r", str(DEPLOY / "roles"), *roles],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=DEPLOY,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "sglang_router_drain_timeout_action" in proc.stdout and "choices: [stop, continue]" in proc.stdout


def _plan_inventory(tmp_path: Path, max_running: dict) -> Path:
    """Three service groups on this machine (connection local): each node's model folder holds a model family's
    config.json and 60 GiB of (sparse) weights, its fake nvidia-smi lists two 80 GiB GPUs; the third group's
    SGLang release is unknown (no variable, no image on the node)."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\n# fake nvidia-smi (tests/deploy): memory.total in MiB\necho 81559\necho 81559\n")
    smi.chmod(0o755)
    groups = {}
    for group, family, algorithm in (
        ("dflash_35b", "Qwen3.5-35B-A3B", "DFLASH"),
        ("dspark_next", "Qwen3-Next-80B-A3B-Instruct", "DSPARK"),
        ("dflash_unknown", "Qwen3.5-397B-A17B", "DFLASH"),
    ):
        model = tmp_path / group / family
        model.mkdir(parents=True)
        (model / "config.json").write_text((REPO / "tests" / "plan" / "models" / family / "config.json").read_text())
        with open(model / "model.safetensors", "wb") as weights:
            weights.truncate(60 * 2**30)
        groups[group] = {
            "hosts": {
                f"{group}-node": {
                    "ansible_connection": "local",
                    "ansible_python_interpreter": sys.executable,
                    "sglang_model_path": str(model),
                    "sglang_draft_model_path": "",
                    "sglang_nvidia_smi": str(smi),
                    "sglang_speculative_algorithm": algorithm,
                    "sglang_tp_size": 2,
                    "sglang_preflight_plan_release": "" if group == "dflash_unknown" else "0.5.19",
                    "sglang_preflight_plan_path": str(REPO / "overlay"),
                    "sglang_flags": {
                        "enable-linear-replayssm-spec": True,
                        "speculative-num-draft-tokens": 8,
                        "mem-fraction-static": 0.85,
                        "max-running-requests": max_running[group],
                    },
                }
            }
        }
    inventory = tmp_path / "inv.json"
    inventory.write_text(json.dumps({"sglang_nodes": {"children": groups}}))
    (tmp_path / "plan.yml").write_text(
        "- hosts: sglang_nodes\n  gather_facts: false\n  tasks:\n"
        "    - {ansible.builtin.import_role: {name: sglang_preflight, tasks_from: plan}}\n"
    )
    return inventory


def test_preflight_prints_one_plan_per_group_and_refuses_a_pool_too_small(tmp_path):
    inventory = _plan_inventory(tmp_path, {"dflash_35b": 48, "dspark_next": 100000, "dflash_unknown": 48})
    proc = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(inventory), str(tmp_path / "plan.yml")],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=DEPLOY,
        timeout=300,
    )
    out = proc.stdout
    assert proc.returncode != 0, out[-4000:]
    table = [line for line in out.splitlines() if "    - " in line and ("_" in line or "GROUP" in line)]
    assert len(table) == 4, out[-4000:]
    assert "Qwen3.5-35B-A3B" in table[1] and "Qwen3-Next-80B-A3B-Instruct" in table[2]
    assert table[1].split()[3:] == ["2", "8", "16", "286.3/36.2", "3.49/27.66", "185/48"]
    flat = " ".join(out.split())
    assert "dflash_unknown Qwen3.5-397B-A17B - - - - - no plan: SGLang release unknown" in flat
    assert "dspark_next-node: replayssm-overlay plan refused this service:" in flat
    assert "fewer than --max-running-requests 100000" in flat
    assert "dflash_35b-node: replayssm-overlay plan refused" not in flat
