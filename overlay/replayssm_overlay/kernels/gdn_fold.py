"""The overlay's GDN ReplaySSM fold: replay the accepted raw window into the fp32 state, all layers in two
launches (k l2-normalized once into a scratch, then the fold), bitwise equal to SGLang 0.5.19's decode
recurrence run token by token.

Why a kernel of our own: 0.5.19's fold keeps the decode kernel's tile (one warp holds a [K=128, 32]
block, four k values per lane), so every step reduces over k with 5 butterfly shuffles per column, twice
per step counting the l2 norm, and waits on each step's loads. At DFlash windows (T=16) that is
latency and shuffle bound, a quarter of the bandwidth floor. This kernel computes the same function with
the same fp32 operations in the same association, but lays the tile out so that most of the reduction
tree is inside a thread, normalizes each k once instead of once per column block, and prefetches each
step's v, g and beta one step ahead.

The reduction tree it must reproduce (read off the decode kernel's PTX, Triton 3.6.0 and 3.7.1, sm_90,
K=128, 16-byte-divisible strides, which is how the server calls it): write k = 4*i + j (i < 32, j < 4).
Each sum over k (the l2 norm of k, and h^T k) is first a chain per group i,
`((x[4i] + x[4i+1]) + x[4i+2]) + x[4i+3]` (the compiler contracts each product into it as an fma), then
a butterfly over i that pairs i with i^16, then i^8, i^4, i^2, i^1. Here i is split into its five bits
(a4..a0), each a size-2 axis of the tile, and the sums pair exactly those partners, with the chain's
fmas written out, so the result does not depend on which axes Triton keeps in a thread. The tile keeps
j, a4, a3 (16 k) of 4 columns in each thread and puts a2..a0 and 4 columns on the lanes: 3 shuffles
per column and step instead of 5, a quarter of the k reads of one column per thread, 121 registers.

Under TRITON_INTERPRET=1 SGLang's kernels reduce with numpy (a row-sequential sum for h^T k, numpy's
pairwise sum for the l2 norm), so the same reference has another tree on the CPU: `TREE_NUMPY` selects
those numpy calls on the same values, which is what keeps the CPU tests bitwise too. The GPU tree is
also checked on the CPU, against a numpy emulation of it (tests/kernels).

Shapes (per tensor-parallel rank):
  state   [num_layers, num_slots, HV, V, K] fp32, folded in place (per head [V, K], k fastest)
  rawv    [num_layers, num_slots, HV, RL, V] bf16 (raw v per verify step)
  rawk    [num_layers, num_slots, H, RL, K]  bf16 (raw pre-norm k per verify step)
  g, beta [num_layers, num_slots, HV, RL]    fp32
  slots, accept_lens, track_slots, track_steps [B] int32
Grid: (V // BV, B, HV * num_layers) for the fold (BV // 16 warps), (H * num_layers, B) for the k norm.

Specializations (what `aot_specializations` lists for the ahead-of-time build): the constexprs are the
head geometry (H, HV, K=128, V), BV, the window RL, USE_QK_L2NORM, NULL_ID (-1), HAS_TRACK (both values)
FRONT (the Triton version's lane order, see `_dot_k`) and TREE_NUMPY=False; strides, batch, layer and
slot counts are runtime int32 arguments (not specialized), so one binary serves any pool size.
"""

from __future__ import annotations

import os

import triton
import triton.language as tl

SUPPORTED_K = 128  # the tree above is the one the decode kernel has for K = 128
BLOCK_V = 16  # columns per program
NUM_WARPS = 1  # BLOCK_V // 16: each warp covers 16 columns
NUM_STAGES = 1  # the loop prefetches by hand; Triton's pipeliner has nothing to add

# The runtime int32 strides of each kernel: never specialized, so one binary serves any pool size.
KNORM_STRIDES = ("rawk_layer_rows", "rawk_slot_rows")
FOLD_STRIDES = ("state_layer_tiles", "state_slot_tiles", "rawv_layer_rows", "rawv_slot_rows",
                "gate_layer_stride", "gate_slot_stride")


def lanes_from_front(version: str | None = None) -> bool:
    """Triton before 3.7 hands lanes to tied axes from the front, 3.7 from the back (see the tile axes)."""
    major, minor = (int(x) for x in (version or triton.__version__).split(".")[:2])
    return (major, minor) < (3, 7)


class FoldShapeNotSupported(ValueError):
    """The pool's shapes are not ones this kernel reproduces bitwise; the caller falls back."""


