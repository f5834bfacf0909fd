"""Watching the fleet, end to end, on the rollout tests' fleet (three SSH nodes with their own Docker daemons):
a service `sglang-watch` rolled out with --enable-metrics, the monitoring jobs installed by
deploy/playbooks/monitor.yml (systemd units checked by systemd-analyze, a fake systemctl on the nodes, which
have no systemd), a real node_exporter per node reading the jobs' textfiles, a real Prometheus in the
controller's namespace scraping only the fleet's addresses, the rules installed by alerts.yml with their
`for:` durations shortened. A draft gone bad is planted on node2 (the double's --accept-length-file, outputs
stay correct) and a self-check that fell back to SGLang's fold on node3 (its record, as a serving process
writes it); Prometheus's HTTP API must then show exactly the expected alerts on exactly those nodes, every
dashboard query evaluates, and `make fleet-status` shows the fold and the last smoke.

The service has its own container name and port, so it runs beside whatever test_rollout left, and is
removed at the end.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest

from tests.deploy.runner import ansible_playbook, write_inventory
from tests.infra.prometheus import NodeExporter, Prometheus
from tests.monitoring.conftest import MONITORING, PROMETHEUS_HOST

pytestmark = pytest.mark.slow

SERVICE = "sglang-watch"
PORT = 30100
BAD_DRAFT = "/tmp/rso-accept-length"  # inside the container: while it exists, the double's accept length
PROMPTS = [  # one per class the thresholds have a baseline for; 16 tokens each keeps a run short
    {"id": "code-1", "class": "code", "prompt": "def fibonacci(n):\n", "max_new_tokens": 16},
    {"id": "prose-1", "class": "prose", "prompt": "The river runs through the valley", "max_new_tokens": 16},
]
THRESHOLDS = {
    "profiles": [
        {
            "name": "test-fleet",
            "match": ["*"],
            "how_measured": "the test double's accept length (3.0 +-20%)",
            "acceptance": {"code": {"min_mean_accept_length": 1.5}, "prose": {"min_mean_accept_length": 1.5}},
            "baseline_accept_length": {"code": 3.0, "prose": 3.0},
            "tie_margin": 0.125,
        }
    ]
}
# every duration short enough for a test; the stale thresholds long enough that nothing goes stale
FAST_RULES = {
    "evaluation_interval": "1s",
    "live_window": "20s",
    "for_live_acceptance": "2s",
    "for_smoke_acceptance": "0s",
    "for_fold": "2s",
    "for_selfcheck": "0s",
    "for_fallback_shape": "0s",
    "for_smoke_failed": "0s",
    "for_image": "2s",
    "for_missing": "30s",
    "smoke_stale_after": "1h",
    "job_stale_after": "30m",
}
FAKE_SYSTEMCTL = (
    '#!/bin/sh\n# fake systemctl of a test node (tests/deploy): logs its arguments\necho "$@" >> "$0.log"\n'
)
# a self-check record as the serving process (PID 1 of the container) would write it, naming that process
PLANT_SELFCHECK = """\
import json, sys
from replayssm_overlay import records
folder = records.record_dir()
folder.mkdir(parents=True, exist_ok=True)
(folder / "selfcheck-planted.json").write_text(json.dumps({**json.load(sys.stdin), "process": records.identity(1),
                                                      "sglang_dir": records.imported_sglang_dir()}))
"""
LOAD = """\
import json, sys, time, urllib.request
end = time.monotonic() + float(sys.argv[1])
body = json.dumps({"text": "hello fleet", "sampling_params": {"max_new_tokens": 24}}).encode()
while time.monotonic() < end:
    for url in sys.argv[2:]:
        try:
            urllib.request.urlopen(urllib.request.Request(url, body, {"Content-Type": "application/json"}), timeout=5)
        except OSError:
            pass
    time.sleep(0.2)
