"""The run's outputs: report.json, junit.xml, accept_length.svg, and the table people read.

report.json is the contract (schema `replayssm-smoke/1`, each field documented in smoke_tests/README.md),
and this module builds it: `finished_run` or `stopped_run` makes the body, `document` adds the envelope;
`RUN_KEYS` and `ERROR_KEYS` are its top-level keys, in order. A run that stopped on a usage or
environment error still writes a report, with `passed: false` and `error`, so nothing partial can read
as a pass.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from replayssm_overlay.cliutil import EXIT_CHECK_FAILED, EXIT_OK, EXIT_USAGE, atomic_write

from . import __version__, gates, junit, plot

SCHEMA = "replayssm-smoke/1"

ENVELOPE_KEYS = ("schema", "tool_version", "started_at", "duration_s")
#: report.json of a run that got to its verdict (exit 0 or 1)
RUN_KEYS = ENVELOPE_KEYS + (
    "passed",
    "exit_code",
    "target",
    "reference",
    "golden",
    "thresholds",
    "notes",
    "acceptance",
    "acceptance_overall",
    "metrics_cross_check",
    "speed",
    "exactness",
    "gates",
    "requests",
)
#: report.json of a run stopped by a usage or environment error (exit 2)
ERROR_KEYS = ENVELOPE_KEYS + ("passed", "exit_code", "error", "target", "gates")


def finished_run(
    *,
    info,
    ref_info,
    golden_info,
    th_source,
    profile,
    notes,
    acceptance,
    acceptance_overall,
    cross,
    concurrency,
    target_tps,
    ref_tps,
    tie_margin,
    tie_source,
    teacher_forced,
    parity,
    verdict,
    rows,
    gens,
) -> dict:
    """The body of a run that got to its verdict, from what `cli.run` measured and decided."""
    ok = gates.passed(verdict)
    return {
        "passed": ok,
        "exit_code": EXIT_OK if ok else EXIT_CHECK_FAILED,
        "target": info.summary(),
        "reference": ref_info.summary() if ref_info else None,
        "golden": golden_info,
        "thresholds": {
            "source": th_source,
            "profile": profile.name,
            "how_measured": profile.how_measured,
            "baseline_accept_length": profile.baseline_accept_length,
        },
        "notes": notes,
        "acceptance": acceptance,
        "acceptance_overall": acceptance_overall,
        "metrics_cross_check": cross,
        "speed": {
            "concurrency": concurrency,
            "target_tokens_per_s_p50": target_tps,
            "reference_tokens_per_s_p50": ref_tps,
            "speedup": target_tps / ref_tps if target_tps and ref_tps else None,
        },
        "exactness": {
            "tie_margin": tie_margin,
            "tie_margin_source": tie_source,
            "teacher_forced": teacher_forced,
            "parity": parity,
        },
        "gates": verdict,
        "requests": [
            {
                "prompt_id": r.prompt_id,
                "class": r.cls,
                "completion_tokens": r.completion_tokens,
                "spec_verify_ct": r.verify_ct,
                "accept_length": r.accept_length,
                "spec_accept_rate": r.accept_rate,
                "tokens_per_s": g.tokens_per_s,
            }
            for r, g in zip(rows, gens)
        ],
    }


def stopped_run(error, target_url: str) -> dict:
    """The body of a run stopped by `error` (a SmokeEnvironmentError): failed, with what and how to fix."""
    return {
        "passed": False,
        "exit_code": error.exit_code,
        "error": {"what": error.what, "fix": error.fix, "code": error.code},
        "target": {"url": target_url},
        "gates": [],
    }


def document(body: dict, started: float, finished: float) -> dict:
    """report.json: the envelope (schema, tool version, UTC start, duration) and the body."""
    return {
        "schema": SCHEMA,
        "tool_version": __version__,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "duration_s": round(finished - started, 3),
        **body,
    }


def _fmt(value, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _bar(value, top: float, width: int = 20) -> str:
    if not value or top <= 0:
        return ""
    return "#" * max(1, round(width * value / top))


def table(report: dict) -> str:
    lines = []
    verdict = {EXIT_OK: "PASS", EXIT_CHECK_FAILED: "FAIL", EXIT_USAGE: "ERROR"}[report["exit_code"]]
    target = report.get("target") or {}
    lines.append(
        f"replayssm-smoke: {verdict}  target {target.get('url', '?')}  model {target.get('model_path', '?')}"
        f"  algorithm {target.get('speculative_algorithm', '?')}"
    )
    if report.get("error"):
        lines.append(f"error: {report['error']['what']}")
        if report["error"].get("fix"):
            lines.append(f"  fix: {report['error']['fix']}")
        return "\n".join(lines) + "\n"
    th = report.get("thresholds") or {}
    if th:
        lines.append(f"thresholds: profile {th['profile']!r} from {th['source']} ({th['how_measured']})")
    lines += [f"note: {n}" for n in report.get("notes") or []]
    acc = report.get("acceptance") or {}
    if acc:
        top = max([s.get("p90") or 0 for s in acc.values()] + [1.0])
        lines.append("")
        lines.append(
            f"{'class':<10}{'reqs':>5}{'mean':>7}{'p10':>7}{'p50':>7}{'p90':>7}{'floor':>7}  gate  accept length"
        )
        for cls in sorted(acc):
            s = acc[cls]
            floor = (s.get("threshold") or {}).get("min_mean_accept_length")
            gate = {True: "ok", False: "FAIL", None: "-"}[s.get("passed")]
            lines.append(
                f"{cls:<10}{s['requests']:>5}{_fmt(s['mean_accept_length']):>7}{_fmt(s['p10']):>7}"
                f"{_fmt(s['p50']):>7}{_fmt(s['p90']):>7}{_fmt(floor):>7}  {gate:<4}  "
                f"{_bar(s['mean_accept_length'], top)}"
            )
    mc = report.get("metrics_cross_check") or {}
    if mc:
        lines.append("")
        if mc.get("available"):
            lines.append(
                f"/metrics cross-check: {_fmt(mc['accept_length_from_metrics'], 3)} from counters vs "
                f"{_fmt(mc['accept_length_from_requests'], 3)} from responses "
                f"(diff {_fmt((mc['relative_diff'] or 0) * 100, 1)} %) {mc.get('note', '')}".rstrip()
            )
        else:
            lines.append(f"/metrics cross-check: skipped, {mc.get('note', '')}")
    speed = report.get("speed") or {}
    if speed:
        ref = (
            (
                f", reference {_fmt(speed.get('reference_tokens_per_s_p50'), 1)} tok/s, speedup "
                f"{_fmt(speed.get('speedup'))}x"
            )
            if speed.get("reference_tokens_per_s_p50")
            else ""
        )
        lines.append(f"single-stream: target {_fmt(speed.get('target_tokens_per_s_p50'), 1)} tok/s (p50){ref}")
    ex = report.get("exactness") or {}
    tf = ex.get("teacher_forced") or {}
    if tf:
        lines.append("")
        lines.append(
            f"teacher-forced: {'ok' if tf['passed'] else 'FAIL'}  {tf['checked_tokens']} tokens, "
            f"{len(tf['violations'])} violation(s), {len(tf['ties'])} tie(s) within {tf['tie_margin']:g}"
        )
        for v in tf["violations"][:10]:
            lines.append(
                f"  {v['prompt_id']} position {v['position']}: expected {v['expected']} got {v['got']} "
                f"(logprob gap {v['margin']:.4f})"
            )
        for t in tf["ties"][:10]:
            lines.append(
                f"  tie: {t['prompt_id']} position {t['position']}: argmax {t['expected']}, emitted {t['got']} "
                f"(gap {t['margin']:.2e})"
            )
    par = ex.get("parity") or {}
    if par.get("skipped"):
        lines.append(f"parity: skipped ({par['skipped']})")
    elif par:
        lines.append(
            f"parity vs {par['against']} ({par['mode']}: {par['mode_reason']}): "
            f"{'ok' if par['passed'] else 'FAIL'}  {par['prompts_matching']}/{par['prompts']} prompts identical"
        )
        for pid, d in sorted(par["first_divergence"].items()):
            if d is not None:
                lines.append(
                    f"  {pid}: first divergence at {d['position']}: target {d['target_token']} reference "
                    f"{d['reference_token']} ({'tie' if d['tie'] else 'not a tie'}: {d['note']})"
                )
    failed = [g for g in report.get("gates", []) if g["passed"] is False]
    if failed:
        lines.append("")
        lines.append("failed gates:")
        lines += [f"  {g['name']}: {g['detail']}" for g in failed]
    return "\n".join(lines) + "\n"


def write(out_dir: str, report: dict) -> list[str]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = {"report.json": json.dumps(report, indent=2, sort_keys=False) + "\n", "junit.xml": junit.render(report)}
    if report.get("acceptance"):
        files["accept_length.svg"] = plot.render(report["acceptance"])
    for name, text in files.items():
        atomic_write(out / name, text)
    return [str(out / name) for name in files]
