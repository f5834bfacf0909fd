"""One process's view of an SGLang tree: the configurator cases and the commit cycle, as JSON.

`python -m harness.probe` runs against whichever `sglang` the process imports, so the demo and the
end-to-end tests run it once with PYTHONPATH pointing at a pristine copy of the installed SGLang (stock
behaviour) and once at a patched copy (the overlay's behaviour). Each SGLang import costs seconds, so
one process does every case. It counts how often the patched configurator asks the overlay's guard hook
(never, for combinations stock SGLang accepts), and reports every log line that names the overlay.
Where `replayssm_overlay` cannot be imported (a test hides it) it reports that, and runs what needs
only SGLang: the patched files must then behave as stock ones.
"""

import argparse
import json
import logging
import sys
import time
import warnings


class _OverlayLines(logging.Handler):
    """Collects every log record whose message names the overlay, from any logger."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.lines = []

    def emit(self, record):
        message = record.getMessage()
        if "replayssm-overlay" in message or record.name.startswith("replayssm_overlay"):
            self.lines.append({"logger": record.name, "level": record.levelname, "message": message})


def _overlay_importable() -> bool:
    try:
        import replayssm_overlay.hooks  # noqa: F401
    except ImportError:
        return False
    return True


def _count_guard_calls() -> dict:
    """Wrap the guard hook the patched configurator calls, counting its calls (None: no overlay)."""
    if not _overlay_importable():
        return {"calls": None}
    from replayssm_overlay import hooks

    counter = {"calls": 0}
    original = hooks.keep_kda_only_guard

    def counted(configurator):
        counter["calls"] += 1
        return original(configurator)

    hooks.keep_kda_only_guard = counted
    return counter


def probe_configurator(progress, model) -> list:
    """Every configurator case, with the cycle's model: a lifted refusal runs the node's self-check of the
    fold on that model's head shapes, and its outcome holds for the commits that follow."""
    from harness.configurator_probe import CASES, probe

    counter = _count_guard_calls()
    results = []
    for case in CASES:
        progress(f"configurator: {case.name}")
        counter["calls"] = 0 if counter["calls"] is not None else None
        result = probe(case, model)
        results.append({"case": case.name, "flags": case.flags(), **result, "guard_hook_calls": counter["calls"]})
    return results


def probe_cycle(progress, seed: int, model) -> list:
    from harness.cycle import SCENARIOS, run_cycle, sglang_commit

    results = []
    for scenario in SCENARIOS:
        progress(f"commit cycle: {scenario.name} ({scenario.algorithm}, accept lengths {list(scenario.commit_lens)})")
        results.append(run_cycle(scenario, sglang_commit(scenario.algorithm), model=model, seed=seed).to_dict())
    return results


def pool_protocol() -> str:
    """ "ring" when the installed SGLang builds a GDN circular-ring ReplaySSM pool (0.5.20 on), "fold"
    when it builds the raw-window fold pool (0.5.19): asked of a real pool, never of a version string."""
    from harness.gdn_pool import build_pool
    from harness.ring import is_ring_pool
    from harness.ring_cycle import RING_MODEL

    return "ring" if is_ring_pool(build_pool(RING_MODEL, slots=2, draft_tokens=4)) else "fold"


def probe_ring_cycle(progress, seed: int, scenarios: str) -> list:
    """The multi-step ring cycle through the commit methods of the SGLang this process imported; a stock
    method crashes on the first step, so `scenarios="first"` runs only the first scenario per algorithm."""
    from harness.cycle import sglang_commit
    from harness.ring_cycle import RING_SCENARIOS, run_ring_cycle

    chosen = RING_SCENARIOS
    if scenarios == "first":
        chosen = [next(s for s in RING_SCENARIOS if s.algorithm == a) for a in ("DFLASH", "DSPARK")]
    results = []
    for scenario in chosen:
        progress(f"ring cycle: {scenario.name} ({scenario.algorithm}, {len(scenario.schedule)} steps)")
        results.append(run_ring_cycle(scenario, sglang_commit(scenario.algorithm), seed=seed).to_dict())
    return results


def probe_dflash_track_steps() -> dict:
    from harness.cycle import SCENARIOS, dflash_track_steps

    tracked = next(s for s in SCENARIOS if s.tracked and s.algorithm == "DFLASH")
    return dflash_track_steps(tracked)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m harness.probe",
        description="Run the configurator cases and the verify->commit cycle against the sglang this "
        "process imports (set PYTHONPATH to choose a copy) and print the results as JSON on stdout.",
    )
    parser.add_argument("--part", choices=("all", "configurator", "cycle"), default="all")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random states and windows")
    parser.add_argument(
        "--head-k-dim", type=int, default=16, help="K of the embedded tiny GDN model's cycle (default 16)"
    )
    parser.add_argument(
        "--ring-scenarios",
        choices=("all", "first"),
        default="all",
        help="on a circular-ring release (0.5.20 on): every multi-step scenario (default), or only the "
        "first per algorithm (enough to show a stock crash)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = parser.parse_args(argv)

    def progress(line: str) -> None:
        if not args.quiet:
            print(f"  .. {line}", file=sys.stderr, flush=True)

    warnings.filterwarnings("ignore")  # SGLang's CPU import warnings and numpy overflow on padded rows
    overlay_lines = _OverlayLines()
    logging.getLogger().addHandler(overlay_lines)
    logging.getLogger().setLevel(logging.INFO)
    started = time.monotonic()
    progress("importing sglang (a few seconds)")
    from harness import on_cpu

    on_cpu.prepare()
    import sglang

    from harness.gdn_pool import TinyGDN

    importable = _overlay_importable()
    report = {"sglang": sglang.__file__.rsplit("/", 1)[0], "overlay_importable": importable}
    model = TinyGDN(head_k_dim=args.head_k_dim)
    if args.part in ("all", "configurator"):
        report["configurator"] = probe_configurator(progress, model)
    report["protocol"] = pool_protocol()
    if args.part in ("all", "cycle"):
        from harness.cycle import sglang_commit
        from harness.pd_decode import run_pd_decode_cycles

        progress("commit cycle on the PD-decode pool (--disaggregation-mode decode)")
        report["pd_decode_cycle"] = run_pd_decode_cycles(
            report["protocol"],
            sglang_commit,
            model=None if report["protocol"] == "ring" else model,
            seed=args.seed,
            first_only=args.ring_scenarios == "first",
        )
    if args.part in ("all", "cycle") and report["protocol"] == "ring":
        from harness.ring_cycle import RING_ERROR_BOUND, RING_MODEL

        report["model"] = RING_MODEL.describe()
        report["ring_error_bound"] = RING_ERROR_BOUND
        report["ring_cycle"] = probe_ring_cycle(progress, args.seed, args.ring_scenarios)
    elif args.part in ("all", "cycle"):
        report["model"] = model.describe()
        report["cycle"] = probe_cycle(progress, args.seed, model)
        if importable:
            report["dflash_track_steps"] = probe_dflash_track_steps()
            from replayssm_overlay import fold

            report["fold"] = fold.describe()  # after the commits: the fold the overlay actually used
    if importable:
        from replayssm_overlay import selfcheck

        report["selfcheck"] = selfcheck.read_records()
    report["overlay_log"] = overlay_lines.lines
    report["seconds"] = round(time.monotonic() - started, 1)
    json.dump(report, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
