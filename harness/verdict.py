"""What the demo expects of the stock and the patched reports, row by row (one place, one rule each)."""

from harness.configurator_probe import CASES, matches
from harness.cycle import SCENARIOS

STOCK_COMMIT_CRASH = "AttributeError: 'NoneType' object has no attribute 'device'"


def configurator_rows(stock: list, patched: list, protocol: str = "fold") -> list:
    rows = []
    for case, before, after in zip(CASES, stock, patched):
        expected = case.expected("overlay", protocol)
        rows.append(
            {
                "case": case.name,
                "flags": case.flags(),
                "stock": before,
                "patched": after,
                "expected_stock": case.stock,
                "expected_patched": expected,
                "ok": matches(case.stock, before) and matches(expected, after),
            }
        )
    return rows


def cycle_rows(stock: list, patched: list) -> list:
    rows = []
    for scenario, before, after in zip(SCENARIOS, stock, patched):
        stock_crashed = not before["committed"] and (before["error"] or "").startswith(STOCK_COMMIT_CRASH)
        rows.append(
            {
                "scenario": scenario.name,
                "algorithm": scenario.algorithm,
                "draft_tokens": scenario.draft_tokens,
                "commit_lens": list(scenario.commit_lens),
                "padded_rows": list(scenario.padded_rows),
                "track_steps": after["track_steps"],
                "stock_error": before["error"],
                "bitwise_equal": after["bitwise_equal"],
                "checks": after["checks"],
                "ok": stock_crashed and after["bitwise_equal"],
            }
        )
    return rows


def track_row(stock_steps: dict, patched_steps: dict) -> dict:
    never = [-1] * len(stock_steps["commit_lens"])
    ok = (
        stock_steps["sglang_dflash_body"] == never != stock_steps["expected"]
        and patched_steps["overlay"] == patched_steps["expected"]
    )
    return {**patched_steps, "ok": ok}


FOLD_KINDS = {"triton": "overlay-triton", "sglang": "sglang"}  # RSO_FOLD -> the fold it must give


def fold_row(used: dict | None, requested: str | None) -> dict:
    """The fold the patched commit used; with `requested` triton or sglang, it must be that one (a
    silent fallback from the overlay's kernel to SGLang's is not what was asked for)."""
    kind = (used or {}).get("fold", "unknown")
    ok = requested not in FOLD_KINDS or kind == FOLD_KINDS[requested]
    return {**(used or {"fold": kind}), "requested": requested, "ok": ok}


def evaluate(stock: dict, patched: dict, *, fold_requested: str | None = None) -> dict:
    configurator = configurator_rows(stock["configurator"], patched["configurator"])
    cycle = cycle_rows(stock["cycle"], patched["cycle"])
    track = track_row(stock["dflash_track_steps"], patched["dflash_track_steps"])
    fold = fold_row(patched.get("fold"), fold_requested)
    ok = all(row["ok"] for row in configurator + cycle) and track["ok"] and fold["ok"]
    return {"configurator": configurator, "cycle": cycle, "dflash_track_steps": track, "fold": fold, "ok": ok}
