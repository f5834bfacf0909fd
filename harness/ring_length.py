"""Whether a GDN ring as long as the verify window commits what a ring of twice the window commits, step by
step, through SGLang's own MTP commit of the installed release (harness only).

The measurement behind the overlay's ring-length rule (`replayssm_overlay.hooks.ring_fit`: a power of two
of at least N). Each case runs one `harness.ring_cycle` scenario twice from the same seed, on a ring of
L = the smallest power of two >= N and on a ring of 2L, both committed by SGLang's MTP commit
(`harness.ring_cycle.mtp_commit`). After every step it compares, bit for bit (float bits, so -0.0 and
+0.0 differ), what the server reads or keeps: the verify's output of every layer, every slot's state
(tracks and spares included), the conv states, `write_pos` and `is_flush`, the state the ring stands for
(materialized on copies), and `cache_base` modulo the shorter ring (it is a physical ring offset). The
cases cover many steps of mixed lengths, padded rows (slot -1), track crossings for both algorithms, a
window that is not a power of two, and a ring holding stale rows (random values where the pool was
reused), where the longer ring reads more of them through its masks. Run it in a process that imports a
ring release:

    PYTHONPATH=.venv/sglang-releases/0.5.23:overlay:. TRITON_INTERPRET=1 .venv/bin/python -m harness.ring_length
"""

import argparse
import dataclasses
import json
import sys

import torch

from harness.ring_cycle import RingScenario, _random_schedule

#: the scenarios, each run on its shortest ring and on twice that (ring_len is set per run)
CASES = (
    RingScenario("mixed lengths", "DFLASH", 16, _random_schedule(4, 2, 16, seed=2)),
    RingScenario("mixed lengths", "DSPARK", 8, _random_schedule(10, 2, 8, seed=3)),
    RingScenario("padded rows", "DFLASH", 8, ((7, 1, 8),) * 3, padded_rows=(1,)),
    RingScenario("track crossing", "DFLASH", 8, ((8, 2, 5),) * 3, seq_lens_pre=(5, 13, 20)),
    RingScenario("track crossing", "DSPARK", 8, ((8, 2, 5),) * 3, seq_lens_pre=(5, 13, 20)),
    RingScenario("stale ring rows", "DFLASH", 8, _random_schedule(3, 2, 8, seed=5)),
    RingScenario("window of 4", "DFLASH", 4, _random_schedule(3, 2, 4, seed=6)),
    RingScenario("window not a power of two", "DSPARK", 5, _random_schedule(3, 2, 5, seed=4)),
)
STALE = "stale ring rows"
COMPARED = ("verify output", "state", "conv", "write_pos", "is_flush", "materialized", "cache_base mod L")


