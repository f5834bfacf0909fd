"""Every window the CUDA commit kernel takes (1 to 32 steps), each on another geometry, batch, index dtype,
conv dtype and track choice, checked bitwise through the entry point; meant to run under compute-sanitizer.

Why: the step loop is unrolled by its load queue, and whether the compiled loop stops at the accepted steps
depends on the unroll (NVVM dropped the remainder loop of a 3-way unroll: the PREFETCH=2 build read past its
shared memory, notes/perf.md, "Levers tried"); a read past the block's normalized-k buffers shows only for
some windows, accept lengths and one of the two buffers, which a check at one shape cannot show. This sweep
gives memcheck every window, both buffers (batches of 1 to 48 rows, so blocks fold several items), int32 and
int64 index vectors, bf16 and fp32 conv state, padded rows and track slots, each on the pinned grids
(`cuda_fold.grid_size`: persistent, a block per work unit, a block per two: auto serves the first or blocks of
a few units; and the self-check's three blocks, "strided"), and checks each commit:
  entry   the whole commit through `fold.fold_accepted_prefix` (temporal and conv state of every slot)
          vs SGLang 0.5.19's commit on the same pool;
  decode  the active slots and the track slots vs SGLang's decode kernel run token by token.

    RSO_SGLANG_KERNELS=DIR python benchmarks/gpu_sweep.py --out OUTDIR [--cubin FILE]
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck --kernel-name kns=gdn_fold \\
        --error-exitcode 3 python benchmarks/gpu_sweep.py --out OUTDIR

(without torch's caching allocator every tensor is its own allocation, so memcheck also sees a global
read past a tensor). Without --cubin the kernel is built here with NVRTC, as `kernels build` does.
Writes OUTDIR/sweep_<triton>.json and its log as it goes; prints a table last; exit 1 if a check fails.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import traceback
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "overlay"), str(ROOT)]

from benchmarks import timing  # noqa: E402
from benchmarks.fold_cases import decode_reference, make_case, sglang_module  # noqa: E402
from benchmarks.gpu_commit import conv_pair, entry_commit, spec_state, stock_commit, use_choice  # noqa: E402
from replayssm_overlay import fold  # noqa: E402
from replayssm_overlay.kernels import cuda_fold  # noqa: E402

WINDOWS = range(1, cuda_fold.MAX_WINDOW + 1)  # every window the CUDA kernel takes
GEOMETRIES = ((4, 2, 64), (8, 2, 128), (16, 4, 128), (32, 16, 128), (4, 4, 128), (16, 2, 128))  # (HV, H, V)
BATCHES = (1, 3, 8, 33, 48)  # past a warp's lanes too: rows 32.. of the index vectors
RESULTS: dict = {"checks": []}
RUN = timing.Run(RESULTS)
log, save = RUN.log, RUN.save


def sweep_configs(seed: int = 20261202) -> list[dict]:
    """One make_case config per window, the other axes cycled so that each value meets several windows:
    slots random and distinct in a pool of 2B + 3 (every third row of a batch past 2 padded), accept lengths
    1..N with the first row's N, a track slot for every other active row at a step it accepted."""
    rng = random.Random(seed)
    configs = []
    for i, N in enumerate(WINDOWS):
        HV, H, V = GEOMETRIES[i % len(GEOMETRIES)]
        B = BATCHES[i % len(BATCHES)]
        num_slots = 2 * B + 3
        slots = rng.sample(range(num_slots), B)
        slots = [-1 if B > 2 and row % 3 == 2 else s for row, s in enumerate(slots)]
        lens = [N] + [rng.randint(1, N) for _ in range(B - 1)]
        free = [s for s in range(num_slots) if s not in slots]
        track = None
        if i % 2:
            tracked = [row % 2 == 0 and slots[row] >= 0 for row in range(B)]
            track = (
                [free[row] if tracked[row] else -1 for row in range(B)],
                [rng.randrange(lens[row]) if tracked[row] else -1 for row in range(B)],
            )
        configs.append(
            dict(
                L=2,
                HV=HV,
                H=H,
                V=V,
                N=N,
                slots=slots,
                accept_lens=lens,
                num_slots=num_slots,
                track=track,
                wide=bool(i // 2 % 2),
                conv_fp32=bool(i % 3 == 1),
            )
        )
    return configs


def name_of(cfg: dict, grid: str) -> str:
    return (
        f"N{cfg['N']} HV{cfg['HV']} H{cfg['H']} V{cfg['V']} B{len(cfg['slots'])}"
        f" {'int64' if cfg['wide'] else 'int32'} conv-{'fp32' if cfg['conv_fp32'] else 'bf16'}"
        f"{' track' if cfg['track'] else ''} grid-{grid}"
    )


def record(kind: str, name: str, ok: bool) -> bool:
    RESULTS["checks"].append(dict(kind=kind, name=name, bitwise=bool(ok)))
    log(f"check {kind:6s} {name}: {'BITWISE' if ok else 'DIFFERS'}")
    save()
    return bool(ok)


def check(cfg: dict, kernels, seed: int) -> bool:
    """The entry point's CUDA commit of one config vs SGLang's commit and vs the decode reference."""
    case = make_case(
        **{k: v for k, v in cfg.items() if k not in ("wide", "conv_fp32")}, K=128, device="cuda", seed=seed
    )
    expected, tracked = decode_reference(case)
    B, name = len(cfg["slots"]), name_of(cfg, kernels.grid)
    conv, window, shared = conv_pair(case.L, case.temporal.shape[1], B, case.N, case.H, case.HV, seed=seed)
    if cfg["conv_fp32"]:  # the same values as fp32, the window the same view of its (contiguous) copy
        conv, window = conv.float(), shared.float().as_strided(window.shape, window.stride())
    ts = case.track_slots.long() if case.track_slots is not None else None  # as the server passes them
    tsteps = case.track_steps.long() if case.track_steps is not None else None
    ref = spec_state(case.initial.clone(), case.rawv, case.rawk, case.g, case.beta, conv.clone(), window)
    stock_commit(ref, case.slots, case.accept_lens, case.accept_lens.long() - 1, ts, tsteps)
    use_choice("overlay-cuda", kernels)
    ss = spec_state(case.initial.clone(), case.rawv, case.rawk, case.g, case.beta, conv.clone(), window)
    widen = (lambda t: t.long()) if cfg["wide"] else (lambda t: t)
    fell_before = len(fold.fallbacks())
    entry_commit(ss, widen(case.slots), widen(case.accept_lens), ts, tsteps)
    torch.cuda.synchronize()
    ours = len(fold.fallbacks()) == fell_before  # else SGLang's commit ran it, and the check proves nothing
    ok = record("entry", name, ours and torch.equal(ss.temporal, ref.temporal) and torch.equal(ss.conv[0], ref.conv[0]))
    active = sorted({s for s in cfg["slots"] if s >= 0})
    same = torch.equal(ss.temporal[:, active], expected[:, active])
    for row, snapshot in tracked.items():
        same &= torch.equal(ss.temporal[:, int(case.track_slots[row])], snapshot)
    return record("decode", name, same) and ok


def table() -> None:
    checks = RESULTS["checks"]
    failed = [c for c in checks if not c["bitwise"]]
    print(f"\n{'window':>6}  {'entry':>8}  {'decode':>8}  config")
    by_name = {}
    for c in checks:
        by_name.setdefault(c["name"], {})[c["kind"]] = "BITWISE" if c["bitwise"] else "DIFFERS"
    for name, kinds in by_name.items():
        print(f"{name.split()[0][1:]:>6}  {kinds.get('entry', '-'):>8}  {kinds.get('decode', '-'):>8}  {name}")
    print(f"{len(checks) - len(failed)} passed, {len(failed)} failed")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, type=Path, help="folder for sweep_<triton>.json and the log")
    parser.add_argument("--cubin", type=Path, help="the CUDA commit kernel to check (default: built here with NVRTC)")
    args = parser.parse_args()
    import triton

    from replayssm_overlay.kernels import nvrtc

    RUN.start(args.out, f"sweep_log_{triton.__version__}.txt", f"sweep_{triton.__version__}.json")
    RESULTS["env"] = dict(torch=torch.__version__, triton=triton.__version__, gpu=torch.cuda.get_device_name())
    log("env", RESULTS["env"])
    sglang_module("mamba.mamba_state_scatter_triton")  # stock's commit imports it by name
    cubin = args.cubin.read_bytes() if args.cubin else nvrtc.build_fold()[0]
    grids = [cuda_fold.CudaKernels(cubin, str(args.cubin or "nvrtc"), grid=grid) for grid in cuda_fold.GRIDS[1:]]
    t0, ok = time.time(), True
    for i, cfg in enumerate(sweep_configs()):
        for kernels in grids:
            try:
                ok &= check(cfg, kernels, seed=500 + i)
            except Exception:
                ok = False
                record("error", name_of(cfg, kernels.grid), False)
                log(traceback.format_exc())
    log(f"sweep done in {time.time() - t0:.0f} s")
    table()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
