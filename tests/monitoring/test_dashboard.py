"""The Grafana dashboard (deploy/monitoring/grafana-dashboard.json) is importable as Grafana reads it, every
query it runs evaluates in a real Prometheus (the one with data is tests/deploy/test_watch.py), and every
series it or the rules read is one that something in this project writes, so a misspelt name (which
PromQL evaluates to nothing, without an error) cannot pass."""

from __future__ import annotations

import json
import re

import yaml

from tests.monitoring.conftest import MONITORING, REPO, load_alert_rules

DASHBOARD = json.loads((MONITORING / "grafana-dashboard.json").read_text())
PANELS = [p for p in DASHBOARD["panels"] if p["type"] != "row"]
WRITERS = {  # who writes which series: the names as the writers spell them
    "overlay": REPO / "overlay" / "replayssm_overlay" / "metrics.py",
    "smoke": REPO / "smoke_tests" / "replayssm_smoke" / "prom.py",
    "node job": REPO / "deploy" / "roles" / "sglang_monitor" / "files" / "sglang-node-monitor",
    "SGLang (as the double serves it)": REPO / "tests" / "doubles" / "sglang_server.py",
}
SERIES = re.compile(r"\b(replayssm(?:_[a-z0-9_]+|:[a-z0-9_:]+)|sglang:[a-z0-9_]+|ALERTS)\b")


def _queries() -> list[str]:
    queries = [t["expr"] for p in PANELS for t in p["targets"]]
    return queries + [v["definition"] for v in DASHBOARD["templating"]["list"] if v["type"] == "query"]


def test_the_dashboard_is_importable():
    assert DASHBOARD["uid"] == "replayssm-fleet" and DASHBOARD["title"] and DASHBOARD["schemaVersion"] >= 36
    variables = {v["name"]: v for v in DASHBOARD["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in DASHBOARD["panels"]]
    assert len(ids) == len(set(ids))
    cells = set()
    for panel in DASHBOARD["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24
        area = {
            (x, y) for x in range(grid["x"], grid["x"] + grid["w"]) for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not area & cells, f"{panel['title']} overlaps another panel"
        cells |= area
    for panel in PANELS:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["targets"] and all(t["expr"] and t["refId"] for t in panel["targets"]), panel["title"]
        assert panel["description"], panel["title"]
    titles = " ".join(p["title"].lower() for p in PANELS)
    assert "accept length per node" in titles and "fold in use" in titles and "smoke history" in titles


def test_every_panel_follows_the_host_and_service_variables():
    for panel in PANELS:
        for target in panel["targets"]:
            assert "$host" in target["expr"] and "$service" in target["expr"], (panel["title"], target["expr"])


def test_every_query_evaluates(empty_prometheus):
    for expr in _queries():
        concrete = expr.replace("$host", ".+").replace("$service", ".+")
        if concrete.startswith("label_values("):
            concrete = concrete[len("label_values(") :].split(",")[0]
        answer = empty_prometheus.query(concrete)
        assert answer["status"] == "success", (expr, answer)


def test_every_series_read_is_one_the_project_writes():
    written = {name for path in WRITERS.values() for name in SERIES.findall(path.read_text())}
    rules = yaml.safe_load(load_alert_rules().render())["groups"][0]["rules"]
    written |= {r["record"] for r in rules if "record" in r} | {"ALERTS"}
    read = {name for expr in _queries() + [r["expr"] for r in rules] for name in SERIES.findall(expr)}
    assert read and read <= written, f"read but written by nothing: {sorted(read - written)}"
