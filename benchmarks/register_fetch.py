"""What register-file fetches cost the commit's step loop: a static count of the sources each SASS instruction
reads from the register file (not from the operand reuse cache), and GPU probes that time FFMA streams which
fetch two or three registers an instruction.

Why: at T=16 B=8 the step loops alone (no per-item work, no state traffic) take ~334 us of the commit's ~400,
and they run as fast at 12 warps an SM as at 16 (notes/perf.md, session 19): the loop is bound by what each
scheduler can issue, not by latency. An FFMA has three sources; the probes measure what it costs when none of
them comes from the reuse cache, and the count says how many of the loop's FFMAs are like that.

    python3 benchmarks/register_fetch.py --count gdn_fold.cubin      # any machine: the step loop's fetches
    python3 benchmarks/register_fetch.py --probe --out DIR           # GPU (sm_90): the probes' issue rates

The reuse model (SASS `.reuse`, per operand slot): a source is not fetched when the instruction before it read
the same register in the same slot and marked it `.reuse`; any other instruction in between evicts it.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "overlay"), str(ROOT)]

from benchmarks import ncu_regions  # noqa: E402

_SOURCE_REGISTER = re.compile(r"-?\|?R(\d+)(\.reuse)?")
_PREDICATE = re.compile(r"!?(P\d|PT)$")


def fetched(instructions: list[str]) -> list[int]:
    """For each SASS instruction (cuobjdump's text, without the offset), the distinct general registers its
    sources read from the register file. RZ (R255) is not a register read."""
    counts, previous = [], []
    for text in instructions:
        text = text.split(";")[0].strip()
        if text.startswith("@"):
            text = text.split(None, 1)[1]
        operands = [o.strip() for o in text.split(None, 1)[1].split(",")] if " " in text else []
        # the destination is operands[0], and the register after it where that is a predicate (SHFL PT, Rd, ..)
        two_outputs = len(operands) > 1 and _PREDICATE.match(operands[0]) and _SOURCE_REGISTER.match(operands[1])
        first_source = 2 if two_outputs else 1
        slots, reads = [], set()
        for slot, operand in enumerate(operands[first_source:]):
            m = _SOURCE_REGISTER.match(operand)
            if not m or m.group(1) == "255":
                slots.append(None)
                continue
            register = int(m.group(1))
            slots.append((register, bool(m.group(2))))
            if not (slot < len(previous) and previous[slot] == (register, True)):
                reads.add(register)
        counts.append(len(reads))
        previous = slots
    return counts


def step_loop_fetches(cubin: Path, kernel: str = ncu_regions.KERNEL) -> dict:
    """{"instructions", "ffma", "ffma_fetch3", "fetch3"} of the commit kernel's step loop (the larger of the two
    innermost FFMA loops: ncu_regions.region_bounds) in `cubin`."""
    sass = ncu_regions.sass_of(cubin, kernel)
    _, steps = ncu_regions.region_bounds(sass)
    lo, hi = steps[0]
    loop = [text for offset, text in sass if lo <= offset <= hi]
    counts = fetched(loop)
    ffma = [n for text, n in zip(loop, counts) if _opcode(text) == "FFMA"]
    return {"instructions": len(loop), "ffma": len(ffma), "ffma_fetch3": sum(n >= 3 for n in ffma),
            "fetch3": sum(n >= 3 for n in counts)}


def _opcode(text: str) -> str:
    words = text.split()
    return (words[1] if words[0].startswith("@") else words[0]).split(".")[0]


# probe -> the FFMA of chain j (8 chains a thread, a, b: per-thread values, c accumulates) or, for the float4
# probes, of column q (a, c[q]: register quads from 128-bit loads, b a scalar)
PROBES = {
    "reuse2": "c[j] = fma_rn(a[j], b[0], c[j]);",  # b[0] from the reuse cache: a and c fetched
    "fetch3": "c[j] = fma_rn(a[j], b[j], c[j]);",  # three registers fetched
    "mix": "c[j] = fma_rn(a[j], b[j & 4 ? 0 : j], c[j]);",  # half the chains like fetch3, half like reuse2
    "fadd2": "c[j] = add_rn(c[j], a[j]);",
    "shfl_fadd": "c[j] = add_rn(c[j], __shfl_xor_sync(0xffffffffu, c[j], 1 << (j & 3)));",  # the dot's tree
}
QUAD_PROBES = {
    "same_bank2": "c[q] = make_float4(fma_rn(a.x, b, c[q].x), fma_rn(a.y, b, c[q].y), fma_rn(a.z, b, c[q].z), "
                  "fma_rn(a.w, b, c[q].w));",  # the two fetched registers have the same parity
    "cross_bank2": "c[q] = make_float4(fma_rn(a.y, b, c[q].x), fma_rn(a.x, b, c[q].y), fma_rn(a.w, b, c[q].z), "
                   "fma_rn(a.z, b, c[q].w));",
}
BODY_FP32 = 32  # FP32 instructions a probe's source loop runs an iteration (ptxas unrolls it further)
THREADS, BLOCKS_PER_SM, ITERATIONS = 128, 8, 20000  # 8 warps a scheduler: latency is not what is timed

_PRELUDE = r"""
__device__ __forceinline__ float fma_rn(float a, float b, float c) { float r; asm volatile("fma.rn.f32 %0, %1, %2, %3;" : "=f"(r) : "f"(a), "f"(b), "f"(c)); return r; }
__device__ __forceinline__ float add_rn(float a, float b) { float r; asm volatile("add.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b)); return r; }
"""
_CHAINS = r"""
extern "C" __global__ void __launch_bounds__(128) NAME(float* out, int iters, float s) {
  float a[8], b[8], c[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) {  // per-lane values (a uniform one would be folded or put in a uniform register)
    a[j] = s * (threadIdx.x + j);
    b[j] = s * (threadIdx.x ^ j) + j;
    c[j] = s * (threadIdx.x + 2 * j);
  }
  for (int i = 0; i < iters; ++i)
#pragma unroll
    for (int r = 0; r < 32; ++r) { const int j = r & 7; BODY }
  float t = 0.f;
#pragma unroll
  for (int j = 0; j < 8; ++j) t += c[j];
  out[blockIdx.x * blockDim.x + threadIdx.x] = t;
}
"""
_QUADS = r"""
extern "C" __global__ void __launch_bounds__(128) NAME(float* out, int iters, float s) {
  const float4* in = reinterpret_cast<const float4*>(out) + (blockIdx.x * blockDim.x + threadIdx.x) * 5;
  float4 a = in[0], c[4];
  const float b = s * threadIdx.x;
#pragma unroll
  for (int q = 0; q < 4; ++q) c[q] = in[1 + q];
  for (int i = 0; i < iters; ++i)
#pragma unroll
    for (int r = 0; r < 8; ++r) { const int q = r & 3; BODY }
  float t = 0.f;
#pragma unroll
  for (int q = 0; q < 4; ++q) t += c[q].x + c[q].y + c[q].z + c[q].w;
  out[blockIdx.x * blockDim.x + threadIdx.x] = t;
}
"""


def probe_source() -> str:
    return (_PRELUDE + "".join(_CHAINS.replace("NAME", n).replace("BODY", b) for n, b in PROBES.items())
            + "".join(_QUADS.replace("NAME", n).replace("BODY", b) for n, b in QUAD_PROBES.items()))


def probe_cubin() -> bytes:
    from replayssm_overlay.kernels import nvrtc

    return nvrtc.compile_cubin(probe_source(), [], "register_fetch.cu")[0]


def _fp32(loop: list[str]) -> int:
    return sum(_opcode(text) in ("FFMA", "FADD", "FMUL") for text in loop)


def timed_loop(sass: list[tuple[int, str]]) -> list[str]:
    """The instructions of a probe's timed loop: of its SASS loops, the one with the most FP32 instructions."""
    bodies = ([text for offset, text in sass if lo <= offset <= hi] for lo, hi, _ in ncu_regions.loops(sass))
    return max(bodies, key=_fp32)


def probe_fetches(cubin_path: Path) -> dict:
    """{probe: {"instructions", "fp32", "fetch3"}} of each probe's timed loop: its instructions, its FP32 ones
    (FFMA, FADD, FMUL), and those fetching three registers."""
    found = {}
    for name in (*PROBES, *QUAD_PROBES):
        loop = timed_loop(ncu_regions.sass_of(cubin_path, name))
        found[name] = {"instructions": len(loop), "fp32": _fp32(loop), "fetch3": sum(n >= 3 for n in fetched(loop))}
    return found


def run_probes(out: Path) -> int:
    import torch

    from replayssm_overlay.kernels import cu_driver

    from benchmarks import timing

    results: dict = {"probes": {}}
    run = timing.Run(results)
    run.start(out, "register_fetch.log", "register_fetch.json")
    cubin = probe_cubin()
    (out / "register_fetch.cubin").write_bytes(cubin)
    static = probe_fetches(out / "register_fetch.cubin")
    torch.cuda.init()
    torch.zeros(1, device="cuda")  # the primary context, which the driver calls below use
    lib = cu_driver.driver()
    module = ctypes.c_void_p()
    cu_driver.check(lib.cuModuleLoadData(ctypes.byref(module), ctypes.create_string_buffer(cubin, len(cubin))), "load")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    blocks = sms * BLOCKS_PER_SM
    buffer = torch.rand(blocks * THREADS * 20, device="cuda")  # the quad probes read 5 float4 a thread
    warps_per_scheduler = blocks * THREADS // 32 / (4 * sms)
    cycles_per_us = timing.sm_cycles_per_us()
    results.update(device=torch.cuda.get_device_name(), sm_cycles_per_us=cycles_per_us, blocks=blocks,
                   threads=THREADS, iterations=ITERATIONS)
    run.log(f"{torch.cuda.get_device_name()}: SM clock {cycles_per_us:.0f} cycles/us, {blocks} blocks of {THREADS}")
    run.log(f"{'probe':14} {'loop':>5} {'fp32':>5} {'fetch 3':>8} {'us':>9} {'cycles/instr':>13} {'cycles/fp32':>12}")
    out_ptr, iters, seed = ctypes.c_void_p(buffer.data_ptr()), ctypes.c_int(ITERATIONS), ctypes.c_float(1.0000001)
    params = (ctypes.c_void_p * 3)(ctypes.addressof(out_ptr), ctypes.addressof(iters), ctypes.addressof(seed))
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    for name in (*PROBES, *QUAD_PROBES):
        fn = ctypes.c_void_p()
        cu_driver.check(lib.cuModuleGetFunction(ctypes.byref(fn), module, name.encode()), name)
        us = timing.event_us(lambda: cu_driver.check(
            lib.cuLaunchKernel(fn, blocks, 1, 1, THREADS, 1, 1, 0, stream, params, None), name), reps=5, warmup=1)
        loop = static[name]
        passes = ITERATIONS * BODY_FP32 / loop["fp32"]  # of the SASS loop, by each warp
        cycles = us * cycles_per_us / warps_per_scheduler / passes  # a scheduler's cycles per loop pass
        results["probes"][name] = dict(us=us, cycles_per_instruction=cycles / loop["instructions"],
                                       cycles_per_fp32=cycles / loop["fp32"], loop=loop)
        run.log(f"{name:14} {loop['instructions']:5d} {loop['fp32']:5d} {loop['fetch3']:8d} {us:9.1f} "
                f"{cycles / loop['instructions']:13.3f} {cycles / loop['fp32']:12.3f}")
        run.save()
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--count", type=Path, metavar="CUBIN",
                      help="the commit kernel's step loop: its fetches (any machine)")
    what.add_argument("--probe", action="store_true", help="time the probes (GPU); results in --out")
    ap.add_argument("--out", type=Path, help="results folder for --probe (register_fetch.json, .log, .cubin)")
    args = ap.parse_args(argv)
    if args.probe:
        if not args.out:
            ap.error("--probe needs --out DIR")
        return run_probes(args.out)
    print(json.dumps(step_loop_fetches(args.count)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
