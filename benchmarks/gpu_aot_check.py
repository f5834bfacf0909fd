"""GPU proof of the ahead-of-time fold kernels (run on the H200; see benchmarks/README.md).

    python benchmarks/gpu_aot_check.py --kernel overlay|sglang --artifacts DIR [--out DIR]

DIR was built elsewhere (on a CPU machine, for sm_90, with this node's Triton and Python) by
`replayssm-overlay kernels build` (for `sglang`: with `--provider benchmarks.aot_sglang_fold:aot_specializations`).
The kernel under test is the overlay's commit (`kernels/commit_plan.py` on `kernels/gdn_fold.py`)
or SGLang 0.5.19's (its wrapper, with its module's JIT kernel swapped for the prebuilt one). Every case
runs in a fresh Python process with an empty TRITON_CACHE_DIR and counts Triton compilations with
`triton.knobs.compilation.listener`:

  prebuilt   the loader's kernels: must compile nothing, write nothing to the Triton cache, and fold
             bitwise like the JIT;
  jit        the same wrapper on Triton's JIT (the reference, and the control for the counter);
  refused-*  a copy of DIR with a wrong Triton version, a wrong arch, or one changed cubin: the loader
             must refuse with the reason, and the fold falls back to the JIT with a warning.

Each case folds twice (without, then with a track slot) on the same seeded random inputs and records
the sha256 of the whole state tensor afterwards; "equal" means equal hashes, i.e. bitwise equal
tensors. Prints a table, writes aot_check_<kernel>.json to --out, exits 0 only if every check holds.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "overlay"), str(REPO)]

from benchmarks.aot_sglang_fold import PROOF_LAYERS, PROOF_SLOTS  # noqa: E402

HV, H, K, V, WINDOW, BATCH = 32, 16, 128, 128, 16, 6
CASES = ("prebuilt", "jit", "refused-triton", "refused-arch", "refused-tampered")


def make_inputs(torch, has_track: bool) -> dict:
    """Seeded random pool tensors and a batch with a padded row and random accept lengths."""
    gen = torch.Generator(device="cuda").manual_seed(20261130 + has_track)
    cuda = dict(device="cuda")
    L, S = PROOF_LAYERS, PROOF_SLOTS
    inputs = {
        "checkpoint_state": torch.randn(L, S, HV, V, K, generator=gen, **cuda) * 0.1,
        "rawv_cache": torch.randn(L, S, HV, WINDOW, V, generator=gen, **cuda).to(torch.bfloat16),
        "rawk_cache": torch.randn(L, S, H, WINDOW, K, generator=gen, **cuda).to(torch.bfloat16),
        "g_cache": -torch.rand(L, S, HV, WINDOW, generator=gen, **cuda) * 0.5,
        "beta_cache": torch.rand(L, S, HV, WINDOW, generator=gen, **cuda),
        "ssm_state_indices": torch.tensor([3, 0, -1, 5, 1, 2], dtype=torch.int32, **cuda),
        "accept_lens": torch.randint(1, WINDOW + 1, (BATCH,), generator=gen, dtype=torch.int32, **cuda),
        "max_cache_len": WINDOW,
        "num_k_heads": H,
    }
    if has_track:
        inputs["mamba_track_indices"] = torch.tensor([6, -1, -1, 7, -1, -1], dtype=torch.int32, **cuda)
        inputs["mamba_steps_to_track"] = (inputs["accept_lens"] - 1).clamp(min=0) // 2
    return inputs


class SGLangFold:
    """SGLang's wrapper; `use(prebuilt set or None)` swaps its module's kernel (None: its JIT kernel)."""

    def __init__(self):
        from benchmarks.aot_sglang_fold import load_fold_module

        self.module = load_fold_module()
        self.jit_kernel = self.module.gdn_replayssm_exact_fold_kernel

    def use(self, artifacts) -> None:
        self.module.gdn_replayssm_exact_fold_kernel = artifacts.kernel(self.jit_kernel) if artifacts else self.jit_kernel

    def __call__(self, inputs: dict) -> None:
        self.module.commit_gdn_replayssm_fold_all_layers(**inputs)


class OverlayFold:
    """The overlay's commit (`kernels/commit_plan.py`) on the prebuilt binaries or Triton's JIT, with a
    conv pair of its own (the sha256 below covers the temporal state)."""

    def __init__(self):
        from replayssm_overlay.kernels import commit_plan, launch

        self.commit_plan, self.launch = commit_plan, launch
        self.kernels = None

    def use(self, artifacts) -> None:
        self.kernels = self.launch.PrebuiltKernels(artifacts) if artifacts else self.launch.JitKernels()

    def __call__(self, inputs: dict) -> None:
        import types

        import torch

        state = inputs["checkpoint_state"]
        L, S, B = state.shape[0], state.shape[1], inputs["ssm_state_indices"].shape[0]
        conv = inputs.setdefault("conv", torch.zeros(L, S, 64, 3, dtype=torch.bfloat16, device=state.device))
        window = inputs.setdefault("conv_window", torch.ones(L, B, WINDOW, 64, 3, dtype=torch.bfloat16,
                                                             device=state.device))
        pool = types.SimpleNamespace(temporal=state, replayssm_rawv=inputs["rawv_cache"],
                                     replayssm_rawk=inputs["rawk_cache"], replayssm_g=inputs["g_cache"],
                                     replayssm_beta=inputs["beta_cache"], conv=[conv], intermediate_conv_window=[window])
        track = inputs.get("mamba_track_indices"), inputs.get("mamba_steps_to_track")
        plan = self.commit_plan.CommitPlan(pool, B, track[0] is not None, self.kernels)
        plan.run(inputs["ssm_state_indices"], inputs["accept_lens"], *track)


SUBJECTS = {"sglang": SGLangFold, "overlay": OverlayFold}


def run_case(case: str, artifacts: Path, kernel: str) -> dict:
    """One case, in this (fresh) process."""
    import torch
    import triton

    compiles = []
    triton.knobs.compilation.listener = lambda **kw: compiles.append(bool(kw.get("cache_hit")))
    from benchmarks import timing  # imports torch: in the case's own process, after its environment is set
    from replayssm_overlay.kernels import loader

    fold = SUBJECTS[kernel]()
    result = {"case": case, "kernel": kernel, "triton": triton.__version__, "torch": torch.__version__,
              "gpu": torch.cuda.get_device_name(), "folds": []}
    for has_track in (False, True):
        inputs = make_inputs(torch, has_track)
        before = _sha(torch, inputs["checkpoint_state"])
        torch.cuda.synchronize()
        start = time.perf_counter()
        if case == "jit":
            fold.use(None)
            used = "jit"
        else:
            artifacts_set, reason = loader.open_or_explain(artifacts)
            if artifacts_set is None:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    warnings.warn(f"prebuilt fold kernels refused, using the JIT fold: {reason}")
                result["refusal"] = reason
                result["warning"] = str(caught[0].message)
                fold.use(None)
                used = "jit-fallback"
            else:
                fold.use(artifacts_set)
                used = "prebuilt"
        fold(inputs)
        torch.cuda.synchronize()
        first = time.perf_counter() - start
        after = _sha(torch, inputs["checkpoint_state"])
        steady = round(timing.event_us(functools.partial(fold, make_scratch(inputs)), reps=10, warmup=0) / 1e3, 3)
        result["folds"].append({"has_track": has_track, "used": used, "first_call_s": round(first, 4),
                                "steady_ms": steady, "state_sha256": after, "changed": after != before})
    result["compilations"] = compiles.count(False)
    result["listener_calls"] = len(compiles)
    cache = Path(os.environ["TRITON_CACHE_DIR"])
    result["triton_cache_files"] = sum(1 for p in cache.rglob("*") if p.is_file()) if cache.exists() else 0
    return result


def make_scratch(inputs: dict) -> dict:
    """The same call on a copy of the state, so the timing repeats leave the checked result alone."""
    scratch = dict(inputs)
    scratch["checkpoint_state"] = inputs["checkpoint_state"].clone()
    return scratch


def _sha(torch, tensor) -> str:
    return hashlib.sha256(tensor.contiguous().view(torch.uint8).cpu().numpy().tobytes()).hexdigest()


def mismatched_copy(artifacts: Path, case: str, workdir: Path) -> Path:
    """A copy of the artifacts with one deliberate mismatch."""
    copy = workdir / case
    shutil.copytree(artifacts, copy)
    manifest_path = copy / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    if case == "refused-triton":
        manifest["builder"]["triton"] = "3.5.1"
    elif case == "refused-arch":
        manifest["target"]["arch"] = 100
    elif case == "refused-tampered":
        cubin = next(copy.glob("kernels/*/*/*.cubin"))
        data = bytearray(cubin.read_bytes())
        data[len(data) // 2] ^= 0xFF
        cubin.write_bytes(bytes(data))
    manifest_path.write_text(json.dumps(manifest, indent=2))
    return copy


def verdicts(results: dict) -> list[tuple[str, bool]]:
    jit = [f["state_sha256"] for f in results["jit"]["folds"]]
    checks = [
        ("jit control: the listener sees the JIT compile", results["jit"]["compilations"] >= 2),
        ("jit control: the fold changes the state", all(f["changed"] for f in results["jit"]["folds"])),
        ("prebuilt: zero Triton compilations", results["prebuilt"]["compilations"] == 0),
        ("prebuilt: nothing written to the Triton cache (no gcc, no kernel)",
         results["prebuilt"]["triton_cache_files"] == 0),
        ("prebuilt: the prebuilt kernels ran", all(f["used"] == "prebuilt" for f in results["prebuilt"]["folds"])),
        ("prebuilt: bitwise equal to the JIT", [f["state_sha256"] for f in results["prebuilt"]["folds"]] == jit),
    ]
    for case in CASES[2:]:
        r = results[case]
        checks += [
            (f"{case}: refused with a reason", bool(r.get("refusal"))),
            (f"{case}: fell back to the JIT with a warning",
             all(f["used"] == "jit-fallback" for f in r["folds"]) and "refused" in r.get("warning", "")),
            (f"{case}: fallback bitwise equal to the JIT", [f["state_sha256"] for f in r["folds"]] == jit),
        ]
    return checks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernel", choices=sorted(SUBJECTS), default="overlay", help="fold under test")
    parser.add_argument("--artifacts", required=True, type=Path, help="artifact folder built for this node")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "out")), help="where to write JSON")
    parser.add_argument("--case", choices=CASES, help=argparse.SUPPRESS)  # child mode
    args = parser.parse_args()
    if args.case:
        print(json.dumps(run_case(args.case, args.artifacts, args.kernel)))
        return 0

    args.out.mkdir(parents=True, exist_ok=True)
    results = {}
    with tempfile.TemporaryDirectory(prefix="rso-aot-check-") as tmp:
        tmp = Path(tmp)
        for case in CASES:
            folder = args.artifacts.resolve() if case in ("prebuilt", "jit") else mismatched_copy(args.artifacts, case, tmp)
            env = dict(os.environ, TRITON_CACHE_DIR=str(tmp / f"triton-cache-{case}"), PYTHONUNBUFFERED="1")
            run = subprocess.run([sys.executable, __file__, "--kernel", args.kernel, "--artifacts", str(folder),
                                  "--case", case],
                                 capture_output=True, text=True, env=env)
            if run.returncode != 0:
                print(run.stdout, run.stderr, sep="\n", file=sys.stderr)
                results[case] = {"case": case, "error": run.stderr[-3000:], "folds": [], "compilations": -1}
                continue
            results[case] = json.loads(run.stdout.strip().splitlines()[-1])
            print(f"{case:18s} done", flush=True)
    try:
        checks = verdicts(results)
    except (KeyError, IndexError) as err:
        checks = [(f"results complete ({err!r})", False)]
    (args.out / f"aot_check_{args.kernel}.json").write_text(json.dumps({"results": results, "checks": checks}, indent=2))

    print(f"\nkernel: {args.kernel}, artifacts {args.artifacts}")
    print(f"{'case':18s} {'compiles':>8s} {'cache files':>11s} {'used':>13s} {'first call s':>13s} {'steady ms':>10s}")
    for case, r in results.items():
        for fold in r["folds"]:
            print(f"{case:18s} {r['compilations']:>8d} {r.get('triton_cache_files', -1):>11d} {fold['used']:>13s} "
                  f"{fold['first_call_s']:>13.4f} {fold['steady_ms']:>10.3f}  track={fold['has_track']}")
    for case in CASES[2:]:
        print(f"{case}: {results[case].get('refusal', results[case].get('error', '?'))[:200]}")
    print()
    for name, ok in checks:
        print(f"{'PASS' if ok else 'FAIL'}  {name}")
    return 0 if all(ok for _, ok in checks) else 1


if __name__ == "__main__":
    raise SystemExit(main())
