"""GPU proof of the node's self-check before serving (run on the H200, see README.md).

    RSO_SGLANG_KERNELS=/path/to/kernel-files python benchmarks/gpu_selfcheck.py --artifacts DIR [--out DIR]

DIR holds the prebuilt CUDA commit kernel, built for this node: `replayssm-overlay kernels build --out DIR`.
Each case runs `selfcheck.check_before_serving` for the target's per-rank shape (HV=32, H=16, K=V=128,
window 16) in a fresh Python process and records its outcome, the fold chosen afterwards, its wall time,
and how often Triton's JIT ran the overlay's Triton kernel (`run` and `warmup` of
`gdn_fold.gdn_replayssm_fold_kernel`, counted):

  prebuilt-cold   RSO_KERNEL_DIR=DIR, an empty Triton cache (first start of a node): must pass with
                  the CUDA kernel and run none of the overlay's Triton kernels; its time includes
                  compiling SGLang's recurrence (ring write and decode specializations);
  prebuilt-warm   the same with the cache the cold case left (a restart): the startup cost to budget
                  (at most 5 s), and the part of it spent on the CUDA kernel's pinned staging
                  grid (`staging_seconds`: blocks that fold several items);
  planted         RSO_FOLD=triton with the numpy reduction tree planted instead of the GPU's:
                  must be caught (outcome mismatch) and leave SGLang's fold chosen.

Prints a table, writes selfcheck.json to --out, exits 0 only if every check holds. The times are
reported, not asserted (speed lives in benchmarks, not in tests).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "overlay"), str(REPO)]

CASES = ("prebuilt-cold", "prebuilt-warm", "planted")
BUDGET_S = 5.0


def run_case(case: str) -> dict:
    """One case, in this (fresh) process."""
    import torch

    from benchmarks.fold_cases import sglang_module
    from replayssm_overlay import fold, protocol, selfcheck
    from replayssm_overlay.kernels import gdn_fold, launch

    sglang_module("fla.fused_sigmoid_gating_recurrent")  # registered under its full name for selfcheck
    jit_runs = []
    kernel = gdn_fold.gdn_replayssm_fold_kernel
    for entry in ("run", "warmup"):  # Triton's JIT: a launch, or a compile ahead of the first launch
        original = getattr(kernel, entry)

        def counted(*args, _original=original, _entry=entry, **kwargs):
            jit_runs.append(_entry)
            return _original(*args, **kwargs)

        setattr(kernel, entry, counted)
    if case == "planted":  # the interpreter's tree, compiled for the GPU: reordered
        launch.JitKernels.tree_numpy = property(lambda self: True)
    geometry = selfcheck.Geometry(
        num_v_heads=32,
        num_k_heads=16,
        head_v_dim=128,
        head_k_dim=128,
        window=16,
        state_dtype="float32",
        ring_dtype="bfloat16",
    )
    torch.cuda.synchronize()
    start = time.perf_counter()
    record = selfcheck.check_before_serving(geometry, protocol_name=protocol.FOLD)  # 0.5.19's, whatever is here
    torch.cuda.synchronize()
    return {
        "case": case,
        "outcome": record["outcome"],
        "detail": record["detail"],
        "fold": fold.describe(),
        "seconds": round(time.perf_counter() - start, 3),
        "staging_seconds": record.get("staging_seconds"),
        "overlay_jit_runs": len(jit_runs),
        "gpu": torch.cuda.get_device_name(),
    }


def verdicts(results: dict, expected_fold: str) -> list[tuple[str, bool]]:
    cold, warm, planted = (results[c] for c in CASES)
    return [
        (
            f"prebuilt-cold passes with the prebuilt kernel ({expected_fold})",
            cold.get("outcome") == "passed" and cold.get("fold", {}).get("fold") == expected_fold,
        ),
        ("prebuilt-cold runs none of the overlay's Triton kernels", cold.get("overlay_jit_runs") == 0),
        (
            "prebuilt-warm passes, none of the overlay's Triton kernels run",
            warm.get("outcome") == "passed" and warm.get("overlay_jit_runs") == 0,
        ),
        (
            "planted reordered tree is caught and SGLang's fold chosen",
            planted.get("outcome") == "mismatch" and planted.get("fold", {}).get("fold") == "sglang",
        ),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--artifacts", required=True, type=Path, help="the CUDA kernel's folder for this node")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "out")), help="where to write JSON")
    parser.add_argument("--case", choices=CASES, help=argparse.SUPPRESS)  # child mode
    args = parser.parse_args()
    if args.case:
        print(json.dumps(run_case(args.case)))
        return 0

    args.out.mkdir(parents=True, exist_ok=True)
    results = {}
    with tempfile.TemporaryDirectory(prefix="rso-selfcheck-") as tmp:
        tmp = Path(tmp)
        for case in CASES:
            env = dict(
                os.environ,
                TRITON_CACHE_DIR=str(tmp / ("triton-planted" if case == "planted" else "triton")),
                RSO_STATE_DIR=str(tmp / "state"),
                PYTHONUNBUFFERED="1",
            )
            if case == "planted":
                env.update(RSO_FOLD="triton", RSO_KERNEL_DIR=str(tmp / "no-kernels"))
            else:
                env.pop("RSO_FOLD", None)
                env["RSO_KERNEL_DIR"] = str(args.artifacts.resolve())
            run = subprocess.run(
                [sys.executable, __file__, "--artifacts", str(args.artifacts), "--case", case],
                capture_output=True,
                text=True,
                env=env,
            )
            if run.returncode != 0:
                print(run.stdout, run.stderr, sep="\n", file=sys.stderr)
                results[case] = {"case": case, "error": run.stderr[-3000:]}
                continue
            results[case] = json.loads(run.stdout.strip().splitlines()[-1])
    checks = verdicts(results, "overlay-cuda")
    (args.out / "selfcheck.json").write_text(
        json.dumps({"results": results, "checks": checks, "budget_s": BUDGET_S}, indent=2)
    )
    print(f"{'case':15s} {'outcome':10s} {'fold':17s} {'seconds':>8s} {'overlay JIT runs':>17s}")
    for case, r in results.items():
        print(
            f"{case:15s} {r.get('outcome', 'ERROR'):10s} {r.get('fold', {}).get('fold', '-'):17s} "
            f"{r.get('seconds', float('nan')):>8.3f} {r.get('overlay_jit_runs', -1):>17d}"
        )
    warm = results["prebuilt-warm"]
    print(
        f"\nstartup budget {BUDGET_S} s; prebuilt-warm took {warm.get('seconds')} s, of which the staging grid "
        f"{warm.get('staging_seconds')} s\n"
    )
    for name, ok in checks:
        print(f"{'PASS' if ok else 'FAIL'}  {name}")
    return 0 if all(ok for _, ok in checks) else 1


if __name__ == "__main__":
    raise SystemExit(main())
