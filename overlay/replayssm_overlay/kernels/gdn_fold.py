"""The overlay's GDN ReplaySSM commit kernel: replay the accepted raw window into the fp32 state, all
layers in one launch, bitwise equal to SGLang 0.5.19's decode recurrence run token by token, with the
conv-window rollback (`conv_rollback.copy_window`) and the track slot in the same launch.

Why a kernel of our own: 0.5.19's fold keeps the decode kernel's tile (one warp holds a [K=128, 32]
block, four k values per lane), so every step reduces over k with 5 butterfly shuffles per column, twice
per step counting the l2 norm, and waits on each step's loads. At DFlash windows (T=16) that is
latency and shuffle bound, a quarter of the bandwidth floor. This kernel computes the same function with
the same fp32 operations in the same association, but lays the tile out so that most of the reduction
tree is inside a thread, and prefetches each step's v, g and beta one step ahead.

The reduction tree it must reproduce (read off the decode kernel's PTX, Triton 3.6.0 and 3.7.1, sm_90,
K=128, 16-byte-divisible strides, which is how the server calls it): write k = 4*i + j (i < 32, j < 4).
Each sum over k (the l2 norm of k, and h^T k) is first a chain per group i,
`((x[4i] + x[4i+1]) + x[4i+2]) + x[4i+3]` (the compiler contracts each product into it as an fma), then
a butterfly over i that pairs i with i^16, then i^8, i^4, i^2, i^1. Here i is split into its five bits
(a4..a0), each a size-2 axis of the tile, and the sums pair exactly those partners, with the chain's
fmas written out, so the result does not depend on which axes Triton keeps in a thread. The tile keeps
j, a4, a3 (16 k) of 4 columns in each thread and puts a2..a0 and 4 columns on the lanes: 3 shuffles
per column and step instead of 5, a quarter of the k reads of one column per thread, 125 registers.
Each step's k is l2-normalized in the loop (`_l2_normalized`, once per thread: the 4 columns share it),
so the commit needs no scratch: 363 SASS instructions per step (notes/perf.md, v5).

Under TRITON_INTERPRET=1 SGLang's kernels reduce with numpy (a row-sequential sum for h^T k, numpy's
pairwise sum for the l2 norm), so the same reference has another tree on the CPU: `TREE_NUMPY` selects
those numpy calls on the same values, which is what keeps the CPU tests bitwise too. The GPU tree is
also checked on the CPU, against a numpy emulation of it (tests/kernels).

Shapes (per tensor-parallel rank):
  state   [num_layers, num_slots, HV, V, K] fp32, folded in place (per head [V, K], k fastest)
  rawv    [num_layers, num_slots, HV, RL, V] bf16 (raw v per verify step; fp16 and fp32 rings too: RING_DTYPES)
  rawk    [num_layers, num_slots, H, RL, K]  bf16 (raw pre-norm k per verify step; the same dtype as rawv)
  g, beta [num_layers, num_slots, HV, RL]    fp32
  conv    [num_layers, num_slots, dim, W] and its window view [num_layers, B, RL, dim, W] (conv_rollback.py)
  slots, accept_lens [B] int32; track_slots, track_steps [B] int32 or int64 (as the server passes them)
Grid: (V // BV, B, HV * num_layers), BV // 16 warps.

Specializations: the constexprs are K=128, BV, NULL_ID (-1), HAS_TRACK, FRONT (the Triton version's lane
order, see `_dot_k`) and TREE_NUMPY; the head counts HV and HV / H, the value dim V, the window RL, every
stride and the batch, layer and slot counts are runtime int32 arguments, so Triton compiles one binary per
(conv dtype, track choice) whatever the model, tensor-parallel size or window. The served commit is the CUDA
kernel (`gdn_fold.cu`, which takes this kernel's runtime arguments as its struct, `fold_signature`); this
kernel is its JIT twin: the one the CPU tests run under Triton's interpreter, and `RSO_FOLD=triton`'s.
"""

from __future__ import annotations

import os

import triton
import triton.language as tl

from replayssm_overlay.errors import NotCovered
from replayssm_overlay.kernels import conv_rollback

