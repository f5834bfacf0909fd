"""Conv-window rollback of the commit in one launch: each active row's conv state becomes its window after
the last accepted step, and each track row's track slot gets its window after the track step.

Why our own kernel: SGLang 0.5.19's `fused_conv_window_scatter_with_mask` does the same copy, but it is a
Python wrapper around a JIT kernel, called once for the active rows and once more for the track rows,
and it casts both index tensors on every call (the last accepted step arrives as int64): four small
launches and their Python on every commit. This kernel copies the same elements (a copy: bitwise by
construction) for both row sets in one launch, reads the last accepted step as `accept_lens - 1` on the
GPU, and is built ahead of time like the fold, so `commit_plan` launches it without any per-call
Python beyond the launch itself.

Shapes: conv `dst` [L, slots, dim, W] with contiguous (dim, W) per slot; window `src`
[L, rows, steps, dim, W], any strides (SGLang's deduplicated view overlaps its steps). Row r of the
batch reads `src[:, r]`. A row is skipped where its slot is < 0 or out of range, or its step is < 0 or
past the window, exactly as SGLang's scatter skips it.
"""

from __future__ import annotations

import triton
import triton.language as tl

BLOCK = 1024  # elements per program
DTYPES = {"torch.bfloat16": "bf16", "torch.float16": "fp16", "torch.float32": "fp32"}  # prebuilt conv dtypes


class ConvShapeNotSupported(ValueError):
    """The conv pair is not laid out as this kernel expects; the caller falls back to SGLang's commit."""


@triton.jit(
    do_not_specialize=[
        "n_rows", "elems", "width", "src_layer", "src_row", "src_step", "src_dim", "src_win", "dst_layer",
        "dst_slot", "n_src_rows", "n_steps", "n_slots", "step_offset",
    ]
)
def conv_window_rollback_kernel(
    src,  # [L, rows, steps, dim, W] window view
    dst,  # [L, slots, dim, W] conv state
    slots,  # [B] int32 active slots
    steps,  # [B] int32: accept_lens (step_offset -1) or the last accepted steps (step_offset 0)
    track_slots,  # [B] int32 (HAS_TRACK)
    track_steps,  # [B] int32 (HAS_TRACK), -1: none
    n_rows,  # B
    elems,  # dim * W
    width,  # W
    src_layer,
    src_row,
    src_step,
    src_dim,
    src_win,
    dst_layer,
    dst_slot,
    n_src_rows,
    n_steps,
    n_slots,
    step_offset,
    BLOCK: tl.constexpr,
    HAS_TRACK: tl.constexpr,
):
    """Grid (B, or 2B with a track: the track rows second, L, cdiv(dim * W, BLOCK))."""
    pid = tl.program_id(0)
    layer = tl.program_id(1).to(tl.int64)
    block = tl.program_id(2).to(tl.int64)
    if HAS_TRACK and pid >= n_rows:
        row = pid - n_rows
        slot = tl.load(track_slots + row).to(tl.int64)
        step = tl.load(track_steps + row).to(tl.int64)
    else:
        row = pid
        slot = tl.load(slots + row).to(tl.int64)
        step = tl.load(steps + row).to(tl.int64) + step_offset
    if (slot < 0) | (slot >= n_slots) | (step < 0) | (step >= n_steps) | (row >= n_src_rows):
        return
    e = block * BLOCK + tl.arange(0, BLOCK)
    mask = e < elems
    d = e // width
    w = e % width
    data = tl.load(src + layer * src_layer + row * src_row + step * src_step + d * src_dim + w * src_win, mask=mask)
    tl.store(dst + layer * dst_layer + slot * dst_slot + e, data, mask=mask)


def runtime_args(dst, src, batch: int) -> tuple:
    """The kernel's integer arguments after `n_rows` (up to `step_offset`, excluded) for one conv pair;
    raises ConvShapeNotSupported for a layout it does not copy the way SGLang's scatter does."""
    if dst.ndim != 4 or src.ndim != 5 or dst.shape[0] != src.shape[0] or tuple(dst.shape[2:]) != tuple(src.shape[3:]):
        raise ConvShapeNotSupported(f"conv state {tuple(dst.shape)} and window {tuple(src.shape)} do not pair up")
    if dst.dtype != src.dtype or str(dst.dtype) not in DTYPES:
        raise ConvShapeNotSupported(f"conv dtypes {dst.dtype}/{src.dtype} (need one of {sorted(DTYPES)}, equal)")
    dim, width = dst.shape[2], dst.shape[3]
    if (width != 1 and dst.stride(3) != 1) or (dim != 1 and dst.stride(2) != width):
        raise ConvShapeNotSupported(f"conv state strides {dst.stride()} are not contiguous per slot")
    ints = (dim * width, width, *src.stride(), dst.stride(0), dst.stride(1), src.shape[1], src.shape[2], dst.shape[1])
    if any(value >= 2**31 for value in ints) or dst.numel() >= 2**31 or batch >= 2**31:
        raise ConvShapeNotSupported("conv tensors too large for 32-bit strides")
    return ints


def grid(dst, batch: int, has_track: bool) -> tuple:
    return ((2 if has_track else 1) * batch, dst.shape[0], triton.cdiv(dst.shape[2] * dst.shape[3], BLOCK))


def constexprs(has_track: bool) -> dict:
    return dict(BLOCK=BLOCK, HAS_TRACK=has_track)


def rollback(dst, src, slots, accept_lens, track_slots=None, track_steps=None) -> None:
    """JIT launch for tests and benchmarks (the commit uses `commit_plan`); int32 index tensors."""
    batch = slots.shape[0]
    if batch == 0:
        return
    has_track = track_slots is not None and track_steps is not None
    ints = runtime_args(dst, src, batch)
    conv_window_rollback_kernel[grid(dst, batch, has_track)](
        src, dst, slots, accept_lens, track_slots if has_track else slots, track_steps if has_track else accept_lens,
        batch, *ints, -1, **constexprs(has_track), num_warps=4, num_stages=1)


SIGNATURE_INTS = ("n_rows", "elems", "width", "src_layer", "src_row", "src_step", "src_dim", "src_win", "dst_layer",
                  "dst_slot", "n_src_rows", "n_steps", "n_slots", "step_offset")


def aot_specializations() -> list:
    """With and without a track, for each prebuilt conv dtype."""
    specs = []
    for dtype in sorted(set(DTYPES.values())):
        signature = {"src": f"*{dtype}", "dst": f"*{dtype}", "slots": "*i32", "steps": "*i32", "track_slots": "*i32",
                     "track_steps": "*i32", **{name: "i32" for name in SIGNATURE_INTS}}
        attrs = {name: [["tt.divisibility", 16]] for name in ("dst", "slots", "steps", "track_slots", "track_steps")}
        for has_track in (False, True):
            specs.append(dict(kernel=conv_window_rollback_kernel, signature=signature, attrs=attrs, num_warps=4,
                              num_stages=1, constexprs=constexprs(has_track),
                              label=f"conv rollback {dtype} track={has_track}"))
    return specs
