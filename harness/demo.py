"""`make demo`: stock SGLang 0.5.19 refusing and crashing, the overlay accepting and committing exactly.

Run with the project's venv (`.venv/bin/python -m harness.demo`, `--help` for options). See --help's
epilog for what it does; it never modifies the installed SGLang.
"""

import argparse
import sys
import time

from harness import sandbox, verdict
from harness.demo_text import environment_problem, finish, outcome, table, yes
from harness.release_trees import INSTALLED_RELEASE, installed_sglang
from replayssm_overlay.patcher.releases import RING_RELEASES, span

EPILOG = """\
What it does (a few minutes on 2 CPU cores, no GPU needed):
  1. copies the installed SGLang 0.5.19 package to a temporary directory (the installed one is never
     modified; the copy is deleted at the end);
  2. stock 0.5.19, in a subprocess importing the copy: KVCacheConfigurator._build_hybrid_req_pool on
     real model configs (GDN Qwen3-Next/Qwen3.5, KDA Kimi-Linear, Mamba2 Falcon-H1) refuses DFLASH/DSPARK
     + --enable-linear-replayssm-spec on GDN ("requires a KDA model"); the DFLASH/DSPARK post-verify
     commit crashes on a GDN ReplaySSM pool;
  3. applies the overlay to the copy (replayssm_overlay.patcher.apply);
  4. the same cases on the patched copy: DFLASH and DSPARK (static ragged-verify mode) are accepted on
     GDN, DSPARK compact/cap-accept is refused naming SGLANG_RAGGED_VERIFY_MODE=static, KDA, ReplaySSM
     off and other models behave exactly as stock; the commit cycle (SGLang's own verify kernel writes
     the ReplaySSM ring, the patched commit folds the accepted prefix) is compared with torch.equal
     against SGLang's token-by-token decode, for: bonus only, all accepted, mixed lengths, padded rows,
     and an extra-buffer track step (which 0.5.19's DFLASH never commits).

The model is embedded: a tiny hybrid GDN (2 layers, 2 key heads, 4 value heads, K=128, V=32, conv 4) with
an fp32 conv state (Triton's CPU interpreter computes the conv kernel wrongly in bf16). SGLang's Triton
kernels run under TRITON_INTERPRET=1; bitwise equality here is between interpreted kernels. By default
the overlay's commit runs the overlay's own fold kernel (--fold triton, the CUDA kernel's Triton twin;
K=128 is the head dim it covers; run by the interpreter here); the report names the kernel used.
`--fold sglang --head-k-dim 16` is the quicker run with SGLang's fold.

Exit status: 0 every row as expected; 1 a row not as expected; 2 environment error (no SGLang 0.5.19,
a probe that crashed, a refused patch)."""


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _crash(error: str | None) -> str:
    """'AttributeError: ... (at path/file.py:247)' -> 'crash: AttributeError at file.py:247'."""
    if not error:
        return "committed"
    where = error.rsplit("(at ", 1)[-1].rstrip(")").rsplit("/", 1)[-1]
    return f"crash: {error.split(':', 1)[0]} at {where}"


def _fold_line(fold: dict) -> str:
    asked = f", asked for {fold['requested']}: {yes(fold['ok'])}" if fold["requested"] else ""
    return f"{fold['fold']} ({fold.get('reason', 'not reported')}){asked}"


