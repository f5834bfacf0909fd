"""The /metrics cross-check: the run's accept length from Prometheus counter deltas.

0.5.19 (observability/metrics_collector.py) counts `sglang:generation_tokens_total` and
`sglang:spec_verify_calls_total` per finished request, so their deltas over the generation phase give
the run's token-weighted accept length independently of the per-request fields. The gauges
`sglang:spec_accept_length` / `sglang:spec_accept_rate` are windowed (last logging interval) and only
recorded for information. /metrics exists only with --enable-metrics; without it the check is skipped.
"""

from __future__ import annotations

import re

from . import httpclient

GEN_TOKENS = "sglang:generation_tokens_total"
VERIFY_CALLS = "sglang:spec_verify_calls_total"
GAUGES = ("sglang:spec_accept_length", "sglang:spec_accept_rate")
_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{.*\})?\s+(\S+)")


def parse(text: str) -> dict[str, float]:
    """Sum of each metric's samples over all label sets (Prometheus text format)."""
    totals: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        totals[m.group(1)] = totals.get(m.group(1), 0.0) + value
    return totals


def snapshot(url: str, timeout: float) -> dict[str, float] | None:
    """The parsed /metrics, or None when the server serves none (no --enable-metrics)."""
    try:
        return parse(httpclient.get_text(url + "/metrics", timeout))
    except httpclient.HttpStatusError:
        return None


def cross_check(
    before: dict | None, after: dict | None, from_requests: float | None, max_relative_diff: float | None
) -> dict:
    result = {
        "available": False,
        "accept_length_from_metrics": None,
        "accept_length_from_requests": from_requests,
        "relative_diff": None,
        "max_relative_diff": max_relative_diff,
        "passed": None,
        "gauges": {},
        "note": "",
    }
    if before is None or after is None:
        result["note"] = "no /metrics (start the server with --enable-metrics to cross-check)"
        return result
    result["gauges"] = {g: after[g] for g in GAUGES if g in after}
    if VERIFY_CALLS not in after:
        result["note"] = f"/metrics has no {VERIFY_CALLS}"
        return result
    tokens = after.get(GEN_TOKENS, 0.0) - before.get(GEN_TOKENS, 0.0)
    verifies = after.get(VERIFY_CALLS, 0.0) - before.get(VERIFY_CALLS, 0.0)
    if verifies <= 0:
        result["note"] = f"{VERIFY_CALLS} did not move during the run"
        result["passed"] = False if max_relative_diff is not None else None
        return result
    from_metrics = tokens / verifies
    result.update(available=True, accept_length_from_metrics=from_metrics)
    if from_requests:
        diff = abs(from_metrics - from_requests) / from_requests
        result["relative_diff"] = diff
        if max_relative_diff is not None:
            result["passed"] = diff <= max_relative_diff
            if not result["passed"]:
                result["note"] = "counters are server-wide: other traffic during the run also moves them"
    return result
