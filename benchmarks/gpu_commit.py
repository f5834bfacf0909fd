"""One GPU run for the commit as the server runs it: exactness of every path, then eager and
CUDA-graph timings of the whole commit (fold + conv rollback, track slot) through the entry point
`replayssm_overlay.fold.fold_accepted_prefix` for each fold choice, beside SGLang 0.5.19's own commit
(`commit_gdn_replayssm_fold_after_verify`), with the peak memory of one commit.

    RSO_SGLANG_KERNELS=DIR python benchmarks/gpu_commit.py --out OUTDIR [--artifacts DIR] [--quick]

`--artifacts`: the prebuilt CUDA kernel for this node (`replayssm-overlay kernels build`); without it the
served choice (overlay-cuda) is skipped. The other choices: SGLang's commit through the entry point
(`RSO_FOLD=sglang`) and the overlay's Triton kernel (`RSO_FOLD=triton`). `--cuda LABEL=CUBIN:COLUMNS[:GRID]`
adds another build of the CUDA kernel (a layout variant, `nvrtc.compile_cubin`) as choice overlay-cuda-LABEL,
launched on the grid GRID (`cuda_fold.GRIDS`: auto, as served, by default; persistent, per-item or pairs pin one).
Exactness (torch.equal on fresh random inputs whose ring SGLang's verify
kernel wrote):
  kernel    the overlay's fold vs SGLang's decode kernel run token by token
            (`fused_sigmoid_gating_delta_rule_update`), track slots poisoned with NaN first;
  entry     each choice's whole commit (temporal state and conv state of every slot) vs SGLang's commit;
  snapshot  the overlay's commit vs stock's snapshot path on the same inputs (verify writing every
            step's state, then SGLang's scatter of the last accepted step and of the track step).
Eager time: wall = call to GPU done (synchronize before and after), host = call to return; medians of
--calls calls rotating over 4 disjoint slot sets. Graph time: median CUDA-graph replay of the same call.
The host breakdown times the entry point's pieces in turn (one call of each per round, so that a host that
is slower for a while slows all alike), with the GPU idle before each call and after the host waited 2 ms
for the GPU (as a server waits for the accept lengths), a trivial call among them, so that what the wait
itself costs the next call is seen apart from the commit.
Writes OUTDIR/commit_<triton>.json as it goes and prints a table last; exit 1 if any check fails.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import sys
import time
import traceback
import types
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "overlay"), str(ROOT)]

from benchmarks import timing  # noqa: E402
from benchmarks.fold_cases import decode_reference, make_case, sglang_module, snapshot_reference  # noqa: E402
from replayssm_overlay import fold  # noqa: E402
from replayssm_overlay.kernels import commit_plan, gdn_fold, loader  # noqa: E402

# (L, HV, H, window): Qwen3.5-35B-A3B at TP 1; Qwen3.5-397B-A17B at TP 4 (60 layers, 45 GDN)
SHAPES = {"35b": (30, 32, 16, 16), "397b-tp4": (45, 16, 4, 4)}
K = V = 128
CONV_WIDTH = 3  # conv kernel 4
HOST_WAITS = {"idle": 0, "after 2 ms": 2000}  # GPU wait before each call of the host breakdown (us)
RESULTS: dict = {"checks": [], "timing": [], "memory": []}
RUN = timing.Run(RESULTS)  # the results folder: started in main
log, save = RUN.log, RUN.save


def conv_pair(L, S, rows, N, H, HV, device="cuda", seed=0):
    """A conv state pool and SGLang's deduplicated window view (step t = shared[..., t:t+W])."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    dim = 2 * H * K + HV * V
    dst = torch.randn(L, S, dim, CONV_WIDTH, generator=gen).to(torch.bfloat16).to(device)
    span = N + CONV_WIDTH - 1
    shared = torch.randn(L, rows, dim, span, generator=gen).to(torch.bfloat16).to(device)
    src = shared.as_strided((L, rows, N, dim, CONV_WIDTH), (rows * dim * span, dim * span, 1, span, 1))
    return dst, src, shared


