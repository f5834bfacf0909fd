"""Watching the fleet, end to end, on the rollout tests' fleet (three SSH nodes with their own Docker daemons):
a service `sglang-watch` rolled out with --enable-metrics, the monitoring jobs installed by
deploy/playbooks/monitor.yml (systemd units checked by systemd-analyze, a fake systemctl on the nodes, which
have no systemd), a real node_exporter per node reading the jobs' textfiles, a real Prometheus in the
controller's namespace scraping only the fleet's addresses, the rules installed by alerts.yml with their
`for:` durations shortened. A draft gone bad is planted on node2 (the double's --accept-length-file, outputs
stay correct) and a self-check that fell back to SGLang's fold on node3 (its record, as a serving process
writes it); Prometheus's HTTP API must then show exactly the expected alerts on exactly those nodes, every
dashboard query evaluates, and `make fleet-status` shows the fold and the last smoke. Then what takes data
away must not resolve an alert (a stopped node_exporter, a smoke that cannot run), a leftover file of a
renamed service breaks no rule (and monitor.yml removes it), a stopped container pages (routed by
alertmanager.example.yml), and a restarted server without traffic raises no false alarm.

Every test stands alone: the fixtures install and plant (module-scoped, shared), and a test that changes the
fleet puts it back. The service has its own container name and port, so it runs beside whatever
test_rollout left, and is removed at the end.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from replayssm_overlay import promtext
from tests.deploy.runner import ansible_playbook, write_inventory
from tests.infra.prometheus import NodeExporter, Prometheus, tool
from tests.monitoring.conftest import MONITORING, PROMETHEUS_HOST, load_alert_rules

pytestmark = pytest.mark.slow

SERVICE = "sglang-watch"
PORT = 30100
BAD_DRAFT = "/tmp/rso-accept-length"  # inside the container: while it exists, the double's accept length
BASELINE_LINE = "replayssm_smoke_accept_length_baseline{"
RAN = "replayssm_smoke_last_run_timestamp_seconds"
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
    "for_live_acceptance_warning": "2s",
    "for_smoke_acceptance": "0s",
    "for_fold": "2s",
    "for_selfcheck": "0s",
    "for_fallback_shape": "0s",
    "for_smoke_failed": "0s",
    "for_image": "2s",
    "for_missing": "10s",
    "for_down": "2s",
    "for_scrape_error": "2s",
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
# traffic until stopped, to the URLs the file names (one a line, read every round)
LOAD = """\
import json, sys, time, urllib.request
body = json.dumps({"text": "hello fleet", "sampling_params": {"max_new_tokens": 24}}).encode()
while True:
    for url in open(sys.argv[1]).read().split():
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

    result = ansible_playbook(fleet, "deploy.yml", inventory("deploy"), "-e", '{"sglang_rollout_serial": [1, 2]}')
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


@pytest.fixture(scope="module")
def watched(fleet, watch):
    """monitor.yml's run on every node, after the draft went bad on node2 (outputs stay correct, only
    acceptance falls) and node3's serving process (PID 1 in its container) found the overlay's fold not
    bitwise and fell back to SGLang's."""
    root, inventory = watch
    fleet.nodes[1].dockerd.docker("exec", SERVICE, "sh", "-c", f"echo 1.0 > {BAD_DRAFT}")
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
    fleet.nodes[2].dockerd.docker("exec", "-i", SERVICE, "python3", "-c", PLANT_SELFCHECK, input=json.dumps(record))
    result = ansible_playbook(fleet, "monitor.yml", inventory("monitor"))
    assert result.rc == 0, result.output[-4000:]
    return result


def test_monitor_installs_the_jobs_and_a_rerun_changes_nothing(fleet, watch, watched):
    root, inventory = watch
    node1, node2, node3 = fleet.nodes
    for node in fleet.nodes:
        facts = (node.root / "textfile" / f"replayssm_node_{SERVICE}.prom").read_text()
        assert f'replayssm_node_container_running{{service="{SERVICE}",sglang_port="{PORT}"}} 1' in facts
        assert "replayssm_node_sglang_metrics_enabled{" in facts and "replayssm_overlay_fold_in_use{" in facts
        smoke = (node.root / "textfile" / f"replayssm_smoke_{SERVICE}.prom").read_text()
        assert 'replayssm_smoke_accept_length_baseline{class="code"' in smoke
        assert (node.state_dir / "monitor" / SERVICE / "smoke" / "report.json").exists()
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


