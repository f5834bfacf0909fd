"""The verdict: one gate per check, each passed (True), failed (False) or skipped (None).

A run passes when no gate failed; the same list becomes junit.xml's test cases.
"""

from __future__ import annotations


def _gate(name: str, passed: bool | None, detail: str) -> dict:
    return {"name": name, "passed": passed, "detail": detail}


def collect(acceptance: dict[str, dict], cross: dict, teacher_forced: dict, parity: dict) -> list[dict]:
    gates = []
    for cls in sorted(acceptance):
        s = acceptance[cls]
        if s["failures"]:
            detail = "; ".join(s["failures"])
        elif s["passed"]:
            detail = f"mean {s['mean_accept_length']:.3f} over {s['requests']} requests"
        else:
            detail = "no threshold for this class (reported, not gated)"
        gates.append(_gate(f"acceptance.{cls}", s["passed"], detail))
    if cross["relative_diff"] is not None:
        detail = f"relative diff {cross['relative_diff']:.4f} (max {cross['max_relative_diff']}) {cross['note']}"
    else:
        detail = cross["note"] or "not gated"
    gates.append(_gate("acceptance.metrics_cross_check", cross["passed"], detail.strip()))
    first = "; ".join(
        f"{v['prompt_id']} at {v['position']}: expected {v['expected']} got {v['got']}"
        for v in teacher_forced["violations"][:3]
    )
    gates.append(
        _gate(
            "exactness.teacher_forced",
            teacher_forced["passed"],
            f"{len(teacher_forced['violations'])} violation(s), {len(teacher_forced['ties'])} tie(s) "
            f"in {teacher_forced['checked_tokens']} tokens" + (f" (first: {first})" if first else ""),
        )
    )
    if parity.get("skipped"):
        detail = parity["skipped"]
    else:
        detail = (
            f"{parity['prompts_matching']}/{parity['prompts']} identical; failing: "
            f"{', '.join(parity['failing']) or 'none'}; diverged at a tie: "
            f"{', '.join(parity['diverged_at_tie']) or 'none'}"
        )
    gates.append(_gate("exactness.parity", parity["passed"], detail))
    return gates


def passed(gates: list[dict]) -> bool:
    return all(g["passed"] is not False for g in gates)