def spec_state(temporal, rawv, rawk, g, beta, conv, window):
    return types.SimpleNamespace(
        temporal=temporal,
        replayssm_rawv=rawv,
        replayssm_rawk=rawk,
        replayssm_g=g,
        replayssm_beta=beta,
        conv=[conv],
        intermediate_conv_window=[window],
    )


def use_choice(kind, kernels=None):
    """Switch the entry point's fold choice in this process (the server decides once)."""
    fold._choice = (kind, "benchmark", kernels)
    fold._plans.clear()


def stock_commit(ss, slots, lens, last, ts=None, tsteps=None):
    sglang_module("fla.gdn_replayssm_spec_fold").commit_gdn_replayssm_fold_after_verify(
        spec_state=ss,
        state_batch_indices=slots,
        accept_lens=lens,
        last_correct_step_indices=last,
        mamba_track_indices=ts,
        mamba_steps_to_track=tsteps,
    )


def entry_commit(ss, slots, lens, ts=None, tsteps=None):
    fold.fold_accepted_prefix(
        spec_state=ss, state_batch_indices=slots, accept_lens=lens, mamba_track_indices=ts, mamba_steps_to_track=tsteps
    )


def record(kind, name, ok, **extra):
    RESULTS["checks"].append(dict(kind=kind, name=name, bitwise=bool(ok), **extra))
    log(f"check {kind:8s} {name}: {'BITWISE' if ok else 'DIFFERS'} {extra if extra else ''}")
    save()
    return bool(ok)


# ----------------------------------------------------------------------------------------- exactness
def case_configs():
    cfgs = [
        dict(
            L=2,
            HV=4,
            H=2,
            V=64,
            N=4,
            slots=[3, -1, 0, 5],
            accept_lens=[4, 2, 1, 3],
            num_slots=7,
            track=([6, -1, -1, 1], [1, -1, -1, 2]),
        )
    ]
    gen = torch.Generator().manual_seed(20261201)
    for L, HV, H, N, B in (
        (30, 32, 16, 16, 8),
        (45, 16, 4, 4, 8),
        (30, 32, 16, 2, 3),
        (4, 8, 2, 7, 5),
        (30, 32, 16, 16, 1),
    ):
        perm = torch.randperm(3 * B + 2, generator=gen).tolist()
        slots, free = perm[:B], perm[B:]
        if B > 2:
            slots[1] = -1
        lens = torch.randint(1, N + 1, (B,), generator=gen).tolist()
        lens[0] = N
        tracked = [i % 2 == 0 and slots[i] >= 0 for i in range(B)]  # a padded row has no track slot, as in serving
        track = (
            [free[i] if tracked[i] else -1 for i in range(B)],
            [int(torch.randint(0, lens[i], (1,), generator=gen)) if tracked[i] else -1 for i in range(B)],
        )
        cfgs.append(dict(L=L, HV=HV, H=H, V=V, N=N, slots=slots, accept_lens=lens, num_slots=3 * B + 2, track=track))
    return cfgs


def exact_kernel(case, expected, tracked, name):
    state = case.initial.clone()
    poisoned = [int(s) for s in case.track_slots.tolist() if s >= 0] if case.track_slots is not None else []
    for s in poisoned:
        state[:, s] = float("nan")
    gdn_fold.fold_all_layers(
        state, case.rawv, case.rawk, case.g, case.beta, case.slots, case.accept_lens, case.track_slots, case.track_steps
    )
    torch.cuda.synchronize()
    active = sorted({s for s in case.slots.tolist() if s >= 0})
    ok = torch.equal(state[:, active], expected[:, active])
    for row, snap in tracked.items():
        ok &= torch.equal(state[:, int(case.track_slots[row])], snap)
    written = set(active) | {int(case.track_slots[r]) for r in tracked}
    rest = [s for s in range(state.shape[1]) if s not in written and s not in poisoned]
    ok &= torch.equal(state[:, rest], case.initial[:, rest])
    return record("kernel", name, ok)


