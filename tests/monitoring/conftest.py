"""Shared pieces of the monitoring tests: the rules generator (deploy/monitoring/alert_rules.py) loaded by
path, and a real Prometheus on 127.0.0.1 that scrapes nothing and has the generated rules loaded (the
dashboard's queries and the rules are evaluated by it), stopped by PID."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.infra.prometheus import Prometheus, tool

REPO = Path(__file__).resolve().parents[2]
MONITORING = REPO / "deploy" / "monitoring"
DEPLOY = REPO / "deploy"
BIN = Path(sys.executable).parent
#: the inventory of alerts.yml in the tests: the Prometheus host is this machine (connection local)
PROMETHEUS_HOST = {
    "sglang_prometheus": {
        "hosts": {"localhost": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}}
    }
}


def ansible_playbook(tmp_path: Path, playbook: str, inventory: dict, **extra_vars) -> subprocess.CompletedProcess:
    """deploy/playbooks/<playbook> run on this machine against `inventory`, each extra var passed as JSON."""
    path = tmp_path / "inventory.json"
    path.write_text(json.dumps(inventory))
    args = [arg for key, value in extra_vars.items() for arg in ("-e", json.dumps({key: value}))]
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(DEPLOY / "ansible.cfg"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_DEPRECATION_WARNINGS="False",
        ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"),
        PATH=f"{BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
    )
    return subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(path), str(DEPLOY / "playbooks" / playbook), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=DEPLOY,
        timeout=300,
    )


def flat(proc: subprocess.CompletedProcess) -> str:
    """A run's output on one line, as messages wrap."""
    return " ".join((proc.stdout + proc.stderr).split())


def load_alert_rules():
    spec = importlib.util.spec_from_file_location("alert_rules", MONITORING / "alert_rules.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def promtool() -> str:
    return tool("promtool")


@pytest.fixture
def empty_prometheus(tmp_path):
    """A Prometheus on 127.0.0.1 that scrapes nothing, with the generated rules loaded."""
    rules = tmp_path / "rules.yml"
    rules.write_text(load_alert_rules().render())
    prom = Prometheus(tmp_path / "prometheus", {"global": {"evaluation_interval": "1s"}, "rule_files": [str(rules)]})
    try:
        prom.wait_ready()
        yield prom
    finally:
        prom.stop()