def shortest_ring(window: int) -> int:
    length = 1
    while length < window:
        length *= 2
    return length


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's bit patterns (a float's sign of zero included)."""
    if not tensor.is_floating_point():
        return tensor
    ints = {2: torch.int16, 4: torch.int32, 8: torch.int64}[tensor.element_size()]
    return tensor.contiguous().view(ints)


def _stale_pool_builder(seed: int):
    """The cycle's pool with every ring row random (a reused pool's leftovers), cursors left fresh."""
    from harness import ring
    from harness.gdn_pool import build_pool

    def build(model, **kwargs):
        pool = build_pool(model, **kwargs)
        generator = torch.Generator().manual_seed(seed)
        for name, tensor in ring.ring_tensors(pool).items():
            if name in ring.RING_FIELDS and name != "temporal":
                tensor.copy_(torch.randn(tensor.shape, generator=generator).to(tensor.dtype))
        return pool

    return build


def _trace(scenario: RingScenario, ring_len: int, seed: int) -> tuple[list, dict]:
    """Per step, the compared tensors (cache_base left raw); and the cycle's result (`flushes`: the steps
    after which every row's ring was empty)."""
    from harness import ring
    from harness.gdn_pool import build_pool
    from harness.ring_cycle import mtp_commit, run_ring_cycle

    steps, flushes = [], []

    def on_step(pool, slots, rows, outputs, track_slots):
        spec = pool.get_speculative_mamba2_params_all_layers()
        cursors = pool.mamba_pool
        flushes.append(bool((cursors.replayssm_spec_write_pos[rows[slots >= 0]] == 0).all()))  # every row flushed
        steps.append(
            {
                "verify output": torch.stack(outputs).clone(),
                "state": spec.temporal.clone(),
                "conv": torch.stack([c.clone() for c in spec.conv]),
                "write_pos": cursors.replayssm_spec_write_pos.clone(),
                "is_flush": cursors.replayssm_is_flush.clone(),
                "materialized": ring.materialized_state(pool, slots, rows),
                "cache_base mod L": cursors.replayssm_cache_base.clone(),
            }
        )

    def commit(worker, batch, pre, post, commit_lens):
        mtp_commit(worker, batch, commit_lens, scenario.draft_tokens)

    builder = _stale_pool_builder(seed) if scenario.name == STALE else build_pool
    result = run_ring_cycle(
        dataclasses.replace(scenario, ring_len=ring_len), commit, seed=seed, pool_builder=builder, on_step=on_step
    )
    return steps, {**result.to_dict(), "flushes": sum(flushes)}


def compare(scenario: RingScenario, *, seed: int = 0) -> dict:
    """The scenario on its shortest ring and on twice that: per step, the compared names that differ."""
    short = shortest_ring(scenario.draft_tokens)
    traces = {length: _trace(scenario, length, seed) for length in (short, 2 * short)}
    (short_steps, short_result), (long_steps, long_result) = traces[short], traces[2 * short]
    differing = []
    for step, (a, b) in enumerate(zip(short_steps, long_steps)):
        a["cache_base mod L"], b["cache_base mod L"] = a["cache_base mod L"] % short, b["cache_base mod L"] % short
        differing += [[step, name] for name in COMPARED if not torch.equal(_bits(a[name]), _bits(b[name]))]
    errors = [r["error"] for r in (short_result, long_result) if r["error"]]
    return {
        "scenario": scenario.name,
        "algorithm": scenario.algorithm,
        "draft_tokens": scenario.draft_tokens,
        "rings": [short, 2 * short],
        "steps": len(scenario.schedule),
        "compared_steps": min(len(short_steps), len(long_steps)),
        "flushes": [short_result["flushes"], long_result["flushes"]],
        "tracked_steps": short_result["tracked_steps"],
        "padded_rows": len(scenario.padded_rows),
        "stale_ring": scenario.name == STALE,
        "errors": errors,
        "differing": differing,
        "bitwise_equal": not errors and not differing and len(short_steps) == len(long_steps) == len(scenario.schedule),
        "max_relative_rms": short_result["max_relative_rms"],
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m harness.ring_length", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    from harness import on_cpu

    on_cpu.prepare()
    import sglang

    rows = []
    for scenario in CASES:
        print(f"  .. {scenario.name} ({scenario.algorithm}, N={scenario.draft_tokens})", file=sys.stderr, flush=True)
        rows.append(compare(scenario, seed=args.seed))
    report = {"sglang": sglang.__file__.rsplit("/", 1)[0], "compared": list(COMPARED), "rows": rows}
    if args.json:
        json.dump(report, sys.stdout)
        print()
    else:
        print(f"SGLang at {report['sglang']}: MTP commit, ring of L vs 2L, bit for bit at every step")
        for r in rows:
            verdict = "bitwise equal" if r["bitwise_equal"] else f"DIFFERS {r['differing'][:4]} {r['errors']}"
            print(
                f"  {r['scenario']:<26} {r['algorithm']:<6} N={r['draft_tokens']} L={r['rings'][0]} vs "
                f"{r['rings'][1]}: {r['compared_steps']} steps, flushes {r['flushes']}: {verdict}"
            )
    return 0 if all(r["bitwise_equal"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
