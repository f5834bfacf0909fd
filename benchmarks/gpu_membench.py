"""What the commit's state traffic can reach at 4 steps: the memory-pattern probes of `membench.cu` beside
torch's copy and in-place multiply of the same bytes, in one run (GPU only).

Why: at 397B's shape (L=45, HV=16, a 4-step window, B=8) the commit moves 755 MB of fp32 state and takes
~220 us, 84% of the 4 GiB copy ceiling; its memory-only skeleton takes 214 us (notes/perf.md, session 7).
Whether the missing 16% is the in-place pattern itself (any kernel pays it) or the way the kernel moves its
tiles (bulk copies in, stores from registers, one buffer a warp, a barrier per team item) decides whether a
kernel change can meet the 230 us eager target there. Each probe reads and writes every tile of the commit
in place (scale 1.0) and is checked to leave the state unchanged.

    python3 benchmarks/gpu_membench.py --out DIR [--cubin membench.cubin]

Without --cubin the probes are compiled here with NVRTC (`replayssm_overlay.kernels.nvrtc`).
"""

from __future__ import annotations

import argparse
import ctypes
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "overlay"), str(ROOT)]
from replayssm_overlay.kernels import cu_driver, cuda_fold, nvrtc  # noqa: E402

from benchmarks import timing  # noqa: E402

SOURCE = Path(__file__).with_name("membench.cu")
TEAM, TILE_FLOATS = 4, 2048
# probe -> (buffers of 8 KB a warp, blocks per SM it is built for): membench.cu
PROBES = {"ldst": (0, 4), "ldst_half": (0, 8), "tma": (1, 4), "tma_bar": (1, 4), "tma_bulkstore": (1, 4), "tma2": (2, 3)}
RESULTS: dict = {"rows": []}
RUN = timing.Run(RESULTS)


class Probe(ctypes.Structure):
    """`struct Probe` of membench.cu."""

    _fields_ = [("state", ctypes.c_void_p), ("slots", ctypes.c_void_p), ("layers", ctypes.c_int32),
                ("batch", ctypes.c_int32), ("slots_in_pool", ctypes.c_int32), ("tiles_per_slot", ctypes.c_int32),
                ("scale", ctypes.c_float), ("contiguous", ctypes.c_int32), ("linear", ctypes.c_int32)]


