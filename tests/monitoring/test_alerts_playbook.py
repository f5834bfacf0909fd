"""deploy/playbooks/alerts.yml (role sglang_alerts) with real Ansible on this machine (connection local) and a
real Prometheus on 127.0.0.1 that reads the rules folder: installed, checked by promtool first, reloaded and
served; a rerun changes nothing; a folder that does not exist, a missing promtool, a bad setting and rules
promtool refuses each stop the play with the installed file as it was.
"""

from __future__ import annotations

import json

import pytest
import yaml

from tests.infra.prometheus import Prometheus
from tests.monitoring.conftest import MONITORING, PROMETHEUS_HOST, ansible_playbook, flat, load_alert_rules

RULES_FILE = "replayssm.rules.yml"


def _play(tmp_path, **extra):
    return ansible_playbook(tmp_path, "alerts.yml", PROMETHEUS_HOST, **extra)


@pytest.fixture
def prometheus(tmp_path):
    rules = tmp_path / "rules.d"
    rules.mkdir()
    prom = Prometheus(
        tmp_path / "prometheus", {"global": {"evaluation_interval": "1s"}, "rule_files": [f"{rules}/*.yml"]}
    )
    try:
        prom.wait_ready()
        yield prom, rules
    finally:
        prom.stop()


def test_installs_checks_reloads_and_a_rerun_changes_nothing(tmp_path, prometheus):
    prom, rules = prometheus
    dashboards = tmp_path / "dashboards"
    dashboards.mkdir()
    settings = {
        "sglang_alerts_rules_dir": str(rules),
        "sglang_alerts_prometheus_url": prom.url,
        "sglang_alerts_dashboard_dir": str(dashboards),
        "sglang_alerts_settings": {"accept_ratio": 0.5},
    }
    proc = _play(tmp_path, **settings)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "Prometheus reloaded and serves them" in flat(proc)
    installed = (rules / RULES_FILE).read_text()
    assert installed == load_alert_rules().render({"accept_ratio": 0.5})
    groups = prom.get("/api/v1/rules")["data"]["groups"]
    assert [(g["name"], g["file"], len(g["rules"])) for g in groups] == [
        ("replayssm", str(rules / RULES_FILE), len(yaml.safe_load(installed)["groups"][0]["rules"]))
    ]
    assert json.loads((dashboards / "replayssm-fleet.json").read_text()) == json.loads(
        (MONITORING / "grafana-dashboard.json").read_text()
    )
    again = _play(tmp_path, **settings)
    assert again.returncode == 0 and "changed=0" in again.stdout, again.stdout[-3000:]


def test_a_rules_folder_that_does_not_exist_is_refused(tmp_path):
    missing = tmp_path / "etc" / "prometheus" / "rules.d"
    proc = _play(tmp_path, sglang_alerts_rules_dir=str(missing))
    assert proc.returncode != 0
    assert f"{missing} does not exist (or is not a folder); nothing was installed" in flat(proc)
    assert not (tmp_path / "etc").exists()


def test_rules_promtool_refuses_leave_the_installed_file_as_it_was(tmp_path):
    rules = tmp_path / "rules.d"
    rules.mkdir()
    assert _play(tmp_path, sglang_alerts_rules_dir=str(rules)).returncode == 0
    before = (rules / RULES_FILE).read_bytes()
    proc = _play(tmp_path, sglang_alerts_rules_dir=str(rules), sglang_alerts_settings={"live_window": "0s"})
    assert proc.returncode != 0
    assert "failed to validate" in flat(proc) and "duration must be greater than 0" in flat(proc)
    assert (rules / RULES_FILE).read_bytes() == before
    assert sorted(p.name for p in rules.iterdir()) == [RULES_FILE]


@pytest.mark.parametrize("case", ["bad setting", "no promtool", "no rules folder given"])
def test_refusals_install_nothing(tmp_path, case):
    rules = tmp_path / "rules.d"
    rules.mkdir()
    extra, message = {
        "bad setting": (
            {"sglang_alerts_settings": {"accept_ratio": 2}},
            "accept_ratio must be a number in (0, 1], got 2; nothing was installed.",
        ),
        "no promtool": (
            {"sglang_alerts_promtool": "/nonexistent/promtool"},
            "/nonexistent/promtool not found; it checks the rules before they are installed",
        ),
        "no rules folder given": (
            {"sglang_alerts_rules_dir": ""},
            "set sglang_alerts_rules_dir to the absolute path of the folder Prometheus reads",
        ),
    }[case]
    proc = _play(tmp_path, **{"sglang_alerts_rules_dir": str(rules), **extra})
    assert proc.returncode != 0
    assert message in flat(proc), proc.stdout[-3000:]
    assert list(rules.iterdir()) == []
