"""Prometheus text read back as labelled samples, and quantiles from histogram bucket deltas.

Why not `metrics.parse`: it sums every label set of a name into one number, which is right for counters
and wrong for a histogram, whose `_bucket` samples differ only in their `le` label. A canary bake needs
the latency histograms SGLang exports (`sglang:time_to_first_token_seconds`,
`sglang:inter_token_latency_seconds`) as bucket counts by bound, summed over the other labels (ranks,
`is_streaming`) and over nodes, and their quantiles over an interval, interpolated within a bucket as
PromQL's `histogram_quantile` does. Standard library only.
"""

from __future__ import annotations

import math
import re

_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    """(name, labels, value) for every sample line of a Prometheus text exposition."""
    out = []
    for line in text.splitlines():
        match = _SAMPLE.match(line) if line and not line.startswith("#") else None
        if not match:
            continue
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        out.append((match.group(1), dict(_LABEL.findall(match.group(2) or "")), value))
    return out


def total(series: list, name: str) -> float | None:
    """The sum of `name` over its label sets; None when the exposition has no such sample."""
    values = [value for n, _, value in series if n == name]
    return sum(values) if values else None


def by_label(series: list, name: str, label: str) -> dict[str, float]:
    """The sum of `name` per value of `label`, over the samples whose `label` is set and not empty."""
    out: dict[str, float] = {}
    for n, labels, value in series:
        if n == name and labels.get(label):
            out[labels[label]] = out.get(labels[label], 0.0) + value
    return out


def buckets(series: list, name: str) -> dict[float, float]:
    """Histogram `name`'s cumulative counts by upper bound (+Inf included), summed over the other labels."""
    out: dict[float, float] = {}
    for n, labels, value in series:
        if n == name + "_bucket" and "le" in labels:
            bound = math.inf if labels["le"] in ("+Inf", "Inf") else float(labels["le"])
            out[bound] = out.get(bound, 0.0) + value
    return out


def add(a: dict[float, float], b: dict[float, float]) -> dict[float, float]:
    return {bound: a.get(bound, 0.0) + b.get(bound, 0.0) for bound in set(a) | set(b)}


def subtract(end: dict[float, float], start: dict[float, float]) -> dict[float, float]:
    """The counts observed between two readings (a counter reset, a restart, reads as the end's counts)."""
    if any(end.get(bound, 0.0) < count for bound, count in start.items()):
        return dict(end)
    return {bound: end.get(bound, 0.0) - start.get(bound, 0.0) for bound in end}


def quantile(q: float, counts: dict[float, float]) -> float | None:
    """The q-quantile (0..1) of cumulative bucket counts, linear within its bucket from the bucket below (0 for
    the first), the highest finite bound when it falls in +Inf; None without observations."""
    bounds = sorted(counts)
    observed = counts.get(math.inf, counts[bounds[-1]] if bounds else 0.0)
    if observed <= 0:
        return None
    rank = q * observed
    lower, below = 0.0, 0.0
    for bound in bounds:
        if counts[bound] >= rank:
            if math.isinf(bound):
                return lower
            inside = counts[bound] - below
            return lower + (bound - lower) * ((rank - below) / inside if inside > 0 else 1.0)
        lower, below = bound, counts[bound]
    return lower
