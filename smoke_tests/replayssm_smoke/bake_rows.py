"""A canary bake's numbers and verdict: what the canary and the nodes still on the old release served over the
same interval, compared row by row within the operator's tolerances.

Why relative to the old nodes: the same live traffic reaches both through the router during the bake, so
whatever the traffic does to acceptance and latency (thinking mode, a chat template, long contexts) it does
to both; a fixed number would pass a collapsed draft on easy traffic and fail a good one on hard traffic.
The model's baseline (the smoke thresholds' `baseline_accept_length`, the lowest class, as the live alerts
use it) is a second floor for acceptance only. Acceptance is the token-weighted accept length over the bake
(deltas of `sglang:generation_tokens_total` / `sglang:spec_verify_calls_total`, as the smoke's /metrics
cross-check), aborts are `sglang:num_aborted_requests_total` over `sglang:num_requests_total`, latency the
p50 and p99 of SGLang's time-to-first-token and inter-token histograms over the bake. The overlay's facts
(fold in use, fallback shapes, self-check outcomes) must not be worse on the canary than on the old nodes.

Where the requests carry a request class (SGLang's tokenizer custom label `class`, allowed with
`--tokenizer-metrics-allowed-custom-labels class`, as the live alerts read it), acceptance is compared per class
too, each against the old nodes' same class and that class's baseline: a draft that collapses on one class of a
mixed load moves the overall accept length by that class's share only, and can pass on it.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import promseries

COUNTERS = {
    "generation_tokens": "sglang:generation_tokens_total",
    "verify_calls": "sglang:spec_verify_calls_total",
    "requests": "sglang:num_requests_total",
    "aborted": "sglang:num_aborted_requests_total",
}
#: the counters compared per request class (the `class` label), for acceptance
CLASS_LABEL = "class"
CLASS_COUNTERS = ("generation_tokens", "verify_calls", "requests")
HISTOGRAMS = {"ttft": "sglang:time_to_first_token_seconds", "itl": "sglang:inter_token_latency_seconds"}
LATENCY_ROWS = (
    ("TTFT p50 (s)", "ttft", 0.5),
    ("TTFT p99 (s)", "ttft", 0.99),
    ("ITL p50 (s)", "itl", 0.5),
    ("ITL p99 (s)", "itl", 0.99),
)
PASS, FAIL = "ok", "FAIL"


@dataclass(frozen=True)
class Tolerances:
    """How far the canary may fall behind the old nodes (fractions), and the baseline's floor."""

    accept: float = 0.10  # accept length at least old x (1 - accept)
    aborted: float = 0.01  # aborted share at most old's + aborted
    latency: float = 0.50  # each latency quantile at most old x (1 + latency)
    baseline_fraction: float = 0.60  # accept length at least baseline x this (the live alerts' fraction)
    min_requests: int = 100  # requests the canary must have served for any verdict
    min_class_requests: int = 20  # a class's requests on the canary for its own row to be judged (else shown)


def reading(text: str) -> dict:
    """One node's /metrics as the bake keeps it: its counters and latency histogram buckets."""
    series = promseries.samples(text)
    return {
        "counters": {key: promseries.total(series, name) or 0.0 for key, name in COUNTERS.items()},
        "histograms": {key: promseries.buckets(series, name) for key, name in HISTOGRAMS.items()},
        "classes": classes({key: promseries.by_label(series, COUNTERS[key], CLASS_LABEL) for key in CLASS_COUNTERS}),
    }