def exact_entry(case, name, choices, expected=None):
    """Each choice's whole commit vs SGLang's commit on the same pool (and its active slots vs the decode
    reference, where given); the track vectors int64, as the server passes them."""
    B = len(case.slots)
    if case.track_slots is not None:
        case = dataclasses.replace(case, track_slots=case.track_slots.long(), track_steps=case.track_steps.long())
    conv0, window, _shared = conv_pair(case.L, case.temporal.shape[1], B, case.N, case.H, case.HV, seed=B)
    last = case.accept_lens.long() - 1
    ref = spec_state(case.initial.clone(), case.rawv, case.rawk, case.g, case.beta, conv0.clone(), window)
    stock_commit(ref, case.slots, case.accept_lens, last, case.track_slots, case.track_steps)
    torch.cuda.synchronize()
    ok_all = True
    for kind, kernels in choices:
        use_choice(kind, kernels)
        ss = spec_state(case.initial.clone(), case.rawv, case.rawk, case.g, case.beta, conv0.clone(), window)
        entry_commit(ss, case.slots, case.accept_lens, case.track_slots, case.track_steps)
        torch.cuda.synchronize()
        ok = torch.equal(ss.temporal, ref.temporal) and torch.equal(ss.conv[0], ref.conv[0])
        ok_all &= record("entry", f"{kind} {name}", ok, fallbacks=len(fold.fallbacks()))
        if expected is not None and kind.startswith("overlay-cuda"):
            active = sorted({s for s in case.slots.tolist() if s >= 0})
            ok_all &= record("kernel", f"{kind} {name}", torch.equal(ss.temporal[:, active], expected[:, active]))
    return ok_all


def exact_snapshot(case, name):
    use_choice("overlay-triton")
    expected = snapshot_reference(case)
    ss = spec_state(
        case.initial.clone(),
        case.rawv,
        case.rawk,
        case.g,
        case.beta,
        *conv_pair(case.L, case.temporal.shape[1], len(case.slots), case.N, case.H, case.HV)[:2],
    )
    entry_commit(ss, case.slots, case.accept_lens, case.track_slots, case.track_steps)
    torch.cuda.synchronize()
    return record("snapshot", name, torch.equal(ss.temporal, expected))


def exactness(choices) -> bool:
    ok = True
    for i, cfg in enumerate(case_configs()):
        case = make_case(**cfg, K=K, device="cuda", seed=300 + i)
        name = f"L{cfg['L']} HV{cfg['HV']} H{cfg['H']} N{cfg['N']} B{len(cfg['slots'])}"
        expected, tracked = decode_reference(case)
        ok &= exact_kernel(case, expected, tracked, name)
        ok &= exact_entry(case, name, choices, expected)
        if cfg["L"] * len(cfg["slots"]) * cfg["N"] * cfg["HV"] <= 30 * 8 * 16 * 32:
            ok &= exact_snapshot(case, name)
        del case, expected, tracked
        torch.cuda.empty_cache()
    return ok


# -------------------------------------------------------------------------------------------- timing
class Pool:
    """A pool of one shape with random contents and `sets` disjoint slot sets of size B, each its own tensor
    as the server's are (a fresh gather, or a CUDA-graph buffer): slots int32, track slots int64."""

    def __init__(self, L, HV, H, N, B, sets=4):
        S = 2 * sets * B + 1
        self.B, self.N, self.sets = B, N, sets
        cuda = dict(device="cuda")
        temporal = torch.randn(L, S, HV, V, K, **cuda) * 0.5
        rawv = torch.randn(L, S, HV, N, V, **cuda).to(torch.bfloat16)
        rawk = torch.randn(L, S, H, N, K, **cuda).to(torch.bfloat16)
        g = -torch.rand(L, S, HV, N, **cuda) * 0.1
        beta = torch.rand(L, S, HV, N, **cuda)
        conv, window, self._shared = conv_pair(L, S, B, N, H, HV)
        self.ss = spec_state(temporal, rawv, rawk, g, beta, conv, window)
        perm = torch.randperm(2 * sets * B, **cuda).to(torch.int32)
        self.slots = [perm[i * B : (i + 1) * B].clone() for i in range(sets)]
        self.track_slots = [perm[(sets + i) * B : (sets + i + 1) * B].long() for i in range(sets)]

    def lens(self, mode, seed):
        if mode == "all":
            return torch.full((self.B,), self.N, dtype=torch.int32, device="cuda")
        gen = torch.Generator().manual_seed(seed)
        return torch.randint(1, self.N + 1, (self.B,), generator=gen, dtype=torch.int32).cuda()