"""


@pytest.fixture(scope="module")
def watch(fleet, saved_images, tmp_path_factory):
    """sglang-watch rolled out on every node in one batch; its inputs on the controller; removed at the end."""
    root = tmp_path_factory.mktemp("watch")
    (root / "prompts.jsonl").write_text("".join(json.dumps(p) + "\n" for p in PROMPTS))
    (root / "thresholds.yaml").write_text(json.dumps(THRESHOLDS))
    for node in fleet.nodes:
        (node.root / "textfile").mkdir(exist_ok=True)
        (node.root / "systemd").mkdir(exist_ok=True)
        systemctl = node.bin_dir / "systemctl"
        systemctl.write_text(FAKE_SYSTEMCTL)
        systemctl.chmod(0o755)

    def inventory(name: str, host_overrides: dict | None = None, **overrides):
        per_node = {
            n.name: {  # node1 runs the jobs on systemd timers, the others leave scheduling to the operator
                "sglang_monitor_textfile_dir": str(n.root / "textfile"),
                "sglang_monitor_unit_dir": str(n.root / "systemd"),
                "sglang_monitor_systemctl": str(n.bin_dir / "systemctl"),
                "sglang_monitor_scheduler": "systemd" if n is fleet.nodes[0] else "none",
                **(host_overrides or {}).get(n.name, {}),
            }
            for n in fleet.nodes
        }
        service = {
            "sglang_container_name": SERVICE,
            "sglang_port": PORT,
            "sglang_flags": {
                "enable-linear-replayssm-spec": True,
                "speculative-num-draft-tokens": 16,
                "mamba-ssm-dtype": "float32",
                "enable-metrics": True,
            },
            "sglang_env": {"SGLANG_DOUBLE_ARGS": f"--enable-metrics --accept-length-file {BAD_DRAFT}"},
            "sglang_monitor_smoke_prompts": str(root / "prompts.jsonl"),
            "sglang_monitor_smoke_thresholds": str(root / "thresholds.yaml"),
            "sglang_monitor_smoke_max_new_tokens": 16,
            "sglang_monitor_smoke_interval": "10min",
            "sglang_monitor_smoke_cpus": "",
            "sglang_monitor_smoke_memory": "",
        }
        return write_inventory(
            fleet, root / f"{name}.json", saved_images["v1"], host_overrides=per_node, **{**service, **overrides}
        )

    result = ansible_playbook(fleet, "deploy.yml", inventory("deploy"), "-e", '{"sglang_rollout_serial": [3]}')
    assert result.rc == 0, result.output[-4000:]
    try:
        yield root, inventory
    finally:  # the nodes' containers go in parallel (the smoke's throwaway ones remove themselves)
        removals = [
            threading.Thread(
                target=node.dockerd.docker, args=("rm", "-f", SERVICE), kwargs={"check": False, "timeout": 120}
            )
            for node in fleet.nodes
        ]
        for thread in removals:
            thread.start()
        for thread in removals:
            thread.join()


def test_a_node_without_the_textfile_folder_stops_the_install_everywhere(fleet, watch):
    root, inventory = watch
    missing = fleet.nodes[2].root / "no-textfile"
    inv = inventory(
        "missing-textfile",
        {"node3": {"sglang_monitor_textfile_dir": str(missing)}},
        sglang_container_name="sglang-watch-x",
    )
    result = ansible_playbook(fleet, "monitor.yml", inv)
    assert result.rc != 0
    assert f"node3: {missing} does not exist" in " ".join(result.output.split())
    for node in fleet.nodes:  # nothing half installed, on any node
        assert not (node.state_dir / "monitor" / "sglang-watch-x").exists()
        assert not list((node.root / "systemd").glob("*sglang-watch-x*"))


def test_monitor_installs_the_jobs_and_a_rerun_changes_nothing(fleet, watch):
    root, inventory = watch
    node2, node3 = fleet.nodes[1], fleet.nodes[2]
    # the draft goes bad on node2: outputs stay correct, only acceptance falls
    node2.dockerd.docker("exec", SERVICE, "sh", "-c", f"echo 1.0 > {BAD_DRAFT}")
    # node3's serving process (PID 1 in its container) found the overlay's fold not bitwise and fell back
    record = {
        "schema": 1,
        "protocol": "fold",
        "time": time.time(),
        "outcome": "mismatch",
        "detail": "planted by the test",
        "seed": 0,
        "geometry": {},
        "seconds": 0.1,
        "fold": {"fold": "sglang", "reason": "self-check before serving: planted", "decided": True},
    }
    node3.dockerd.docker("exec", "-i", SERVICE, "python3", "-c", PLANT_SELFCHECK, input=json.dumps(record))
    result = ansible_playbook(fleet, "monitor.yml", inventory("monitor"))
    assert result.rc == 0, result.output[-4000:]
    for node in fleet.nodes:
        facts = (node.root / "textfile" / f"replayssm_node_{SERVICE}.prom").read_text()
        assert f'replayssm_node_container_running{{service="{SERVICE}",sglang_port="{PORT}"}} 1' in facts
        assert "replayssm_node_sglang_metrics_enabled{" in facts and "replayssm_overlay_fold_in_use{" in facts
        smoke = (node.root / "textfile" / f"replayssm_smoke_{SERVICE}.prom").read_text()
        assert 'replayssm_smoke_accept_length_baseline{class="code"' in smoke
        assert (node.state_dir / "monitor" / SERVICE / "smoke" / "report.json").exists()
    node1 = fleet.nodes[0]
    units = sorted(p.name for p in (node1.root / "systemd").iterdir())
    assert units == [f"sglang-monitor-{j}-{SERVICE}.{u}" for j in ("metrics", "smoke") for u in ("service", "timer")]
    verify = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *(str(node1.root / "systemd" / u) for u in units)],
        capture_output=True,
        text=True,
    )
    assert verify.returncode == 0 and not (verify.stdout + verify.stderr).strip(), verify.stdout + verify.stderr
    calls = (node1.bin_dir / "systemctl.log").read_text().splitlines()
    assert calls[0] == "daemon-reload" and f"enable --now sglang-monitor-smoke-{SERVICE}.timer" in calls
    for node in (node2, node3):  # scheduler none: the jobs and their config, no units
        assert not list((node.root / "systemd").iterdir()) and not (node.bin_dir / "systemctl.log").exists()
    assert (
        'replayssm_overlay_fold_in_use{fold="sglang",service="sglang-watch",sglang_port="30100"} 1'
        in (node3.root / "textfile" / f"replayssm_node_{SERVICE}.prom").read_text()
    )
    assert "replayssm_smoke_success{" in (node2.root / "textfile" / f"replayssm_smoke_{SERVICE}.prom").read_text()
    # idempotent: the same settings again change nothing (one node is enough to show it, and cheaper)
    again = ansible_playbook(
        fleet, "monitor.yml", inventory("monitor"), "-e", "sglang_monitor_run_now=false", "--limit", "node1"
    )
    assert again.rc == 0 and again.changed("node1") == 0, again.output[-3000:]


def _firing(prom, names: dict[str, str]) -> dict[str, set[str]]:
    """alertname -> the nodes (by name; `names` maps address to name) it fires on now."""
    alerts = prom.get("/api/v1/alerts")["data"]["alerts"]
    found: dict[str, set[str]] = {}
    for alert in alerts:
        if alert["state"] == "firing":
            host = alert["labels"].get("host", "?")
            found.setdefault(alert["labels"]["alertname"], set()).add(names.get(host, host))
    return found


def test_prometheus_fires_the_dead_draft_alert_on_the_planted_node_only(fleet, watch):
    root, inventory = watch
    prom_root = root / "prometheus"
    rules_dir = prom_root / "rules.d"
    rules_dir.mkdir(parents=True)
    addresses = [n.address for n in fleet.nodes]
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [f"{rules_dir}/*.yml"],
        "scrape_configs": [
            {"job_name": "sglang", "static_configs": [{"targets": [f"{a}:{PORT}" for a in addresses]}]},
            {"job_name": "node", "static_configs": [{"targets": [f"{a}:9100" for a in addresses]}]},
        ],
    }
    exporters = [
        NodeExporter(
            root / f"exporter-{n.name}",
            n.root / "textfile",
            n.address,
            ["nsenter", f"--net=/run/netns/{n.netns}", "--"],
        )
        for n in fleet.nodes
    ]
    prom = Prometheus(prom_root, config, fleet.controller_address, fleet.netns_cmd())
    load = subprocess.Popen(
        fleet.netns_cmd(sys.executable, "-c", LOAD, "150", *(f"http://{a}:{PORT}/generate" for a in addresses))
    )
    try:
        for daemon in (*exporters, prom):
            daemon.wait_ready()
        inventory_path = root / "prometheus-host.json"
        inventory_path.write_text(json.dumps(PROMETHEUS_HOST))
        result = ansible_playbook(
            fleet,
            "alerts.yml",
            inventory_path,
            "-e",
            json.dumps(
                {
                    "sglang_alerts_rules_dir": str(rules_dir),
                    "sglang_alerts_prometheus_url": prom.url,
                    "sglang_alerts_settings": FAST_RULES,
                }
            ),
        )
        assert result.rc == 0, result.output[-4000:]
        expected = {
            "ReplaySSMDraftAcceptanceCollapsed": {"node2"},
            "ReplaySSMSmokeAcceptanceBelowBaseline": {"node2"},
            "ReplaySSMSmokeFailed": {"node2"},
            "ReplaySSMServingWithSGLangFold": {"node3"},
            "ReplaySSMSelfCheckNotBitwise": {"node3"},
        }
        deadline, firing = time.monotonic() + 90, {}
        while time.monotonic() < deadline:
            firing = _firing(prom, {n.address: n.name for n in fleet.nodes})
            if firing == expected:
                break
            time.sleep(1)
        assert firing == expected
        live = prom.query("replayssm:sglang_accept_length:ratio_rate")["data"]["result"]
        by_node = {n.name: float(r["value"][1]) for r in live for n in fleet.nodes if r["metric"]["host"] == n.address}
        assert by_node["node2"] < 1.5 < 2.0 < min(by_node["node1"], by_node["node3"])
        _every_dashboard_query_evaluates(prom)
    finally:
        load.terminate()
        load.wait(timeout=10)
        prom.stop()
        for exporter in exporters:
            exporter.stop()


def _every_dashboard_query_evaluates(prom) -> None:
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    queries = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    queries += [v["query"]["query"] for v in dashboard["templating"]["list"] if isinstance(v.get("query"), dict)]
    for expr in queries:
        concrete = expr.replace("$host", ".+").replace("$service", ".+")
        if concrete.startswith("label_values("):  # a Grafana variable: the series it lists
            concrete = concrete[len("label_values(") :].split(",")[0]
        answer = prom.query(concrete)
        assert answer["status"] == "success", (expr, answer)
        assert answer["data"]["result"], f"no data for the dashboard query {expr}"


def test_fleet_status_shows_the_fold_and_the_last_smoke(fleet, watch):
    root, inventory = watch
    report = root / "status.json"
    result = ansible_playbook(fleet, "status.yml", inventory("status"), "-e", f"sglang_status_json={report}")
    assert result.rc == 0, result.output[-3000:]
    nodes = {n["host"]: n for n in json.loads(report.read_text())["nodes"]}
    assert [nodes[h]["overlay"]["fold_in_use"] for h in ("node1", "node2", "node3")] == [["none"], ["none"], ["sglang"]]
    assert nodes["node3"]["overlay"]["selfcheck_outcomes"] == {"mismatch": 1}
    assert [nodes[h]["last_smoke"]["exit_code"] for h in ("node1", "node2", "node3")] == [0, 1, 0]
    assert nodes["node2"]["last_smoke"]["failed_gates"] == ["acceptance.code", "acceptance.prose"]
    lines = [line.strip() for line in result.output.splitlines()]
    header = next(i for i, line in enumerate(lines) if line.startswith("HOST") and "FOLD" in line)
    assert lines[header].split() == ["HOST", "SERVICE", "FOLD", "SELF-CHECK", "FALLBACKS", "LAST", "SMOKE"]
    assert lines[header + 3].split()[:6] == ["node3", SERVICE, "sglang", "mismatch", "x1", "0"]
    assert lines[header + 2].split()[5] == "FAIL"