def classes(by_counter: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """{class: {counter: value}} from {counter: {class: value}}, every class with every counter."""
    names = sorted({cls for values in by_counter.values() for cls in values})
    return {cls: {key: by_counter.get(key, {}).get(cls, 0.0) for key in CLASS_COUNTERS} for cls in names}


def combined(readings: list[dict]) -> dict:
    """Several nodes' readings as one (counters and buckets summed)."""
    out = {"counters": {key: 0.0 for key in COUNTERS}, "histograms": {key: {} for key in HISTOGRAMS}, "classes": {}}
    for one in readings:
        for key in COUNTERS:
            out["counters"][key] += one["counters"][key]
        for key in HISTOGRAMS:
            out["histograms"][key] = promseries.add(out["histograms"][key], one["histograms"][key])
        for cls, counters in one.get("classes", {}).items():
            mine = out["classes"].setdefault(cls, dict.fromkeys(CLASS_COUNTERS, 0.0))
            for key in CLASS_COUNTERS:
                mine[key] += counters[key]
    return out


def _bounds(counts: dict) -> dict[float, float]:
    """Bucket counts keyed by float bounds again (a readings file written as JSON keys them by strings)."""
    return {float(bound): count for bound, count in counts.items()}


def window(start: dict, end: dict) -> dict:
    """What a node group served between two readings."""
    delta = _delta(end["counters"], start["counters"], COUNTERS)
    hist = {
        key: promseries.subtract(_bounds(end["histograms"][key]), _bounds(start["histograms"][key]))
        for key in HISTOGRAMS
    }
    out = {
        "requests": int(delta["requests"]),
        "aborted": int(delta["aborted"]),
        "aborted_share": delta["aborted"] / delta["requests"] if delta["requests"] else None,
        "accept_length": _accept_length(delta),
        "classes": {},
    }
    for label, key, q in LATENCY_ROWS:
        out[label] = promseries.quantile(q, hist[key])
    before = start.get("classes", {})
    for cls, counters in end.get("classes", {}).items():
        served = _delta(counters, before.get(cls, {}), CLASS_COUNTERS)
        if served["requests"]:
            out["classes"][cls] = {"requests": int(served["requests"]), "accept_length": _accept_length(served)}
    return out


def _delta(end: dict, start: dict, keys) -> dict[str, float]:
    """What each counter of `keys` counted from `start` to `end` (one absent at the start counts from 0; a
    counter that went back, a restart, counts as 0)."""
    return {key: max(0.0, end[key] - start.get(key, 0.0)) for key in keys}


def _accept_length(counted: dict) -> float | None:
    """The token-weighted accept length: generated tokens per verify call."""
    return counted["generation_tokens"] / counted["verify_calls"] if counted["verify_calls"] else None


def _row(metric: str, canary, old, baseline, tolerance: str, ok: bool | None) -> dict:
    return {
        "metric": metric,
        "canary": canary,
        "old": old,
        "baseline": baseline,
        "tolerance": tolerance,
        "verdict": "n/a" if ok is None else PASS if ok else FAIL,
    }


def _accept_row(
    canary: dict, old: dict | None, baseline: float | None, tol: Tolerances, metric: str = "accept length"
) -> dict:
    value, before = canary["accept_length"], (old or {}).get("accept_length")
    floors = ([before * (1 - tol.accept)] if before is not None else []) + (
        [baseline * tol.baseline_fraction] if baseline is not None else []
    )
    words = " and ".join(
        ([f">= old x {1 - tol.accept:.2f}"] if before is not None else [])
        + ([f">= baseline x {tol.baseline_fraction:.2f}"] if baseline is not None else [])
    )
    ok = None if value is None or not floors else value >= max(floors)
    return _row(metric, value, before, baseline, words or "-", ok)


def _class_rows(canary: dict, old: dict | None, baselines: dict[str, float], tol: Tolerances) -> list[dict]:
    """One accept-length row per request class the canary served, against the old nodes' same class and the
    class's baseline; a class with fewer than tol.min_class_requests canary requests is shown, not judged (its
    accept length would be a guess)."""
    rows = []
    for cls, served in sorted(canary.get("classes", {}).items()):
        row = _accept_row(
            served, (old or {}).get("classes", {}).get(cls), baselines.get(cls), tol, f"accept length, class {cls}"
        )
        if served["requests"] < tol.min_class_requests:
            row.update(verdict="n/a", tolerance=f"{row['tolerance']} (judged from {tol.min_class_requests} requests)")
        rows.append(row)
    return rows


def _overlay_rows(canary: dict | None, old: dict | None) -> list[dict]:
    if not canary or not old:
        return [
            _row(
                "overlay facts",
                "unknown" if not canary else "read",
                "unknown" if not old else "read",
                None,
                "same as old",
                None,
            )
        ]
    folds = (canary.get("fold_in_use") or [], old.get("fold_in_use") or [])
    new_shapes = sorted(set(canary.get("fallback_shapes") or []) - set(old.get("fallback_shapes") or []))
    outcomes = (sorted(canary.get("selfcheck_outcomes") or {}), sorted(old.get("selfcheck_outcomes") or {}))
    return [
        _row("fold in use", ",".join(folds[0]), ",".join(folds[1]), None, "same as old", folds[0] == folds[1]),
        _row("new fallback shapes", ",".join(new_shapes) or "none", "-", None, "none", not new_shapes),
        _row(
            "self-check outcomes",
            ",".join(outcomes[0]) or "none",
            ",".join(outcomes[1]) or "none",
            None,
            "none the old nodes lack",
            set(outcomes[0]) <= set(outcomes[1]),
        ),
    ]


def compare(
    canary: dict,
    old: dict | None,
    baselines: dict[str, float],
    tol: Tolerances,
    overlay: tuple[dict | None, dict | None] = (None, None),
) -> dict:
    """The bake's verdict: `promote`, `fail` (a row failed) or `no-verdict` (the canary served too few
    requests), with one row per comparison. `old` is None when no node is left on the old release.
    `baselines` are the model's baseline accept lengths by class: the overall row takes the lowest, a class
    row its own class's."""
    rows = [
        _row(
            "requests",
            canary["requests"],
            (old or {}).get("requests"),
            None,
            f"canary >= {tol.min_requests}",
            canary["requests"] >= tol.min_requests,
        ),
        _accept_row(canary, old, min(baselines.values()) if baselines else None, tol),
        *_class_rows(canary, old, baselines, tol),
        _row(
            "aborted share",
            canary["aborted_share"],
            (old or {}).get("aborted_share"),
            None,
            f"<= old + {tol.aborted:.3f}",
            None
            if canary["aborted_share"] is None
            else canary["aborted_share"] <= ((old or {}).get("aborted_share") or 0.0) + tol.aborted,
        ),
    ]
    for label, _, _ in LATENCY_ROWS:
        value, before = canary[label], (old or {}).get(label)
        rows.append(
            _row(
                label,
                value,
                before,
                None,
                f"<= old x {1 + tol.latency:.2f}",
                None if value is None or before is None else value <= before * (1 + tol.latency),
            )
        )
    rows += _overlay_rows(*overlay)
    if canary["requests"] < tol.min_requests:
        verdict = "no-verdict"
    else:
        verdict = "fail" if any(r["verdict"] == FAIL for r in rows) else "promote"
    return {"verdict": verdict, "failed_rows": [r["metric"] for r in rows if r["verdict"] == FAIL], "rows": rows}


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def table(rows: list[dict]) -> str:
    """The side-by-side table: metric, canary, old nodes, baseline, tolerance, verdict."""
    head = ("metric", "canary", "old nodes", "baseline", "tolerance", "verdict")
    body = [
        (r["metric"], _cell(r["canary"]), _cell(r["old"]), _cell(r["baseline"]), r["tolerance"], r["verdict"])
        for r in rows
    ]
    widths = [max(len(line[i]) for line in (head, *body)) for i in range(len(head))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in (head, *body)
    )