@triton.jit
def _split_j(x):
    """[..., 4] -> the four [...] slices j = 0, 1, 2, 3 (register renaming, no data movement)."""
    even, odd = tl.split(tl.reshape(x, x.shape[:-1] + [2, 2]))
    x0, x2 = tl.split(even)
    x1, x3 = tl.split(odd)
    return x0, x1, x2, x3


# Tile axes: [a0, a1, a2, V, a4, a3, V, a2, a1, a0, j] with k = 64*a4 + 32*a3 + 16*a2 + 8*a1 + 4*a0 + j.
# a0, a1, a2 and V each sit on two axes, one of size 1: at the front when FRONT, else at the back.
# Triton hands the lanes of a load to its non-contiguous axes in axis order, from the front in Triton
# 3.6 and from the back in 3.7, so either way a0, a1, a2 (8 lanes) and 4 V-lanes fill the warp, and
# each thread holds j, a4, a3 (16 k) of 4 columns. Speed only: the tree below is explicit.
@triton.jit
def _dot_k(x, y, TREE_NUMPY: tl.constexpr):
    """sum over k of x * y in the reference's association; the result keeps every axis, with size 1
    on the k axes.

    The fmas are written out: LLVM contracts `(x0*y0 + x1*y1)` into either fma(x0, y0, x1*y1), what the
    decode kernel's PTX has, or fma(x1, y1, x0*y0), depending on how it vectorized the code around it."""
    x, y = tl.broadcast(x, y)
    VF: tl.constexpr = x.shape[3]
    VB: tl.constexpr = x.shape[6]
    if TREE_NUMPY:
        flat = tl.reshape(tl.permute(x * y, [4, 5, 2, 7, 1, 8, 0, 9, 10, 3, 6]), [128, VF * VB])
        return tl.reshape(tl.sum(flat, 0), [1, 1, 1, VF, 1, 1, VB, 1, 1, 1, 1])
    else:
        x0, x1, x2, x3 = _split_j(x)
        y0, y1, y2, y3 = _split_j(y)
        s = tl.fma(x0, y0, x1 * y1)
        s = tl.fma(x2, y2, s)
        s = tl.fma(x3, y3, s)
        s = tl.sum(s, 4, keep_dims=True)  # i ^ 16
        s = tl.sum(s, 5, keep_dims=True)  # i ^ 8
        s = tl.sum(s, 7, keep_dims=True)  # i ^ 4 (of each pair of a-axes one has size 1)
        s = tl.sum(s, 2, keep_dims=True)
        s = tl.sum(s, 8, keep_dims=True)  # i ^ 2
        s = tl.sum(s, 1, keep_dims=True)
        s = tl.sum(s, 9, keep_dims=True)  # i ^ 1
        s = tl.sum(s, 0, keep_dims=True)
        return tl.expand_dims(s, 10)


@triton.jit
def _k_offsets(FRONT: tl.constexpr):
    """k on the tile axes (see above)."""
    if FRONT:
        lanes = (4 * tl.arange(0, 2)[:, None, None, None, None, None, None, None, None, None, None] + 8 * tl.arange(0, 2)[None, :, None, None, None, None, None, None, None, None, None]
                 + 16 * tl.arange(0, 2)[None, None, :, None, None, None, None, None, None, None, None])
    else:
        lanes = (4 * tl.arange(0, 2)[None, None, None, None, None, None, None, None, None, :, None] + 8 * tl.arange(0, 2)[None, None, None, None, None, None, None, None, :, None, None]
                 + 16 * tl.arange(0, 2)[None, None, None, None, None, None, None, :, None, None, None])
    return (
        lanes
        + 64 * tl.arange(0, 2)[None, None, None, None, :, None, None, None, None, None, None]
        + 32 * tl.arange(0, 2)[None, None, None, None, None, :, None, None, None, None, None]
        + tl.arange(0, 4)[None, None, None, None, None, None, None, None, None, None, :]
    )


@triton.jit
def _v_offsets(FRONT: tl.constexpr, BV: tl.constexpr):
    if FRONT:
        return tl.arange(0, BV)[None, None, None, :, None, None, None, None, None, None, None]
    else:
        return tl.arange(0, BV)[None, None, None, None, None, None, :, None, None, None, None]


