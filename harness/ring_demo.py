"""`make demo SGLANG_RELEASE=0.5.2X`: the same proof on a circular-ring release (0.5.20 on).

Copies that release's SGLang tree (`harness.release_trees`), shows stock refusing DFLASH/DSPARK +
ReplaySSM spec on GDN and crashing in the commit, applies the overlay to the copy, and shows the patched
configurator rule and the multi-step ring cycle: after every step the state, ring and cursors are
bitwise what that release's own MTP commit produces, and the ring's distance from the recurrence.
Called by `harness.demo --release`; exit 0 all as expected, 1 a row not as expected, 2 environment error.
"""

import time

from harness import sandbox, verdict
from harness.demo_text import environment_problem, finish, outcome, table, yes
from harness.ring_cycle import RING_ERROR_BOUND


def ring_rows(stock: list, patched: list) -> list:
    crashed = {r["algorithm"]: r["committed_steps"] == 0 and bool(r["error"]) for r in stock}
    rows = []
    for result in patched:
        distance = max(result["relative_rms"] + result["track_relative_rms"], default=None)
        rows.append(
            {
                **{k: result[k] for k in ("scenario", "algorithm", "draft_tokens", "ring_len", "steps")},
                **{k: result[k] for k in ("flushes", "wraps", "tracked_steps", "bitwise_equal_to_mtp")},
                "max_relative_rms": distance,
                "stock_crashed": crashed.get(result["algorithm"], False),
                "ok": result["bitwise_equal_to_mtp"]
                and crashed.get(result["algorithm"], False)
                and distance is not None
                and distance <= RING_ERROR_BOUND,
            }
        )
    return rows


def summarize(reports: dict, seconds: float) -> dict:
    stock, patched = reports["stock"], reports["patched"]
    configurator = verdict.configurator_rows(stock["configurator"], patched["configurator"], "ring")
    ring = ring_rows(stock["ring_cycle"], patched["ring_cycle"])
    stock_errors = sorted({r["error"] for r in stock["ring_cycle"] if r["error"]})
    return {
        "release": reports["release"],
        "patch": reports["patch"],
        "model": patched["model"],
        "configurator": configurator,
        "ring_cycle": ring,
        "stock_commit_errors": stock_errors,
        "error_bound": RING_ERROR_BOUND,
        "ok": all(r["ok"] for r in configurator + ring) and patched["protocol"] == "ring",
        "seconds": round(seconds, 1),
    }


def render(result: dict) -> str:
    configurator = table(
        ["case", f"stock {result['release']}", "with overlay", "as expected"],
        [[r["case"], outcome(r["stock"]), outcome(r["patched"]), yes(r["ok"])] for r in result["configurator"]],
    )
    ring = table(
        [
            "scenario",
            "algo",
            "N",
            "L",
            "steps",
            "flushes",
            "wraps",
            "tracks",
            "= MTP every step",
            "max rel. RMS",
            "as expected",
        ],
        [
            [
                r["scenario"],
                r["algorithm"],
                r["draft_tokens"],
                r["ring_len"],
                r["steps"],
                r["flushes"],
                r["wraps"],
                r["tracked_steps"],
                yes(r["bitwise_equal_to_mtp"]),
                f"{r['max_relative_rms']:.1e}",
                yes(r["ok"]),
            ]
            for r in result["ring_cycle"]
        ],
    )
    return "\n".join(
        [
            f"SGLang {result['release']} (circular-ring release); overlay applied to a copy: "
            f"{result['patch'].get('message', '')}",
            "model (embedded): tiny hybrid GDN, " + ", ".join(f"{k}={v}" for k, v in result["model"].items()),
            "",
            "Configurator: KVCacheConfigurator._build_hybrid_req_pool",
            configurator,
            "",
            "Stock DFLASH/DSPARK commit on the GDN ring pool: " + " | ".join(result["stock_commit_errors"]),
            "",
            "Multi-step cycle: SGLang's ring verify, then the patched DFLASH/DSPARK commit, compared after every",
            "step with SGLang's own MTP commit (spec_utils) on the same pool (state, conv, ring, cursors:",
            f"torch.equal); distance from the token-by-token recurrence: relative RMS, bound "
            f"{result['error_bound']:.0e}",
            ring,
            "",
            ("everything as expected" if result["ok"] else "SOME ROWS NOT AS EXPECTED (see above)")
            + f" ({result['seconds']:.0f} s)",
        ]
    )


def main(release: str, *, as_json: bool, progress) -> int:
    started = time.monotonic()
    try:
        reports = sandbox.stock_and_patched(release=release, progress=progress)
        result = summarize(reports, time.monotonic() - started)
    except Exception as error:  # environment problems: the release not installed, a failed probe
        return environment_problem(error, as_json)
    return finish(result, as_json, render)
