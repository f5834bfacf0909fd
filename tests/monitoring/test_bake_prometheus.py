"""The canary bake's numbers from a real Prometheus (Debian's), scraping stand-in SGLang servers on 127.0.0.1
every second: its reading of a node equals the node's own /metrics once the node is idle, a bake with
--prometheus judges Prometheus's numbers and says so, a Prometheus stopped mid-bake leaves the nodes' /metrics
(read at the same instants) to judge and says that, and the preflight refuses a job Prometheus does not scrape
or a bake shorter than one scrape interval of the job (with a valid one as the control).
"""

from __future__ import annotations

import threading
import time

import pytest

from replayssm_smoke import bake, bake_prometheus, bake_rows, httpclient
from tests.infra.prometheus import Prometheus
from tests.smoke.conftest import double  # noqa: F401 (the stand-in SGLang server fixture)
from tests.smoke.test_bake import CLASSES, LIVE, MIXED, MODEL, QUICK, _bake, _row, _traffic

SCRAPE = "1s"


def _scraping(root, targets: list[str], interval: str) -> Prometheus:
    """A Prometheus scraping `targets` (base URLs) as job sglang every `interval`; with the scrape interval of
    the tests, once each has been scraped."""
    config = {
        "global": {"scrape_interval": "1m", "evaluation_interval": "1m"},
        "scrape_configs": [
            {
                "job_name": "sglang",
                "scrape_interval": interval,
                "scrape_timeout": interval,
                "static_configs": [{"targets": [bake_prometheus.instance(t) for t in targets]}],
            }
        ],
    }
    prom = Prometheus(root, config)
    prom.wait_ready()
    if interval != SCRAPE:
        return prom
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        up = prom.query('up{job="sglang"} == 1')["data"]["result"]
        if len(up) == len(targets):
            return prom
        time.sleep(0.3)
    prom.stop()
    raise AssertionError(f"Prometheus did not scrape {targets}: {prom.log_tail()}")


@pytest.fixture
def prometheus(tmp_path):
    """prometheus(targets, interval) -> a Prometheus scraping them; stopped at teardown."""
    started: list[Prometheus] = []

    def start(targets: list[str], interval: str = SCRAPE) -> Prometheus:
        started.append(_scraping(tmp_path / f"prometheus-{len(started)}", targets, interval))
        return started[-1]

    yield start
    for prom in started:
        prom.stop()


def test_prometheus_reads_a_node_as_its_own_metrics_do(double, prometheus):  # noqa: F811
    node = double(*QUICK, *CLASSES)
    prom = prometheus([node])
    _traffic([node], 6, MIXED)
    own = bake_rows.reading(httpclient.get_text(node + "/metrics", 10))
    assert own["counters"]["requests"] == 6 and own["histograms"]["itl"]
    assert {cls: c["requests"] for cls, c in own["classes"].items()} == {"code": 4, "prose": 2}
    reader, deadline = bake_prometheus.Prometheus(prom.url, "sglang"), time.monotonic() + 30
    while (read := reader.reading(node, time.time()))["counters"]["requests"] < 6 and time.monotonic() < deadline:
        time.sleep(0.3)  # until a scrape after the last request
    assert read == own


def test_a_bake_takes_its_numbers_from_prometheus_and_says_so(double, prometheus, tmp_path):  # noqa: F811
    canary = double(*QUICK, "--accept-length-for", f"{LIVE}=1.0")
    old = double(*QUICK)
    prom = prometheus([canary, old])
    rc, result = _bake(tmp_path, canary, [old], 12, 10, seconds="3", measure_args=("--prometheus", prom.url))
    assert result["source"] == f"Prometheus {prom.url} (job sglang)", result
    assert result["table"].endswith(f"numbers from Prometheus {prom.url} (job sglang)")
    assert rc == 1 and "accept length" in result["failed_rows"], result["table"]
    assert _row(result, "requests")["canary"] >= 10 and _row(result, "requests")["old"] >= 10


def test_prometheus_stopped_mid_bake_leaves_the_nodes_metrics_and_says_so(double, prometheus, tmp_path):  # noqa: F811
    canary = double(*QUICK, "--accept-length-for", f"{LIVE}=1.0")
    old = double(*QUICK)
    prom = prometheus([canary, old])
    stopper = threading.Timer(1.0, prom.stop)
    stopper.start()
    try:
        rc, result = _bake(tmp_path, canary, [old], 12, 10, seconds="3", measure_args=("--prometheus", prom.url))
    finally:
        stopper.join()
    assert result["source"].startswith(f"the nodes' /metrics, as Prometheus at {prom.url} does not answer"), result
    assert "numbers from the nodes' /metrics, as Prometheus" in result["table"]
    assert rc == 1 and "accept length" in result["failed_rows"], result["table"]
    assert _row(result, "requests")["canary"] >= 10


def _check(prom: Prometheus, seconds: str, job: str = "sglang") -> list[str]:
    return [
        "check",
        "--model",
        MODEL,
        "--algorithm",
        "DFLASH",
        "--seconds",
        seconds,
        "--poll",
        "5",
        "--prometheus",
        prom.url,
        "--prometheus-job",
        job,
    ]


def test_a_bake_shorter_than_one_scrape_interval_or_an_unknown_job_is_refused(double, prometheus, capsys):  # noqa: F811
    prom = prometheus([double()], interval="30s")
    assert bake.main(_check(prom, "20")) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"a bake of 20 s is shorter than one scrape interval (30 s) of job 'sglang' at {prom.url}" in err
    assert bake.main(_check(prom, "20", job="vllm")) == 2
    assert f"Prometheus at {prom.url} has no scrape job 'vllm' (its jobs: sglang)" in capsys.readouterr().err
    assert bake.main(_check(prom, "60")) == 0  # the control: a bake of two scrape intervals