@triton.jit(do_not_specialize=KNORM_STRIDES)
def gdn_replayssm_knorm_kernel(
    rawk,  # [L, S, H, RL, K] bf16
    slots,  # [B] int32
    accept_lens,  # [B] int32
    knorm,  # [L, B, H, RL, K] fp32 scratch: the accepted steps' l2-normalized k
    rawk_layer_rows,  # rawk strides in units of K
    rawk_slot_rows,
    H: tl.constexpr,
    K: tl.constexpr,
    RL: tl.constexpr,
    USE_QK_L2NORM: tl.constexpr,
    NULL_ID: tl.constexpr,
    FRONT: tl.constexpr,
    TREE_NUMPY: tl.constexpr,
):
    """Grid (H * L, B). Normalizes each accepted step's k once per (layer, request, k-head)."""
    i_hl = tl.program_id(0)
    i_n = tl.program_id(1)
    i_layer = (i_hl // H).to(tl.int64)
    i_h = i_hl % H
    slot = tl.load(slots + i_n).to(tl.int64)
    if slot <= NULL_ID:
        return
    n_commit = tl.load(accept_lens + i_n)
    o_k = _k_offsets(FRONT)
    p_k = rawk + (i_layer * rawk_layer_rows + slot * rawk_slot_rows + i_h * RL) * K + o_k
    p_out = knorm + ((i_layer * tl.num_programs(1) + i_n) * H + i_h) * RL * K + o_k
    for t in range(0, n_commit):
        b_k = tl.load(p_k + t * K).to(tl.float32)
        if USE_QK_L2NORM:
            b_k = b_k / tl.sqrt(_dot_k(b_k, b_k, TREE_NUMPY) + 1e-6)
        tl.store(p_out + t * K, b_k)


@triton.jit(do_not_specialize=FOLD_STRIDES)
def gdn_replayssm_fold_kernel(
    state,  # [L, S, HV, V, K] fp32, in place
    rawv,  # [L, S, HV, RL, V] bf16
    knorm,  # [L, B, H, RL, K] fp32, from gdn_replayssm_knorm_kernel
    gate,  # [L, S, HV, RL] fp32
    beta,  # [L, S, HV, RL] fp32 (same strides as gate)
    slots,  # [B] int32, < 0: padded row
    accept_lens,  # [B] int32, incl. the bonus token
    track_slots,  # [B] int32 (HAS_TRACK), < 0: none
    track_steps,  # [B] int32 (HAS_TRACK), step whose state goes to the track slot, -1: none
    state_layer_tiles,  # state strides in units of K*V
    state_slot_tiles,
    rawv_layer_rows,  # rawv strides in units of V
    rawv_slot_rows,
    gate_layer_stride,  # gate and beta strides in elements
    gate_slot_stride,
    H: tl.constexpr,
    HV: tl.constexpr,
    K: tl.constexpr,
    V: tl.constexpr,
    BV: tl.constexpr,
    RL: tl.constexpr,
    NULL_ID: tl.constexpr,
    HAS_TRACK: tl.constexpr,
    FRONT: tl.constexpr,
    TREE_NUMPY: tl.constexpr,
):
    """Grid (V // BV, B, HV * L)."""
    i_v = tl.program_id(0)
    i_n = tl.program_id(1)
    i_hvl = tl.program_id(2)
    i_layer = (i_hvl // HV).to(tl.int64)
    i_hv = i_hvl % HV
    i_h = i_hv // (HV // H)

    slot = tl.load(slots + i_n).to(tl.int64)
    if slot <= NULL_ID:
        return
    n_commit = tl.load(accept_lens + i_n)
    if n_commit <= 0:
        return
    if HAS_TRACK:
        track_slot = tl.load(track_slots + i_n).to(tl.int64)
        track_step = tl.load(track_steps + i_n)
    else:
        track_slot = NULL_ID
        track_step = -1

    o_k = _k_offsets(FRONT)
    o_v = i_v * BV + _v_offsets(FRONT, BV)
    head_tile = (i_layer * state_layer_tiles + i_hv) * K * V
    p_h = state + head_tile + slot * state_slot_tiles * K * V + o_v * K + o_k
    b_h = tl.load(p_h)

    # k is loaded with the state tile's shape (`0 * o_v` broadcasts it over the columns, so each thread
    # loads the 16 k of its own columns): that keeps the loop in the state's layout, j, a4, a3 of 4
    # columns in each thread and a2, a1, a0 x 4 columns on the lanes (the tile axes above `_dot_k`)
    p_k = knorm + ((i_layer * tl.num_programs(1) + i_n) * H + i_h) * RL * K + o_k + 0 * o_v
    p_v = rawv + (i_layer * rawv_layer_rows + slot * rawv_slot_rows + i_hv * RL) * V + o_v
    p_g = gate + i_layer * gate_layer_stride + slot * gate_slot_stride + i_hv * RL
    p_b = beta + i_layer * gate_layer_stride + slot * gate_slot_stride + i_hv * RL

    n_v = tl.load(p_v)
    n_g = tl.load(p_g)
    n_b = tl.load(p_b)
    for t in range(0, n_commit):
        b_k = tl.load(p_k + t * K)
        b_v = n_v.to(tl.float32)
        b_g = n_g
        b_beta = n_b
        # the next step's v, g, beta are in flight while this step computes (prefetching k too cost
        # 64 registers and was slower on the H200, measured with the 64-k-per-thread tile: notes/perf.md)
        more = t + 1 < n_commit
        n_v = tl.load(p_v + (t + 1) * V, mask=more, other=0.0)
        n_g = tl.load(p_g + (t + 1), mask=more, other=0.0)
        n_b = tl.load(p_b + (t + 1), mask=more, other=0.0)

        b_h *= tl.exp(b_g)
        b_v -= _dot_k(b_h, b_k, TREE_NUMPY)
        b_v *= b_beta
        b_h = tl.fma(b_k, b_v, b_h)

        if HAS_TRACK:
            if (t == track_step) & (track_slot > NULL_ID):
                tl.store(state + head_tile + track_slot * state_slot_tiles * K * V + o_v * K + o_k, b_h)

    tl.store(p_h, b_h)


def _tree_numpy() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def _as_int32(t):
    import torch

    return t if t.dtype == torch.int32 and t.stride(0) == 1 else t.to(torch.int32).contiguous()


def _units(stride: int, unit: int, what: str) -> int:
    if stride % unit:
        raise FoldShapeNotSupported(f"{what} stride {stride} is not a multiple of {unit}")
    return stride // unit


def check_shapes(state, rawv, rawk, gate, beta) -> None:
    """Raise FoldShapeNotSupported unless the pool has the layout and head dims this kernel handles."""
    L, S, HV, V, K = state.shape
    H, RL = rawk.shape[2], rawv.shape[3]
    if K != SUPPORTED_K or V % BLOCK_V or HV % H:
        raise FoldShapeNotSupported(
            f"head dims K={K} V={V} HV={HV} H={H} (need K={SUPPORTED_K}, V % {BLOCK_V} == 0, HV % H == 0)")
    if str(state.dtype) != "torch.float32" or str(gate.dtype) != "torch.float32" or beta.dtype != gate.dtype:
        raise FoldShapeNotSupported(f"state/gate/beta dtypes {state.dtype}/{gate.dtype}/{beta.dtype}")
    if rawv.dtype != rawk.dtype:
        raise FoldShapeNotSupported(f"raw ring dtypes differ: {rawv.dtype} vs {rawk.dtype}")
    expect = {
        "state": (state, (HV * V * K, V * K, K, 1)),
        "rawv": (rawv, (HV * RL * V, RL * V, V, 1)),
        "rawk": (rawk, (H * RL * K, RL * K, K, 1)),
        "gate": (gate, (HV * RL, RL, 1)),
        "beta": (beta, (HV * RL, RL, 1)),
    }
    for name, (t, inner) in expect.items():
        if tuple(t.stride()[2:]) != inner[1:] or t.shape[0] != L or t.shape[1] != S:
            raise FoldShapeNotSupported(f"{name} {tuple(t.shape)} strides {t.stride()} are not slot-contiguous")
    if gate.stride() != beta.stride() or rawv.shape[2] != HV or rawk.shape[3] != RL:
        raise FoldShapeNotSupported("gate/beta/raw rings disagree in shape or strides")


def fold_all_layers(
    state,
    rawv,
    rawk,
    gate,
    beta,
    slots,
    accept_lens,
    track_slots=None,
    track_steps=None,
    use_qk_l2norm: bool = True,
    null_id: int = -1,
    kernels=None,
    tree_numpy: bool | None = None,
) -> None:
    """Fold every layer's accepted window into `state` (contract of SGLang 0.5.19's
    `commit_gdn_replayssm_fold_all_layers`): two launches for all layers, the k normalization then the
    fold. `kernels` is a pair of prebuilt launchers (knorm, fold) from kernels/loader.py, or None for
    Triton's JIT. `tree_numpy` forces a reduction tree (tests); None: numpy's under the interpreter."""
    import torch

    check_shapes(state, rawv, rawk, gate, beta)
    L, _, HV, V, K = state.shape
    H, RL = rawk.shape[2], rawv.shape[3]
    B = slots.shape[0]
    if B == 0:
        return
    has_track = track_slots is not None and track_steps is not None
    slots = _as_int32(slots)
    accept_lens = _as_int32(accept_lens)
    track_slots = _as_int32(track_slots) if has_track else slots
    track_steps = _as_int32(track_steps) if has_track else accept_lens
    knorm_kernel, fold_kernel = kernels or (gdn_replayssm_knorm_kernel, gdn_replayssm_fold_kernel)
    tree_numpy = _tree_numpy() if tree_numpy is None else tree_numpy
    front = lanes_from_front()
    knorm = torch.empty((L, B, H, RL, K), dtype=torch.float32, device=state.device)
    knorm_kernel[(H * L, B)](
        rawk=rawk, slots=slots, accept_lens=accept_lens, knorm=knorm,
        rawk_layer_rows=_units(rawk.stride(0), K, "rawk layer"),
        rawk_slot_rows=_units(rawk.stride(1), K, "rawk slot"),
        H=H, K=K, RL=RL, USE_QK_L2NORM=use_qk_l2norm, NULL_ID=null_id, FRONT=front, TREE_NUMPY=tree_numpy,
        num_warps=1, num_stages=NUM_STAGES,
    )
    fold_kernel[(V // BLOCK_V, B, HV * L)](
        state=state, rawv=rawv, knorm=knorm, gate=gate, beta=beta, slots=slots, accept_lens=accept_lens,
        track_slots=track_slots, track_steps=track_steps,
        state_layer_tiles=_units(state.stride(0), K * V, "state layer"),
        state_slot_tiles=_units(state.stride(1), K * V, "state slot"),
        rawv_layer_rows=_units(rawv.stride(0), V, "rawv layer"),
        rawv_slot_rows=_units(rawv.stride(1), V, "rawv slot"),
        gate_layer_stride=gate.stride(0),
        gate_slot_stride=gate.stride(1),
        H=H, HV=HV, K=K, V=V, BV=BLOCK_V, RL=RL, NULL_ID=null_id, HAS_TRACK=has_track, FRONT=front,
        TREE_NUMPY=tree_numpy, num_warps=NUM_WARPS, num_stages=NUM_STAGES,
    )


def aot_specializations(hv: int, h: int, k: int, v: int, window: int, triton_version: str | None = None) -> list:
    """What the ahead-of-time build compiles for one per-rank head shape and verify window: the k
    normalization (l2 norm on) and the fold with and without a track slot; null id -1, the GPU tree.
    Empty if the shape is not one this kernel reproduces."""
    if k != SUPPORTED_K or v % BLOCK_V or hv % h:
        return []
    front = lanes_from_front(triton_version)
    ints = {name: "*i32" for name in ("slots", "accept_lens")}
    knorm_sig = {"rawk": "*bf16", "knorm": "*fp32", **ints, **{name: "i32" for name in KNORM_STRIDES}}
    specs = [dict(
        kernel=gdn_replayssm_knorm_kernel, signature=knorm_sig, num_warps=1, num_stages=NUM_STAGES,
        constexprs=dict(H=h, K=k, RL=window, USE_QK_L2NORM=True, NULL_ID=-1, FRONT=front, TREE_NUMPY=False),
        label=f"gdn_knorm H{h} K{k} RL{window}",
    )]
    fold_sig = {"state": "*fp32", "rawv": "*bf16", "knorm": "*fp32", "gate": "*fp32", "beta": "*fp32", **ints,
                "track_slots": "*i32", "track_steps": "*i32", **{name: "i32" for name in FOLD_STRIDES}}
    for has_track in (False, True):
        specs.append(dict(
            kernel=gdn_replayssm_fold_kernel, signature=dict(fold_sig), num_warps=NUM_WARPS, num_stages=NUM_STAGES,
            constexprs=dict(H=h, HV=hv, K=k, V=v, BV=BLOCK_V, RL=window, NULL_ID=-1, HAS_TRACK=has_track,
                            FRONT=front, TREE_NUMPY=False),
            label=f"gdn_fold HV{hv} H{h} K{k} V{v} RL{window} track={has_track}",
        ))
    return specs