INTERPRETED = tl.constexpr(os.environ.get("TRITON_INTERPRET", "0") == "1")  # Triton's interpreter is on
SUPPORTED_K = 128  # the tree above is the one the decode kernel has for K = 128
BLOCK_V = 16  # columns per program
NUM_WARPS = 1  # BLOCK_V // 16: each warp covers 16 columns
NUM_STAGES = 1  # the loop prefetches by hand; Triton's pipeliner has nothing to add
# raw k/v ring dtypes (SGLang's conv dtype, SGLANG_MAMBA_CONV_DTYPE) this kernel reads exactly: each load is
# converted to fp32, as the recurrence converts its inputs (the CUDA kernel reads bf16 only:
# cuda_fold.RING_DTYPE)
RING_DTYPES = ("torch.bfloat16", "torch.float16", "torch.float32")


def lanes_from_front() -> bool:
    """Triton before 3.7 hands lanes to tied axes from the front, 3.7 from the back (see the tile axes)."""
    major, minor = (int(x) for x in triton.__version__.split(".")[:2])
    return (major, minor) < (3, 7)


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
def _l2_normalized(k, TREE_NUMPY: tl.constexpr):
    """k / sqrt(sum k^2 + 1e-6) as the decode kernel computes it, bit for bit.

    On sm_90 Triton's fp32 division is PTX div.full.f32, which ptxas emits as x * rcp.approx(y), scaling
    both operands first only where |y| > 2**126 or |y| < 2**-126. A norm y is >= sqrt(1e-6) and
    <= sqrt(fp32 max), or inf/NaN (which give the same inf/NaN results either way), so no scaling ever
    applies: 1 / y is rcp.approx(y) exactly, and x * (1 / y) is x / y, with one multiply per element
    instead of the division's three (two of them predicated). The multiply is written as PTX: as an
    LLVM fmul, the SLP vectorizer groups it across the tile's columns (which hold the same k), and then
    nothing dedupes the norm's reduction, four times per thread (391 -> 363 SASS instructions per step
    with the asm, 527 without; notes/perf.md, v5). Under numpy (TREE_NUMPY) division is exact: it divides."""
    if TREE_NUMPY:  # numpy's pairwise sum needs one k vector, not the [128, columns] tile
        k1 = tl.max(tl.max(k, 6, keep_dims=True), 3, keep_dims=True)
        return k / tl.sqrt(_dot_k(k1, k1, TREE_NUMPY) + 1e-6)
    else:
        r = 1.0 / tl.sqrt(_dot_k(k, k, TREE_NUMPY) + 1e-6)
        if INTERPRETED:  # the GPU tree's association under the interpreter (no inline PTX there)
            return k * r
        else:
            k, r = tl.broadcast(k, r)
            return tl.inline_asm_elementwise(
                "mul.rn.f32 $0, $1, $2;", "=r,r,r", [k, r], dtype=tl.float32, is_pure=True, pack=1
            )


@triton.jit
def _k_offsets(FRONT: tl.constexpr):
    """k on the tile axes (see above)."""
    if FRONT:
        lanes = (
            4 * tl.arange(0, 2)[:, None, None, None, None, None, None, None, None, None, None]
            + 8 * tl.arange(0, 2)[None, :, None, None, None, None, None, None, None, None, None]
            + 16 * tl.arange(0, 2)[None, None, :, None, None, None, None, None, None, None, None]
        )
    else:
        lanes = (
            4 * tl.arange(0, 2)[None, None, None, None, None, None, None, None, None, :, None]
            + 8 * tl.arange(0, 2)[None, None, None, None, None, None, None, None, :, None, None]
            + 16 * tl.arange(0, 2)[None, None, None, None, None, None, None, :, None, None, None]
        )
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