def peak_bytes(fn):
    """Bytes one call allocates above what was allocated before it, with Python's cycle collector held off:
    a tensor it freed between reading the base and resetting the peak made this read negative."""
    gc.collect()
    gc.disable()
    try:
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        fn(0)
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base
    finally:
        gc.enable()


def timing_rows(quick):
    rows = []
    for shape, (L, HV, H, N) in SHAPES.items():
        for B in (1, 8) if shape != "35b" else (1, 8, 32):
            for mode in ("all", "random"):
                rows.append((shape, L, HV, H, N, B, mode, False))
        rows.append((shape, L, HV, H, N, 8, "random", True))
    if not quick:
        for N in (4, 8):
            for mode in ("all", "random"):
                rows.append((f"35b-w{N}", 30, 32, 16, N, 8, mode, False))
        rows.append(("35b-w4", 30, 32, 16, 4, 1, "random", False))
    return rows


def time_commits(choices, calls, quick):
    for shape, L, HV, H, N, B, mode, track in timing_rows(quick):
        pool = Pool(L, HV, H, N, B)
        lens = pool.lens(mode, seed=N * 100 + B)
        last = lens.long() - 1
        tsteps = ((lens - 1) // 2).long() if track else None  # the hook's steps: the sequence lengths' int64
        row = dict(
            shape=shape, L=L, HV=HV, H=H, N=N, B=B, accept=mode, track=track, mean_accept=lens.float().mean().item()
        )

        def tslots(i):
            return pool.track_slots[i] if track else None

        def f_stock(i):
            stock_commit(pool.ss, pool.slots[i], lens, last, tslots(i), tsteps)

        def f_entry(i):
            entry_commit(pool.ss, pool.slots[i], lens, tslots(i), tsteps)

        subjects = [("stock", None, f_stock)] + [(kind, kernels, f_entry) for kind, kernels in choices]
        for name, kernels, fn in subjects:
            try:
                if name != "stock":
                    use_choice(name, kernels)
                wall, host = timing.eager_us(fn, pool.sets, calls)
                gpu = timing.graph_us(fn, pool.sets, 40)
                mem = peak_bytes(fn)
                row[name] = dict(
                    wall_us=round(wall, 1),
                    host_us=round(host, 1),
                    graph_us=round(gpu, 1),
                    peak_bytes=mem,
                    fallbacks=len(fold.fallbacks()),
                )
            except Exception:
                row[name] = dict(error=traceback.format_exc()[-1500:])
                log(row[name]["error"])
        RESULTS["timing"].append(row)
        save()
        log("time", json.dumps(row))
        del pool
        torch.cuda.empty_cache()


def cuda_fold_only(source, ss, slot_sets, lens):
    """The CUDA kernel's fold alone (conv arguments that copy nothing), launched as the plan launches it."""
    state = ss.temporal
    ints = gdn_fold.runtime_args(state, ss.replayssm_rawv, ss.replayssm_rawk, ss.replayssm_g, ss.replayssm_beta)
    src, dst, conv_ints = gdn_fold.conv_args(state, None, None)
    head = (state, ss.replayssm_rawv, ss.replayssm_rawk, src, dst, ss.replayssm_g, ss.replayssm_beta)
    args = (*head, slot_sets[0], lens, slot_sets[0], lens, *ints, *conv_ints)
    run = source.prepare(
        gdn_fold.gdn_replayssm_fold_kernel,
        gdn_fold.fold_grid(state, len(lens)),
        args,
        gdn_fold.fold_constexprs(False, False),
        {},
        0,
    )
    return lambda i: run(*head, slot_sets[i], lens, slot_sets[i], lens, *ints, *conv_ints)


def breakdown(choices):
    """At the 35b shape, T=16, all accepted: CUDA-graph time of each piece alone (our fold without conv, SGLang's
    fold and conv scatter), and the host time of the entry point's pieces (medians of 200 calls taken in turn,
    idle and after a 2 ms GPU wait; the whole entry point idle, 200 calls of each choice in a row)."""
    L, HV, H, N = SHAPES["35b"]
    for B in (1, 8):
        pool = Pool(L, HV, H, N, B)
        lens = pool.lens("all", 0)
        last = lens.long() - 1
        ss = pool.ss
        pieces = {
            "fold without conv": lambda i: gdn_fold.fold_all_layers(
                ss.temporal,
                ss.replayssm_rawv,
                ss.replayssm_rawk,
                ss.replayssm_g,
                ss.replayssm_beta,
                pool.slots[i],
                lens,
            )
        }
        stock_fold = sglang_module("fla.gdn_replayssm_spec_fold").commit_gdn_replayssm_fold_all_layers
        scatter = sglang_module("mamba.mamba_state_scatter_triton").fused_conv_window_scatter_with_mask
        pieces["sglang fold"] = lambda i: stock_fold(
            ss.temporal,
            ss.replayssm_rawv,
            ss.replayssm_rawk,
            ss.replayssm_g,
            ss.replayssm_beta,
            pool.slots[i],
            lens,
            N,
            H,
        )
        pieces["sglang conv scatter"] = lambda i: scatter(
            ss.conv[0], ss.intermediate_conv_window[0], pool.slots[i], last
        )
        for kind, source in choices:
            if kind.startswith("overlay-cuda"):
                pieces[f"{kind} fold without conv"] = cuda_fold_only(source, ss, pool.slots, lens)
        for name, fn in pieces.items():
            try:
                RESULTS.setdefault("breakdown", []).append(
                    dict(B=B, piece=name, graph_us=round(timing.graph_us(fn, pool.sets, 40), 1))
                )
            except Exception:
                RESULTS.setdefault("breakdown", []).append(dict(B=B, piece=name, error=traceback.format_exc()[-800:]))
            log("breakdown", json.dumps(RESULTS["breakdown"][-1]))
        save()
        del pool
        torch.cuda.empty_cache()
    pool = Pool(L, HV, H, N, 1)
    lens = pool.lens("all", 0)
    subjects = {
        "torch.empty(1) on the GPU": lambda i: torch.empty(1, device="cuda"),
        "commit_plan.indices x2": lambda i: (commit_plan.indices(pool.slots[i], 0), commit_plan.indices(lens, 0)),
    }
    for kind, kernels in choices:
        if kind in ("overlay-triton", "overlay-cuda"):
            plan = commit_plan.CommitPlan(pool.ss, 1, False, fold.kernel_source(kernels))
            subjects[f"CommitPlan.run ({kind})"] = lambda i, plan=plan: plan.run(pool.slots[i], lens)
    hosts = {name: {} for name in subjects}
    for wait, us in HOST_WAITS.items():
        for name, median in timing.host_us_interleaved(subjects, pool.sets, 200, us).items():
            hosts[name][wait] = round(median, 1)
    for kind, kernels in choices:
        if kind == "overlay-cuda":
            use_choice(kind, kernels)
            hosts[f"fold_accepted_prefix ({kind})"] = {
                "idle": round(
                    timing.eager_us(lambda i: entry_commit(pool.ss, pool.slots[i], lens), pool.sets, 200)[1], 1
                )
            }
    for name, medians in hosts.items():
        log("host", name, medians)
    RESULTS["host_breakdown"] = hosts
    save()


def table():
    names = ["stock", "sglang", "overlay-triton"]
    names += sorted({n for r in RESULTS["timing"] for n in r if n.startswith("overlay-cuda")})
    print(f"\nTriton {RESULTS['env']['triton']}: eager wall us (host us) / graph us; peak MB of one commit")
    print(f"{'shape':9s} {'B':>2s} {'acc':6s} {'trk':3s} | " + " | ".join(f"{n:>24s}" for n in names))
    for r in RESULTS["timing"]:
        cells = []
        for n in names:
            c = r.get(n)
            if not c or "error" in c:
                cells.append(f"{'-' if not c else 'error':>24s}")
            else:
                cells.append(
                    f"{c['wall_us']:7.1f} ({c['host_us']:5.1f}) /{c['graph_us']:7.1f} {c['peak_bytes'] / 2**20:4.0f}"
                )
        print(f"{r['shape']:9s} {r['B']:2d} {r['accept']:6s} {'y' if r['track'] else 'n':3s} | " + " | ".join(cells))
    for b in RESULTS.get("breakdown", []):
        print(f"graph B={b['B']} {b['piece']:28s} {b.get('graph_us', 'error')}")
    for name, us in RESULTS.get("host_breakdown", {}).items():
        print(f"host {name:40s} {us} us")
    bad = [c for c in RESULTS["checks"] if not c["bitwise"]]
    print(f"checks: {len(RESULTS['checks']) - len(bad)}/{len(RESULTS['checks'])} bitwise", *(c["name"] for c in bad))


def cuda_choice(spec: str, grids) -> tuple[str, str, int, str]:
    """(label, cubin path, columns, grid) of a `--cuda LABEL=CUBIN:COLUMNS[:GRID]` argument, read from the right
    so that the path may hold ':'; the grid is auto unless the last field is one of `grids`."""
    label, _, rest = spec.partition("=")
    rest, _, last = rest.rpartition(":")
    grid = "auto"
    if last in grids:
        grid = last
        rest, _, last = rest.rpartition(":")
    if not (label and rest and last.isdigit()):
        raise SystemExit(f"--cuda {spec!r}: expected LABEL=CUBIN:COLUMNS[:GRID], GRID one of {', '.join(grids)}")
    return label, rest, int(last), grid


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, type=Path, help="folder for commit_<triton>.json and the log")
    parser.add_argument("--artifacts", type=Path, help="the CUDA kernel's folder for this node (default: none)")
    parser.add_argument("--calls", type=int, default=48, help="eager calls per median (default 48)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help='only the target shapes (notes/perf.md, "Targets"; no windows 4/8 at T=16\'s pool)',
    )
    parser.add_argument("--skip-exact", action="store_true")
    parser.add_argument(
        "--cuda",
        action="append",
        default=[],
        metavar="LABEL=CUBIN:COLUMNS[:GRID]",
        help="a CUDA commit kernel binary to check and time as choice overlay-cuda-LABEL, on grid "
        "GRID (auto, persistent, per-item or pairs; default auto)",
    )
    args = parser.parse_args()
    import triton

    RUN.start(args.out, f"log_{triton.__version__}.txt", f"commit_{triton.__version__}.json")
    RESULTS["env"] = dict(torch=torch.__version__, triton=triton.__version__, gpu=torch.cuda.get_device_name())
    log("env", RESULTS["env"])
    sglang_module("mamba.mamba_state_scatter_triton")  # stock's commit imports it by name
    choices = [("sglang", None), ("overlay-triton", None)]
    if args.artifacts:
        artifacts, why = fold.covered(loader.ArtifactSet.open, args.artifacts)
        RESULTS["artifacts"] = why or str(args.artifacts)
        log("artifacts:", RESULTS["artifacts"])
        if artifacts is not None:
            choices.append(("overlay-cuda", artifacts.cuda_kernels()))
    from replayssm_overlay.kernels import cuda_fold

    for spec in args.cuda:
        label, path, columns, grid = cuda_choice(spec, cuda_fold.GRIDS)
        choices.append((f"overlay-cuda-{label}", cuda_fold.CudaKernels(Path(path).read_bytes(), path, columns, grid)))
    t0 = time.time()
    ok = True
    if not args.skip_exact:
        try:
            ok = exactness(choices)
        except Exception:
            ok = False
            log(traceback.format_exc())
        log(f"exactness done in {time.time() - t0:.0f} s")
    for part in (lambda: breakdown(choices), lambda: time_commits(choices, args.calls, args.quick)):
        try:
            part()
        except Exception:
            log(traceback.format_exc())
    save()
    log(f"total {time.time() - t0:.0f} s")
    table()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
