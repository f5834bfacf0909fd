"""The node job (deploy/roles/sglang_monitor/files/sglang-node-monitor) on this machine, its Docker calls
answered in-process: the overlay's lines are appended only when node_exporter's textfile collector would
serve them as written (checked against a real node_exporter on 127.0.0.1, which drops the whole file for one
line it cannot parse),
and temp files a killed run left are removed by the next run. (The job against real containers:
tests/deploy/test_watch.py.)"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import subprocess
import time

import pytest

from replayssm_overlay import metrics
from tests.infra.prometheus import NodeExporter
from tests.monitoring.conftest import REPO

SCRIPT = REPO / "deploy" / "roles" / "sglang_monitor" / "files" / "sglang-node-monitor"
LABELS = {"service": "svc", "sglang_port": "30000"}


def _load():
    loader = importlib.machinery.SourceFileLoader("sglang_node_monitor", str(SCRIPT))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(module)
    return module


MONITOR = _load()
GOOD = metrics.exposition(
    metrics.facts(
        {
            "overlay_version": "0.1.0",
            "release": "0.5.19",
            "state": "patched",
            "kernels": {"fold": "overlay-cuda", "fallbacks_recorded": [{"shape": 'B=8 "T"=16 \\ x\ny', "pid": 1}]},
            "selfcheck": [],
        }
    ),
    LABELS,
)
BAD = {
    "a line that is no sample": GOOD + "replayssm_overlay_extra{service=svc} 1\n",
    "a family the node job writes": GOOD.replace("replayssm_overlay_info", "replayssm_node_container_running"),
    "a family split in two": GOOD + 'replayssm_overlay_info{service="svc",sglang_port="30000"} 1\n',
    "a series written twice": 'x{a="1"} 1\nx{a="1"} 2\n',
    "another label set in one family": 'x{a="1"} 1\nx{b="1"} 1\n',
    "a client-side timestamp": 'x{a="1"} 1 1700000000000\n',
    "a second TYPE line": "# TYPE x gauge\nx 1\n# TYPE x gauge\n",
}


@pytest.fixture(scope="module")
def exporter(tmp_path_factory):
    """A real node_exporter on 127.0.0.1 reading a folder the tests write one file into."""
    root = tmp_path_factory.mktemp("node-exporter")
    (root / "textfile").mkdir()
    daemon = NodeExporter(root, root / "textfile")
    try:
        daemon.wait_ready()
        yield daemon, root / "textfile"
    finally:
        daemon.stop()


def _served_as_written(exporter, text: str) -> bool:
    """Whether node_exporter serves every sample of `text` (after the job's own lines) as written: it drops
    the whole file for a line it cannot parse, and merges, fills or drops what breaks the format's rules."""
    daemon, folder = exporter
    (folder / "case.prom").write_text(text)
    status, body = daemon._http(daemon.url + "/metrics")
    served = set(body.decode().splitlines())
    samples = [line for line in text.splitlines() if line and not line.startswith("#")]
    return status == 200 and "node_textfile_scrape_error 0" in served and all(line in served for line in samples)


OWN = MONITOR.Lines(LABELS)
OWN.add("replayssm_node_container_running", "1 if the service's container runs.", 1)


def test_the_overlays_output_passes_the_check_and_node_exporter(exporter):
    assert MONITOR.exposition_problem(GOOD, {"replayssm_node_container_running"}) is None
    assert _served_as_written(exporter, OWN.text() + GOOD)


@pytest.mark.parametrize("case", list(BAD))
def test_what_node_exporter_would_not_serve_as_written_the_check_refuses(exporter, case):
    problem = MONITOR.exposition_problem(BAD[case], {"replayssm_node_container_running"})
    assert problem and problem.startswith("line "), problem
    assert not _served_as_written(exporter, OWN.text() + BAD[case])


def _config(tmp_path) -> dict:
    folder = tmp_path / "textfile"
    folder.mkdir(exist_ok=True)
    return {
        "service": "svc",
        "port": 30000,
        "docker": "docker",
        "docker_host": "unix:///nonexistent",
        "python": "python3",
        "textfile_dir": str(folder),
        "smoke": {"enabled": True},
    }


def _answers(overlay_text: str):
    """Docker as the job sees it: a running container, and `replayssm-overlay metrics` printing `overlay_text`."""
    container = {
        "State": {"Running": True},
        "Image": "sha256:abc",
        "Config": {"Labels": {}, "Image": "rso:1", "Cmd": ["--enable-metrics"]},
    }

    def docker(config, *args, timeout=60):
        out = json.dumps([container]) if args[0] == "inspect" else overlay_text
        return subprocess.CompletedProcess(args, 0, out, "")

    return docker


def test_a_bad_overlay_output_is_left_out_and_said(tmp_path, monkeypatch, capsys):
    config = _config(tmp_path)
    monkeypatch.setattr(MONITOR, "docker", _answers(BAD["a family split in two"]))
    assert MONITOR.metrics(config) == 0
    text = (tmp_path / "textfile" / "replayssm_node_svc.prom").read_text()
    assert 'replayssm_node_overlay_metrics_ok{reason="bad-exposition",service="svc",sglang_port="30000"} 0' in text
    assert "replayssm_overlay_" not in text
    assert "the samples of replayssm_overlay_info are not together" in capsys.readouterr().err
    monkeypatch.setattr(MONITOR, "docker", _answers(GOOD))
    assert MONITOR.metrics(config) == 0
    text = (tmp_path / "textfile" / "replayssm_node_svc.prom").read_text()
    assert 'replayssm_node_overlay_metrics_ok{reason="",service="svc",sglang_port="30000"} 1' in text
    assert text.endswith(GOOD)


def test_temp_files_a_killed_run_left_are_removed(tmp_path, monkeypatch):
    config = _config(tmp_path)
    folder = tmp_path / "textfile"
    dead = [folder / ".replayssm_node_svc.prom.k1l2.tmp", folder / ".replayssm_smoke_svc.prom.x9.rso-tmp"]
    alive = [folder / ".replayssm_node_svc.prom.new.tmp", folder / ".replayssm_node_other.prom.old.tmp"]
    for path in dead + alive:
        path.write_text("half")
    an_hour_ago = time.time() - 3600
    for path in (*dead, alive[1]):
        os.utime(path, (an_hour_ago, an_hour_ago))
    monkeypatch.setattr(MONITOR, "docker", _answers(GOOD))
    assert MONITOR.metrics(config) == 0
    assert sorted(p.name for p in folder.iterdir()) == sorted([p.name for p in alive] + ["replayssm_node_svc.prom"])
