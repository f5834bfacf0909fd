"""How far the GDN circular ring's commit lands from the recurrence when the verify window N does not fit the
ring length L (`--linear-replayssm-cache-len`), on the CPU (harness only).

The measurement behind the overlay's ring-fit rule (`replayssm_overlay.hooks.ring_fit`). Each case runs
a few all-accepted verify -> commit steps through `harness.ring_cycle.run_ring_cycle` with SGLang's own
MTP commit as the commit (on a ring release the overlay's DFLASH/DSPARK commit is that very function,
bitwise: tests/releases), and reports the largest relative RMS distance of the ring's state from the
verify recurrence run token by token. N > L: the verify writes only ring positions below L, and the commit
replays wrapped, stale rows. N <= L < 2N: every commit flushes (the early-flush rule `write_pos + 2N > L`),
so each verify writes positions 0..N-1. Run it in a process that imports a ring release:

    PYTHONPATH=.venv/sglang-releases/0.5.23:overlay:. .venv/bin/python -m harness.ring_fit [--json]
"""

import argparse
import json
import sys

#: (N, L) pairs: L >= 2N (SGLang's rule), N <= L < 2N, and N > L
FIT_CASES = ((4, 8), (8, 16), (4, 4), (8, 8), (16, 16), (8, 4), (16, 8), (32, 16))
STEPS = 4


def fit_class(draft_tokens: int, ring_len: int) -> str:
    if ring_len >= 2 * draft_tokens:
        return "L >= 2N"
    return "N <= L < 2N" if ring_len >= draft_tokens else "N > L"


def measure(draft_tokens: int, ring_len: int, *, steps: int = STEPS, seed: int = 0) -> dict:
    """SGLang's MTP commit over `steps` all-accepted windows of N tokens on a ring of L."""
    from harness.ring_cycle import RingScenario, mtp_commit, run_ring_cycle

    def commit(worker, batch, pre, post, commit_lens):
        mtp_commit(worker, batch, commit_lens, draft_tokens)

    scenario = RingScenario(
        f"N={draft_tokens} L={ring_len}",
        "DFLASH",
        draft_tokens,
        ((draft_tokens, max(1, draft_tokens // 2)),) * steps,
        ring_len=ring_len,
    )
    result = run_ring_cycle(scenario, commit, seed=seed).to_dict()
    return {
        "draft_tokens": draft_tokens,
        "ring_len": ring_len,
        "fit": fit_class(draft_tokens, ring_len),
        "steps": result["committed_steps"],
        "error": result["error"],
        "max_relative_rms": result["max_relative_rms"],
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m harness.ring_fit", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    parser.add_argument("--case", action="append", metavar="N:L", help="measure these (N, L) only (repeatable)")
    args = parser.parse_args(argv)
    cases = [tuple(int(x) for x in c.split(":")) for c in args.case] if args.case else FIT_CASES
    from harness import on_cpu

    on_cpu.prepare()
    import sglang

    rows = []
    for n, ring_len in cases:
        print(f"  .. N={n} L={ring_len}", file=sys.stderr, flush=True)
        rows.append(measure(n, ring_len))
    report = {"sglang": sglang.__file__.rsplit("/", 1)[0], "rows": rows}
    if args.json:
        json.dump(report, sys.stdout)
        print()
    else:
        print(f"SGLang at {report['sglang']}: MTP commit, {STEPS} steps, relative RMS from the recurrence")
        for r in rows:
            print(
                f"  N={r['draft_tokens']:>3} L={r['ring_len']:>3}  {r['fit']:<12} max rel. RMS "
                f"{r['max_relative_rms']:.3g}" + (f"  error {r['error']}" if r["error"] else "")
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
