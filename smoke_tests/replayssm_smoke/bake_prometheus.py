"""The canary bake's numbers from the operator's Prometheus (its HTTP API), in the same shape as a reading of a
node's /metrics, so that one verdict code judges both.

Why raw counters at the bake's two instants, not the alerts' recording rules: those are rates over their own
window (`live_window`, 10 m by default), while the bake compares exactly its own interval, which may be shorter.
An instant query of a counter at the bake's start and at its end returns the last sample scraped at or before
each, so the delta covers the bake to within one scrape interval on both sides (hence a bake shorter than one
scrape interval of the job is refused) and counts a fresh container's first requests, which `increase()`
misses. A node is found by its scrape job and the `instance` Prometheus gives it, which must be the host:port
the controller and the router reach it at. A Prometheus that does not answer, that has no target for a node, or
whose counters went back within the window (a restart) raises `PrometheusUnusable`; the bake then judges the
nodes' own /metrics, read at the same instants, and says so.
"""

from __future__ import annotations

import json
import re
import urllib.parse

from . import bake_rows, httpclient
from .errors import SmokeEnvironmentError

READ_TIMEOUT_S = 10.0
_DURATION = re.compile(r"([0-9]+)(ms|s|m|h|d|w|y)")
_UNIT_S = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


class PrometheusUnusable(SmokeEnvironmentError):
    """Prometheus cannot give the bake's numbers: it does not answer, or lacks a node's series."""

    code = "bake-prometheus-unusable"


def duration_s(text: str) -> float:
    """A Prometheus duration (`15s`, `1m30s`) in seconds."""
    return sum(float(n) * _UNIT_S[unit] for n, unit in _DURATION.findall(text))


def instance(url: str) -> str:
    """The `instance` label a scrape of `url`'s /metrics carries: its host:port."""
    parts = urllib.parse.urlsplit(url)
    host = f"[{parts.hostname}]" if ":" in (parts.hostname or "") else parts.hostname
    return f"{host}:{parts.port or (443 if parts.scheme == 'https' else 80)}"


class Prometheus:
    """The operator's Prometheus at `url`, reading the series of scrape job `job`."""

    def __init__(self, url: str, job: str):
        self.url, self.job = url.rstrip("/"), job

    def _api(self, path: str, **params) -> dict:
        endpoint = f"{self.url}/api/v1/{path}"
        url = f"{endpoint}?{urllib.parse.urlencode(params)}" if params else endpoint
        try:
            answer = httpclient.get_json(url, READ_TIMEOUT_S)
        except SmokeEnvironmentError as exc:  # named by its endpoint: a query's URL is long
            raise PrometheusUnusable(
                f"Prometheus at {self.url} does not answer: {exc.what.replace(url, endpoint)}"
            ) from None
        if not isinstance(answer, dict) or answer.get("status") != "success":
            raise PrometheusUnusable(f"Prometheus at {self.url} refused /api/v1/{path}: {str(answer)[:300]}")
        return answer["data"]

    def scrape_interval(self) -> float:
        """Seconds between two scrapes of the job, from the configuration Prometheus runs with."""
        import yaml

        config = yaml.safe_load(self._api("status/config")["yaml"]) or {}
        for job in config.get("scrape_configs") or []:
            if job.get("job_name") == self.job:
                return duration_s(str(job.get("scrape_interval") or config["global"]["scrape_interval"]))
        jobs = ", ".join(j.get("job_name", "?") for j in config.get("scrape_configs") or []) or "none"
        raise PrometheusUnusable(f"Prometheus at {self.url} has no scrape job {self.job!r} (its jobs: {jobs})")

    def _vector(self, expr: str, at: float) -> list[tuple[dict, float]]:
        data = self._api("query", query=expr, time=f"{at:.3f}")
        return [(item["metric"], float(item["value"][1])) for item in data.get("result") or []]

    def _selector(self, node_instance: str, *matchers: str) -> str:
        return (
            "{" + ", ".join([f"job={json.dumps(self.job)}", f"instance={json.dumps(node_instance)}", *matchers]) + "}"
        )

    def reading(self, url: str, at: float) -> dict:
        """What the node at `url` had counted at time `at` (its last scrape at or before it), as
        bake_rows.reading has it from /metrics."""
        where = self._selector(instance(url))
        if not self._vector(f"up{where}", at):
            raise PrometheusUnusable(
                f"Prometheus at {self.url} has no target {instance(url)} in job {self.job!r} at the bake's "
                "start or end: scrape each node's SGLang under the host:port the router reaches it at"
            )
        counters = {}
        for key, name in bake_rows.COUNTERS.items():
            counters[key] = sum(value for _, value in self._vector(f"sum({name}{where})", at))
        histograms = {}
        for key, name in bake_rows.HISTOGRAMS.items():
            rows = self._vector(f"sum by (le) ({name}_bucket{where})", at)
            histograms[key] = {float(labels["le"]): value for labels, value in rows if "le" in labels}
        label = bake_rows.CLASS_LABEL
        labelled = self._selector(instance(url), f'{label}!=""')
        by_counter = {
            key: {
                labels[label]: value
                for labels, value in self._vector(f"sum by ({label}) ({bake_rows.COUNTERS[key]}{labelled})", at)
            }
            for key in bake_rows.CLASS_COUNTERS
        }
        return {"counters": counters, "histograms": histograms, "classes": bake_rows.classes(by_counter)}

    def readings(self, nodes: list[tuple[str, str]], start: float, end: float) -> tuple[dict, dict]:
        """Every node's reading at `start` and at `end`; unusable when a counter went back in between."""
        first = {name: self.reading(url, start) for name, url in nodes}
        last = {name: self.reading(url, end) for name, url in nodes}
        for name, _ in nodes:
            went_back = [k for k, v in first[name]["counters"].items() if last[name]["counters"][k] < v]
            if went_back or _bucket_went_back(first[name]["histograms"], last[name]["histograms"]):
                raise PrometheusUnusable(
                    f"Prometheus at {self.url}: {name}'s counters went back during the bake (a restart)"
                )
        return first, last


def _bucket_went_back(first: dict, last: dict) -> bool:
    return any(last[key].get(bound, 0.0) < count for key in first for bound, count in first[key].items())
