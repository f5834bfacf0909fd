"""Shared pieces of the monitoring tests: the rules generator (deploy/monitoring/alert_rules.py) loaded by
path, and a real Prometheus on 127.0.0.1 that scrapes nothing and has the generated rules loaded (the
dashboard's queries and the rules are evaluated by it), stopped by PID."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.infra.prometheus import Prometheus, tool

REPO = Path(__file__).resolve().parents[2]
MONITORING = REPO / "deploy" / "monitoring"


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