class Observed:
    """The watching side: a node_exporter per node, Prometheus with the rules alerts.yml installed, traffic."""

    def __init__(self, fleet, root: Path):
        self.fleet, self.root = fleet, root
        root.mkdir(parents=True)
        self.names = {n.address: n.name for n in fleet.nodes}
        self.exporters = {n.name: self.exporter(n) for n in fleet.nodes}
        self.targets = root / "load-targets"
        self.send_load_to(*fleet.nodes)
        addresses = [n.address for n in fleet.nodes]
        rules_dir = root / "rules.d"
        rules_dir.mkdir()
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
            "rule_files": [f"{rules_dir}/*.yml"],
            "scrape_configs": [
                {"job_name": "sglang", "static_configs": [{"targets": [f"{a}:{PORT}" for a in addresses]}]},
                {"job_name": "node", "static_configs": [{"targets": [f"{a}:9100" for a in addresses]}]},
                {"job_name": "prometheus", "static_configs": [{"targets": [f"{fleet.controller_address}:9090"]}]},
            ],
        }
        self.prom = Prometheus(root, config, fleet.controller_address, fleet.netns_cmd())
        self.load = subprocess.Popen(fleet.netns_cmd(sys.executable, "-c", LOAD, str(self.targets)))
        self.rules_dir = rules_dir

    def exporter(self, node) -> NodeExporter:
        netns = ["nsenter", f"--net=/run/netns/{node.netns}", "--"]
        return NodeExporter(self.root / f"exporter-{node.name}", node.root / "textfile", node.address, netns)

    def send_load_to(self, *nodes) -> None:
        self.targets.write_text("".join(f"http://{n.address}:{PORT}/generate\n" for n in nodes))

    def firing(self) -> dict[str, set[str]]:
        """alertname -> the nodes (by name) it fires on now; "-" for an alert of no host."""
        found: dict[str, set[str]] = {}
        for alert in self.prom.get("/api/v1/alerts")["data"]["alerts"]:
            if alert["state"] == "firing":
                host = alert["labels"].get("host", "-")
                found.setdefault(alert["labels"]["alertname"], set()).add(self.names.get(host, host))
        return found

    def wait_for(self, check, timeout: float = 90):
        """Poll the firing alerts until `check(firing)` holds; the last firing set either way."""
        deadline, firing = time.monotonic() + timeout, {}
        while time.monotonic() < deadline:
            firing = self.firing()
            if check(firing):
                break
            time.sleep(1)
        return firing

    def stop(self) -> None:
        self.load.terminate()
        self.load.wait(timeout=10)
        self.prom.stop()
        for exporter in self.exporters.values():
            exporter.stop()


@pytest.fixture(scope="module")
def observed(fleet, watch, watched):
    """Watched by a node_exporter per node and a Prometheus with the fleet's rules (alerts.yml, `for:` shortened),
    traffic on every node; shared by the module's alert tests, each of which puts back what it changes."""
    root, _ = watch
    obs = Observed(fleet, root / "prometheus")
    try:
        for daemon in (*obs.exporters.values(), obs.prom):
            daemon.wait_ready()
        inventory_path = root / "prometheus-host.json"
        inventory_path.write_text(json.dumps(PROMETHEUS_HOST))
        settings = {
            "sglang_alerts_rules_dir": str(obs.rules_dir),
            "sglang_alerts_prometheus_url": obs.prom.url,
            "sglang_alerts_settings": FAST_RULES,
        }
        result = ansible_playbook(fleet, "alerts.yml", inventory_path, "-e", json.dumps(settings))
        assert result.rc == 0, result.output[-4000:]
        yield obs
    finally:
        obs.stop()


# what the planted faults fire once the fleet is watched; the stand-in image has no SGLang to patch and its
# serving process records no self-check (its fold is "none"), except node3's planted one
EXPECTED = {
    "ReplaySSMDraftAcceptanceCollapsed": {"node2"},
    "ReplaySSMDraftAcceptanceLow": {"node2"},
    "ReplaySSMSmokeAcceptanceBelowBaseline": {"node2"},
    "ReplaySSMSmokeFailed": {"node2"},
    "ReplaySSMServingWithSGLangFold": {"node3"},
    "ReplaySSMSelfCheckNotBitwise": {"node3"},
    "ReplaySSMServingWithoutFold": {"node1", "node2"},
    "ReplaySSMOverlayNotPatched": {"node1", "node2", "node3"},
    "ReplaySSMWatchdog": {"-"},
}