def launcher(module, name: str, buffers: int, per_sm_built: int, probe: Probe, items: int | None = None):
    """A callable that launches probe `name` on the persistent grid the driver says fits (blocks per SM as
    built), or on one block per team item (`items`), and that grid."""
    lib, check = cu_driver.driver(), cu_driver.check
    fn = ctypes.c_void_p()
    check(lib.cuModuleGetFunction(ctypes.byref(fn), module, f"probe_{name}".encode()), name)
    shared = TEAM * buffers * TILE_FLOATS * 4 + TEAM * 16
    check(lib.cuFuncSetAttribute(fn, cuda_fold._CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared), "max dynamic shared")
    per_sm = ctypes.c_int()
    check(lib.cuOccupancyMaxActiveBlocksPerMultiprocessor(ctypes.byref(per_sm), fn, 32 * TEAM, ctypes.c_size_t(shared)),
          "occupancy")
    blocks = items or min(per_sm.value, per_sm_built) * torch.cuda.get_device_properties(0).multi_processor_count
    params = (ctypes.c_void_p * 1)(ctypes.addressof(probe))
    launch = lib.cuLaunchKernel

    def run():
        check(launch(fn, blocks, 1, 1, 32 * TEAM, 1, 1, shared, ctypes.c_void_p(torch.cuda.current_stream().cuda_stream),
                     params, None), name)

    return run, blocks, min(per_sm.value, per_sm_built) * TEAM


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="results folder (membench.json, membench.log)")
    ap.add_argument("--cubin", type=Path, help="membench.cu compiled for sm_90 (default: NVRTC here)")
    ap.add_argument("--layers", type=int, default=45)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--pool", type=int, default=16, help="slots in the pool (the batch's slots are a random draw)")
    ap.add_argument("--heads", type=int, default=16, help="value heads of a layer-slot (128 x 128 fp32 each)")
    args = ap.parse_args()
    RUN.start(args.out, "membench.log", "membench.json")
    cubin = args.cubin.read_bytes() if args.cubin else nvrtc.compile_cubin(SOURCE.read_text(), [], "membench.cu")[0]
    torch.cuda.init()
    torch.zeros(1, device="cuda")  # the primary context, which the driver calls below use
    lib = cu_driver.driver()
    module = ctypes.c_void_p()
    cu_driver.check(lib.cuModuleLoadData(ctypes.byref(module), ctypes.create_string_buffer(cubin, len(cubin))), "load")

    tiles = args.heads * 128 * 128 // TILE_FLOATS
    state = torch.randn(args.layers, args.pool, tiles, TILE_FLOATS, device="cuda")
    slots = torch.randperm(args.pool, device="cuda")[:args.batch].to(torch.int32)
    before = state.clone()
    moved = 2 * args.layers * args.batch * tiles * TILE_FLOATS * 4  # bytes read + written
    in_order = torch.arange(args.batch, device="cuda", dtype=torch.int32)
    probe = Probe(state.data_ptr(), slots.data_ptr(), args.layers, args.batch, args.pool, tiles, 1.0, 0, 0)
    RESULTS.update(shape=vars(args) | {"out": str(args.out), "cubin": str(args.cubin)}, bytes=moved,
                   device=torch.cuda.get_device_name())

    ceiling = timing.copy_ceiling()
    RESULTS["copy_ceiling_GBps"] = ceiling / 1e9
    RUN.log(f"copy ceiling (4 GiB) {ceiling / 1e9:.0f} GB/s; the commit's state traffic {moved / 1e6:.0f} MB")
    same = torch.empty(moved // 8, device="cuda")
    same2 = torch.empty_like(same)
    rows = [("torch copy_ (same bytes)", timing.event_us(lambda: same2.copy_(same)), None, None, True),
            ("torch mul_ in place (same bytes)", timing.event_us(lambda: same.mul_(1.0)), None, None, True)]
    del same, same2
    items = args.layers * args.batch * tiles // TEAM
    for name, (buffers, per_sm) in PROBES.items():
        for grid in ("persistent", "an item a block"):
            if grid != "persistent" and name == "tma2":
                continue
            run, blocks, warps = launcher(module, name, buffers, per_sm, probe, None if grid == "persistent" else items)
            for linear, contiguous_slots, contiguous in ((0, 0, 0), (0, 0, 1), (1, 0, 0), (0, 1, 0), (1, 1, 0)):
                if contiguous and grid != "persistent":
                    continue
                probe.linear, probe.contiguous = linear, contiguous
                probe.slots = (in_order if contiguous_slots else slots).data_ptr()
                us = timing.event_us(run)
                torch.cuda.synchronize()
                label = (f"{name}, {grid}, {'linear' if linear else 'fold'} lanes, {'slots in order' if contiguous_slots else 'random slots'}"
                         f"{', items contiguous' if contiguous else ''}")
                rows.append((label, us, blocks, warps, bool(torch.equal(state, before))))
    RUN.log(f"{'pattern':80} {'us':>8} {'GB/s':>6} {'ceiling':>8} {'blocks':>6} {'warps/SM':>8} state kept")
    for name, us, blocks, warps, kept in rows:
        rate = moved / (us / 1e6)
        RESULTS["rows"].append(dict(pattern=name, us=us, GBps=rate / 1e9, of_ceiling=rate / ceiling, blocks=blocks,
                                    warps_per_sm=warps, state_kept=kept))
        RUN.log(f"{name:80} {us:8.1f} {rate / 1e9:6.0f} {rate / ceiling:8.1%} {blocks or '':>6} {warps or '':>8} {kept}")
    RUN.save()
    return 0 if all(r[4] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
