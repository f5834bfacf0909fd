"""Acceptance per workload class, from each response's meta_info, and its gates.

Per request (0.5.19 tokenizer_manager._calculate_spec_decoding_metrics): accept length is
`completion_tokens / spec_verify_ct` (bonus token included, the same number as `spec_accept_length`);
`spec_accept_rate` and `spec_num_correct_drafts` are carried along. SGLang omits these fields when a
request made no verify step (e.g. it finished at its first token); such requests are counted as
`without_verify` and not averaged.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import SmokeEnvironmentError
from .runner import Generation


@dataclass(frozen=True)
class RequestAcceptance:
    prompt_id: str
    cls: str
    completion_tokens: int
    verify_ct: int | None
    accept_length: float | None
    accept_rate: float | None


def per_request(gen: Generation) -> RequestAcceptance:
    meta = gen.meta
    verify = meta.get("spec_verify_ct")
    completion = meta["completion_tokens"]
    if isinstance(verify, int) and verify > 0:
        accept = completion / verify
    else:
        verify, accept = None, None
    rate = meta.get("spec_accept_rate")
    return RequestAcceptance(
        gen.prompt.id, gen.prompt.cls, completion, verify, accept, rate if isinstance(rate, (int, float)) else None
    )


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), q in [0, 100]."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summarize(rows: list[RequestAcceptance]) -> dict:
    lengths = [r.accept_length for r in rows if r.accept_length is not None]
    rates = [r.accept_rate for r in rows if r.accept_rate is not None]
    measured = [r for r in rows if r.verify_ct]
    out = {
        "requests": len(lengths),
        "without_verify": len(rows) - len(lengths),
        "mean_accept_length": sum(lengths) / len(lengths) if lengths else None,
        "p10": percentile(lengths, 10) if lengths else None,
        "p50": percentile(lengths, 50) if lengths else None,
        "p90": percentile(lengths, 90) if lengths else None,
        "token_weighted_accept_length": (
            sum(r.completion_tokens for r in measured) / sum(r.verify_ct for r in measured) if measured else None
        ),
        "mean_accept_rate": sum(rates) / len(rates) if rates else None,
        "completion_tokens": sum(r.completion_tokens for r in measured),
        "verify_ct": sum(r.verify_ct for r in measured),
    }
    return out


def aggregate(gens: list[Generation], url: str) -> tuple[list[RequestAcceptance], dict[str, dict]]:
    rows = [per_request(g) for g in gens]
    if not any(r.verify_ct for r in rows):
        raise SmokeEnvironmentError(
            f"{url} reports speculative decoding but no response carried meta_info.spec_verify_ct",
            "check that the server really speculates (its log shows 'accept len'); prompts need max_new_tokens >= 2",
        )
    classes = sorted({r.cls for r in rows})
    return rows, {cls: summarize([r for r in rows if r.cls == cls]) for cls in classes}


def gate(cls: str, stats: dict, gates: dict[str, float] | None) -> dict:
    """Apply a class's thresholds; adds `threshold`, `passed` and `failures` to the stats."""
    result = dict(stats, threshold=gates or None, passed=None, failures=[])
    if not gates:
        return result
    checks = (("min_mean_accept_length", "mean_accept_length"), ("min_p10_accept_length", "p10"))
    for key, stat in checks:
        if key in gates:
            value = stats[stat]
            if value is None or value < gates[key]:
                shown = "none" if value is None else f"{value:.3f}"
                result["failures"].append(f"{cls}: {stat} {shown} < {gates[key]}")
    result["passed"] = not result["failures"]
    return result