@triton.jit(
    do_not_specialize=[
        "state_layer_tiles",
        "state_slot_tiles",
        "rawv_layer_rows",
        "rawv_slot_rows",
        "rawk_layer_rows",
        "rawk_slot_rows",
        "gate_layer_stride",
        "gate_slot_stride",
        "HV",
        "GROUP",
        "RL",
    ]
)
def gdn_replayssm_fold_kernel(
    state,  # [L, S, HV, V, K] fp32, in place
    rawv,  # [L, S, HV, RL, V] bf16
    rawk,  # [L, S, H, RL, K] bf16
    conv_src,  # [L, B, RL, dim, W] conv windows (any strides), see conv_rollback.py
    conv_dst,  # [L, S, dim, W] conv state, contiguous per slot
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
    rawk_layer_rows,  # rawk strides in units of K
    rawk_slot_rows,
    gate_layer_stride,  # gate and beta strides in elements
    gate_slot_stride,
    HV,  # value heads per rank
    GROUP,  # value heads per key head (HV // H)
    V,  # value head dim (a multiple of BV)
    RL,  # ring length (verify window)
    conv_elems,  # dim * W
    conv_width,  # W
    conv_chunk,  # elements each of the HV * V / BV programs of a (layer, row) copies
    conv_src_layer,
    conv_src_row,
    conv_src_step,
    conv_src_dim,
    conv_src_win,
    conv_dst_layer,
    conv_dst_slot,
    conv_rows,  # conv_src.shape[1]
    conv_steps,  # conv_src.shape[2]
    conv_slots,  # conv_dst.shape[1]
    K: tl.constexpr,
    BV: tl.constexpr,
    NULL_ID: tl.constexpr,
    HAS_TRACK: tl.constexpr,
    FRONT: tl.constexpr,
    TREE_NUMPY: tl.constexpr,
):
    """Grid (V // BV, B, HV * L). Each program also copies its share of its row's conv windows."""
    i_v = tl.program_id(0)
    i_n = tl.program_id(1)
    i_hvl = tl.program_id(2)
    i_layer = (i_hvl // HV).to(tl.int64)
    i_hv = i_hvl % HV
    i_h = i_hv // GROUP

    slot = tl.load(slots + i_n).to(tl.int64)
    n_commit = tl.load(accept_lens + i_n)
    if HAS_TRACK:
        track_slot = tl.load(track_slots + i_n).to(tl.int64)
        track_step = tl.load(track_steps + i_n).to(tl.int32)  # an int64 vector's low word: a step < RL
    else:
        track_slot = NULL_ID
        track_step = -1
    # the conv rollback first, for the active and the track slot: SGLang's scatters skip exactly the
    # rows these skip, and copy the track window whatever the active slot is
    start = (i_hv * tl.num_programs(0) + i_v) * conv_chunk
    conv_rollback.copy_window(
        slot,
        n_commit - 1,
        conv_src,
        conv_dst,
        i_layer,
        i_n,
        start,
        conv_chunk,
        conv_elems,
        conv_width,
        conv_src_layer,
        conv_src_row,
        conv_src_step,
        conv_src_dim,
        conv_src_win,
        conv_dst_layer,
        conv_dst_slot,
        conv_rows,
        conv_steps,
        conv_slots,
    )
    if HAS_TRACK:
        conv_rollback.copy_window(
            track_slot,
            track_step,
            conv_src,
            conv_dst,
            i_layer,
            i_n,
            start,
            conv_chunk,
            conv_elems,
            conv_width,
            conv_src_layer,
            conv_src_row,
            conv_src_step,
            conv_src_dim,
            conv_src_win,
            conv_dst_layer,
            conv_dst_slot,
            conv_rows,
            conv_steps,
            conv_slots,
        )

    if slot <= NULL_ID:
        return
    if n_commit <= 0:
        return

    o_k = _k_offsets(FRONT)
    o_v = i_v * BV + _v_offsets(FRONT, BV)
    head_tile = (i_layer * state_layer_tiles + i_hv) * K * V
    p_h = state + head_tile + slot * state_slot_tiles * K * V + o_v * K + o_k
    b_h = tl.load(p_h)

    # k is loaded with the state tile's shape (`0 * o_v` broadcasts it over the columns, so each thread
    # loads the 16 k of its own columns): that keeps the loop in the state's layout, j, a4, a3 of 4
    # columns in each thread and a2, a1, a0 x 4 columns on the lanes (the tile axes above `_dot_k`)
    p_k = rawk + (i_layer * rawk_layer_rows + slot * rawk_slot_rows + i_h * RL) * K + o_k + 0 * o_v
    p_v = rawv + (i_layer * rawv_layer_rows + slot * rawv_slot_rows + i_hv * RL) * V + o_v
    p_g = gate + i_layer * gate_layer_stride + slot * gate_slot_stride + i_hv * RL
    p_b = beta + i_layer * gate_layer_stride + slot * gate_slot_stride + i_hv * RL

    n_v = tl.load(p_v)
    n_g = tl.load(p_g)
    n_b = tl.load(p_b)
    for t in range(0, n_commit):
        b_k = _l2_normalized(tl.load(p_k + t * K).to(tl.float32), TREE_NUMPY)
        b_v = n_v.to(tl.float32)
        b_g = n_g
        b_beta = n_b
        # the next step's v, g, beta are in flight while this step computes (prefetching k too costs
        # registers and was slower on the H200: notes/perf.md, v4 and v5)
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


def _units(stride: int, unit: int, what: str) -> int:
    if stride % unit:
        raise NotCovered(f"{what} stride {stride} is not a multiple of {unit}")
    return stride // unit


def check_shapes(state, rawv, rawk, gate, beta) -> None:
    """Raise NotCovered unless the pool has the layout and head dims this kernel handles."""
    L, S, HV, V, K = state.shape
    H, RL = rawk.shape[2], rawv.shape[3]
    if K != SUPPORTED_K or V % BLOCK_V or HV % H:
        raise NotCovered(f"head dims K={K} V={V} HV={HV} H={H} (need K=128, V % {BLOCK_V} == 0, HV a multiple of H)")
    if str(state.dtype) != "torch.float32" or str(gate.dtype) != "torch.float32" or beta.dtype != gate.dtype:
        raise NotCovered(f"state/gate/beta dtypes {state.dtype}/{gate.dtype}/{beta.dtype}")
    if rawv.dtype != rawk.dtype or str(rawk.dtype) not in RING_DTYPES:
        raise NotCovered(
            f"raw ring dtypes {rawv.dtype}/{rawk.dtype} (need one of "
            f"{', '.join(d.removeprefix('torch.') for d in RING_DTYPES)}, the same for both)"
        )
    expect = {
        "state": (state, (HV * V * K, V * K, K, 1)),
        "rawv": (rawv, (HV * RL * V, RL * V, V, 1)),
        "rawk": (rawk, (H * RL * K, RL * K, K, 1)),
        "gate": (gate, (HV * RL, RL, 1)),
        "beta": (beta, (HV * RL, RL, 1)),
    }
    for name, (t, inner) in expect.items():
        if tuple(t.stride()[2:]) != inner[1:] or t.shape[0] != L or t.shape[1] != S:
            raise NotCovered(f"{name} {tuple(t.shape)} strides {t.stride()} are not slot-contiguous")
    if gate.stride() != beta.stride() or rawv.shape[2] != HV or rawk.shape[3] != RL:
        raise NotCovered("gate/beta/raw rings disagree in shape or strides")


def runtime_args(state, rawv, rawk, gate, beta) -> tuple:
    """The fold's integer arguments for this pool (strides in the kernel's units, then the geometry), in
    the kernel's order; raises NotCovered where the pool is not one the kernel reproduces."""
    check_shapes(state, rawv, rawk, gate, beta)
    _, _, HV, V, K = state.shape
    H, RL = rawk.shape[2], rawv.shape[3]
    return (
        _units(state.stride(0), K * V, "state layer"),
        _units(state.stride(1), K * V, "state slot"),
        _units(rawv.stride(0), V, "rawv layer"),
        _units(rawv.stride(1), V, "rawv slot"),
        _units(rawk.stride(0), K, "rawk layer"),
        _units(rawk.stride(1), K, "rawk slot"),
        gate.stride(0),
        gate.stride(1),
        HV,
        HV // H,
        V,
        RL,
    )


def fold_grid(state, batch: int) -> tuple:
    L, _, HV, V, _ = state.shape
    return (V // BLOCK_V, batch, HV * L)


def conv_args(state, conv_dst, conv_src) -> tuple:
    """(conv_src, conv_dst, the fold's conv integers) for one conv pair (None, None: no conv rollback)."""
    if conv_dst is None:
        return conv_rollback.no_conv(state)
    _, _, HV, V, _ = state.shape
    return conv_src, conv_dst, conv_rollback.runtime_args(conv_dst, conv_src, HV * V // BLOCK_V)


def fold_constexprs(has_track: bool, tree_numpy: bool, front: bool | None = None) -> dict:
    """The fold's constexprs, in the kernel's argument order (the launch passes them after the others)."""
    return dict(
        K=SUPPORTED_K,
        BV=BLOCK_V,
        NULL_ID=-1,
        HAS_TRACK=has_track,
        FRONT=lanes_from_front() if front is None else front,
        TREE_NUMPY=tree_numpy,
    )


def _as_int32(t):
    import torch

    return t if t.dtype == torch.int32 and t.stride(0) == 1 else t.to(torch.int32).contiguous()


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
    null_id: int = -1,
    tree_numpy: bool | None = None,
    conv_dst=None,
    conv_src=None,
) -> None:
    """Fold every layer's accepted window into `state` (contract of SGLang 0.5.19's
    `commit_gdn_replayssm_fold_all_layers`, l2 norm of k on) with Triton's JIT, and the conv pair rolled
    back if given: one launch. For tests and benchmarks;
    the server's commit goes through `commit_plan.CommitPlan` (checked once, then one launch).
    `tree_numpy` forces a reduction tree (tests); None: numpy's under the interpreter."""
    if null_id != -1:
        raise NotCovered(f"null block id {null_id} (the kernels are built for -1)")
    ints = runtime_args(state, rawv, rawk, gate, beta)
    src, dst, conv_ints = conv_args(state, conv_dst, conv_src)
    B = slots.shape[0]
    if B == 0:
        return
    has_track = track_slots is not None and track_steps is not None
    slots = _as_int32(slots)
    accept_lens = _as_int32(accept_lens)
    track_slots = _as_int32(track_slots) if has_track else slots
    track_steps = _as_int32(track_steps) if has_track else accept_lens
    tree_numpy = _tree_numpy() if tree_numpy is None else tree_numpy
    gdn_replayssm_fold_kernel[fold_grid(state, B)](
        state,
        rawv,
        rawk,
        src,
        dst,
        gate,
        beta,
        slots,
        accept_lens,
        track_slots,
        track_steps,
        *ints,
        *conv_ints,
        **fold_constexprs(has_track, tree_numpy),
        num_warps=NUM_WARPS,
        num_stages=NUM_STAGES,
    )


def fold_signature(conv_dtype: str) -> dict:
    """The fold's non-constexpr arguments in order, as Triton types them (conv: "bf16", "fp16", "fp32"; the
    index vectors int32): the CUDA kernel's argument struct (`cuda_fold.FoldArgs`) has the same fields."""
    ints = (
        "state_layer_tiles",
        "state_slot_tiles",
        "rawv_layer_rows",
        "rawv_slot_rows",
        "rawk_layer_rows",
        "rawk_slot_rows",
        "gate_layer_stride",
        "gate_slot_stride",
        "HV",
        "GROUP",
        "V",
        "RL",
        "conv_elems",
        "conv_width",
        "conv_chunk",
        "conv_src_layer",
        "conv_src_row",
        "conv_src_step",
        "conv_src_dim",
        "conv_src_win",
        "conv_dst_layer",
        "conv_dst_slot",
        "conv_rows",
        "conv_steps",
        "conv_slots",
    )
    return {
        "state": "*fp32",
        "rawv": "*bf16",
        "rawk": "*bf16",
        "conv_src": f"*{conv_dtype}",
        "conv_dst": f"*{conv_dtype}",
        "gate": "*fp32",
        "beta": "*fp32",
        "slots": "*i32",
        "accept_lens": "*i32",
        "track_slots": "*i32",
        "track_steps": "*i32",
        **{name: "i32" for name in ints},
    }