def render(result: dict) -> str:
    configurator = table(
        ["case", "stock 0.5.19", "with overlay", "as expected"],
        [[r["case"], outcome(r["stock"]), outcome(r["patched"]), yes(r["ok"])] for r in result["configurator"]],
    )
    cycle = table(
        [
            "scenario",
            "algo",
            "N",
            "accept lengths",
            "padded",
            "track steps",
            "bitwise equal",
            "stock 0.5.19",
            "as expected",
        ],
        [
            [
                r["scenario"],
                r["algorithm"],
                r["draft_tokens"],
                ",".join(map(str, r["commit_lens"])),
                ",".join(map(str, r["padded_rows"])) or "-",
                ",".join(map(str, r["track_steps"])) if max(r["track_steps"]) >= 0 else "-",
                yes(r["bitwise_equal"]),
                _crash(r["stock_error"]),
                yes(r["ok"]),
            ]
            for r in result["cycle"]
        ],
    )
    track = result["dflash_track_steps"]
    compact_refusal = next(
        (
            r["patched"]["message"]
            for r in result["configurator"]
            if r["patched"]["outcome"] == "refused" and r["patched"]["error"] == "OverlayError"
        ),
        "",
    )
    verdict_line = "everything as expected" if result["ok"] else "SOME ROWS NOT AS EXPECTED (see above)"
    return "\n".join(
        [
            f"SGLang {result['release']} at {result['sglang']}; overlay applied to a copy "
            f"({result['patched_files']} files)",
            "model (embedded): tiny hybrid GDN, " + ", ".join(f"{k}={v}" for k, v in result["model"].items()),
            "",
            "Configurator: KVCacheConfigurator._build_hybrid_req_pool",
            configurator,
            "",
            "The overlay's refusal, as a user sees it:",
            *("  " + line for line in compact_refusal.splitlines()),
            "",
            "Commit cycle: SGLang's verify writes the ReplaySSM ring, the worker's commit folds the accepted",
            "prefix; compared with torch.equal against token-by-token decode (state, conv, track slots, others)",
            cycle,
            "",
            f"fold kernel used by the overlay's commit: {_fold_line(result['fold'])}",
            "",
            f"DFLASH extra-buffer track step for pre-verify lengths {track['seq_lens_pre']}, accept lengths "
            f"{track['commit_lens']} (track interval 8): 0.5.19's DFLASH computes {track['sglang_dflash_body']}, "
            f"the overlay {track['overlay']} (expected {track['expected']}): {yes(track['ok'])}",
            "",
            f"{verdict_line} ({result['seconds']:.0f} s)",
        ]
    )


def summarize(reports: dict, *, seed: int, seconds: float, fold: str | None = None) -> dict:
    """The demo's result from `sandbox.stock_and_patched` reports: every row with its verdict."""
    return {
        "sglang": str(installed_sglang()),
        "release": INSTALLED_RELEASE,
        "model": reports["patched"]["model"],
        "patched_files": len(reports["patch"].get("files", [])),
        "patch": reports["patch"],
        "seed": seed,
        **verdict.evaluate(reports["stock"], reports["patched"], fold_requested=fold),
        "seconds": round(seconds, 1),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m harness.demo",
        description="Show stock SGLang 0.5.19 refusing and crashing on DFLASH/DSPARK + ReplaySSM spec-verify "
        "for hybrid GDN models, and the overlay accepting it and committing bitwise-exact state, on CPU.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--json", action="store_true", help="print the full result as JSON instead of tables")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random states and verify windows (default 0)")
    parser.add_argument(
        "--fold",
        choices=("auto", "triton", "sglang"),
        default="triton",
        help="the fold kernel of the overlay's commit, as RSO_FOLD for the probes (default triton: the "
        "overlay's own kernel, its Triton twin; auto: the prebuilt CUDA kernel if it matches this node, else "
        "SGLang's; sglang: SGLang's fold)",
    )
    parser.add_argument(
        "--head-k-dim",
        type=int,
        choices=(16, 32, 64, 128),
        default=128,
        help="K of the embedded model (default 128, the head dim the overlay's own fold kernel covers; "
        "with a smaller K the commit falls back to SGLang's fold and says so)",
    )
    parser.add_argument(
        "--release",
        default=INSTALLED_RELEASE,
        help=f"the SGLang release to show it on (default {INSTALLED_RELEASE}, the venv's; {span(RING_RELEASES)} run "
        "the multi-step ring cycle against that release's MTP commit, see harness/ring_demo.py)",
    )
    args = parser.parse_args(argv)
    if args.release != INSTALLED_RELEASE:
        from harness import ring_demo

        return ring_demo.main(args.release, as_json=args.json, progress=_progress)
    started = time.monotonic()
    try:
        reports = sandbox.stock_and_patched(
            seed=args.seed, progress=_progress, fold=args.fold, head_k_dim=args.head_k_dim
        )
        result = summarize(reports, seed=args.seed, seconds=time.monotonic() - started, fold=args.fold)
    except Exception as error:  # environment problems: no sglang, a failed probe, a refused patch
        return environment_problem(error, args.json)
    return finish(result, args.json, render)


if __name__ == "__main__":
    sys.exit(main())