def test_prometheus_fires_the_dead_draft_alert_on_the_planted_node_only(fleet, observed):
    firing = observed.wait_for(lambda f: f == EXPECTED)
    assert firing == EXPECTED
    live = observed.prom.query("replayssm:sglang_accept_length:ratio_rate")["data"]["result"]
    by_node = {observed.names[r["metric"]["host"]]: float(r["value"][1]) for r in live}
    assert by_node["node2"] < 1.5 < 2.0 < min(by_node["node1"], by_node["node3"])
    _every_dashboard_query_evaluates(observed.prom)


def _holds(observed, alerts: dict[str, str], seconds: float) -> None:
    """Every alert of `alerts` (name -> node) keeps firing for `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        firing = observed.firing()
        assert all(node in firing.get(name, set()) for name, node in alerts.items()), firing
        time.sleep(1)


def test_a_node_exporter_that_stops_resolves_nothing_and_is_alerted(fleet, observed):
    node2 = fleet.nodes[1]
    kept = {
        name: "node2"
        for name in (
            "ReplaySSMDraftAcceptanceCollapsed",
            "ReplaySSMDraftAcceptanceLow",
            "ReplaySSMSmokeFailed",
            "ReplaySSMSmokeAcceptanceBelowBaseline",
        )
    }
    assert observed.wait_for(lambda f: all("node2" in f.get(n, ()) for n in kept)), "the planted faults do not fire"
    observed.exporters["node2"].stop()
    try:
        firing = observed.wait_for(lambda f: "node2" in f.get("ReplaySSMNodeExporterDown", ()), timeout=60)
        assert "node2" in firing.get("ReplaySSMNodeExporterDown", set()), firing
        _holds(observed, kept, 10)  # the rules hold node2's facts for `hold` (1h): nothing resolves
    finally:
        observed.exporters["node2"] = observed.exporter(node2)
        observed.exporters["node2"].wait_ready()
    firing = observed.wait_for(lambda f: "ReplaySSMNodeExporterDown" not in f)
    assert "ReplaySSMNodeExporterDown" not in firing


def test_a_leftover_file_of_a_renamed_service_breaks_no_rule_and_monitor_removes_it(fleet, watch, observed):
    root, inventory = watch
    node2 = fleet.nodes[1]
    folder = node2.root / "textfile"
    current = (folder / f"replayssm_smoke_{SERVICE}.prom").read_text()
    ran = promtext.value_of(current, RAN)
    # what a rename of sglang_container_name leaves: the old name's smoke file for the same port, an hour older,
    # with a baseline so low that it would hide the dead draft if the rules took it
    older = {RAN: repr(ran - 3600), BASELINE_LINE: "1.0"}
    old = "".join(
        next((line.rsplit(" ", 1)[0] + " " + v for k, v in older.items() if line.startswith(k)), line) + "\n"
        for line in current.replace(f'service="{SERVICE}"', 'service="sglang-watch-old"').splitlines()
    )
    leftover = folder / "replayssm_smoke_sglang-watch-old.prom"
    leftover.write_text(old)
    try:
        time.sleep(5)  # scraped, and the rules evaluated with both files
        firing = observed.wait_for(lambda f: "node2" in f.get("ReplaySSMDraftAcceptanceCollapsed", ()))
        assert "node2" in firing.get("ReplaySSMDraftAcceptanceCollapsed", set())
        assert "ReplaySSMRuleEvaluationFailures" not in firing
        failures = observed.prom.query('sum(prometheus_rule_evaluation_failures_total{rule_group=~".*;replayssm"})')
        assert float(failures["data"]["result"][0]["value"][1]) == 0
        services = {
            a["labels"]["service"]
            for a in observed.prom.get("/api/v1/alerts")["data"]["alerts"]
            if a["labels"]["alertname"] == "ReplaySSMDraftAcceptanceCollapsed"
        }
        assert services == {SERVICE}
        result = ansible_playbook(
            fleet, "monitor.yml", inventory("monitor"), "-e", "sglang_monitor_run_now=false", "--limit", "node2"
        )
        assert result.rc == 0, result.output[-3000:]
        assert not leftover.exists() and (folder / f"replayssm_smoke_{SERVICE}.prom").exists()
    finally:
        leftover.unlink(missing_ok=True)


def _node_job(node, job: str) -> subprocess.CompletedProcess:
    """One run of the node's `sglang-node-monitor <job>`, as its timer runs it."""
    monitor = node.state_dir / "monitor"
    config = monitor / SERVICE / "config.json"
    return subprocess.run(
        ["/usr/bin/python3", str(monitor / "sglang-node-monitor"), job, "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_stopped_container_pages_the_on_call_engineer(fleet, observed):
    node1 = fleet.nodes[0]
    smoke_file = node1.root / "textfile" / f"replayssm_smoke_{SERVICE}.prom"
    baselines = [line for line in smoke_file.read_text().splitlines() if line.startswith(BASELINE_LINE)]
    node1.dockerd.docker("stop", "-t", "1", SERVICE)
    try:
        assert _node_job(node1, "metrics").returncode == 0
        stopped = _node_job(node1, "smoke")  # cannot reach the server: the smoke exits 2, the baselines stay
        assert "exited 2" in stopped.stdout, stopped.stdout + stopped.stderr
        assert [line for line in smoke_file.read_text().splitlines() if line.startswith(BASELINE_LINE)] == baselines
        paged = ("ReplaySSMContainerNotRunning", "ReplaySSMSGLangDown")
        firing = observed.wait_for(lambda f: all("node1" in f.get(n, ()) for n in paged), timeout=60)
        assert all("node1" in firing.get(n, set()) for n in paged), firing
        for alert in observed.prom.get("/api/v1/alerts")["data"]["alerts"]:
            if alert["labels"]["alertname"] in paged and alert["state"] == "firing":
                assert _receiver(alert["labels"]) == "sglang-page", alert["labels"]
    finally:
        node1.dockerd.docker("start", SERVICE)
        _wait_healthy(fleet, node1)
        assert _node_job(node1, "metrics").returncode == 0
        assert "exited 0" in _node_job(node1, "smoke").stdout
    cleared = {"ReplaySSMContainerNotRunning", "ReplaySSMSGLangDown", "ReplaySSMSmokeFailed"}
    firing = observed.wait_for(lambda f: not cleared & {n for n, nodes in f.items() if "node1" in nodes})
    assert "node1" not in firing.get("ReplaySSMContainerNotRunning", set()) | firing.get("ReplaySSMSmokeFailed", set())


def test_a_restart_without_traffic_raises_no_false_alarm(fleet, observed):
    """SGLang's labelled counters have no sample until the first request after a start: scrape health is `up`."""
    node1 = fleet.nodes[0]
    observed.send_load_to(*fleet.nodes[1:])
    try:
        node1.dockerd.docker("restart", "-t", "1", SERVICE)
        _wait_healthy(fleet, node1)
        serving_since = time.time()
        instance = f'instance="{node1.address}:{PORT}"'
        up = f'up{{job="sglang",{instance}}}'
        # a scrape of the restarted server (the one before the restart still answers `up` 1, with its counters)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (_value(observed.prom, f"timestamp({up})") or 0) <= serving_since:
            time.sleep(1)
        assert (_value(observed.prom, f"timestamp({up})") or 0) > serving_since
        assert _value(observed.prom, up) == 1
        assert _value(observed.prom, f"sglang:generation_tokens_total{{{instance}}}") is None
        time.sleep(load_alert_rules().seconds(FAST_RULES["for_missing"]) + 5)
        firing = observed.firing()
        assert "node1" not in firing.get("ReplaySSMSGLangNotScraped", set()) | firing.get("ReplaySSMSGLangDown", set())
        assert _value(observed.prom, f"sglang:generation_tokens_total{{{instance}}}") is None  # still no traffic
    finally:
        observed.send_load_to(*fleet.nodes)


def _value(prom, expr: str) -> float | None:
    result = prom.query(expr)["data"]["result"]
    return float(result[0]["value"][1]) if result else None


def _wait_healthy(fleet, node, timeout: float = 60) -> None:
    url = f"http://{node.address}:{PORT}/health"
    probe = f"import urllib.request; urllib.request.urlopen({url!r}, timeout=2)"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if subprocess.run(fleet.netns_cmd(sys.executable, "-c", probe), capture_output=True).returncode == 0:
            return
        time.sleep(0.5)
    raise AssertionError(f"{node.name}: {SERVICE} not healthy within {timeout} s")


def _receiver(labels: dict) -> str:
    """The receiver alertmanager.example.yml routes an alert with `labels` to (amtool)."""
    proc = subprocess.run(
        [
            tool("amtool"),
            "config",
            "routes",
            "test",
            f"--config.file={MONITORING / 'alertmanager.example.yml'}",
            *(f"{key}={value}" for key, value in labels.items()),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return proc.stdout.strip()


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
