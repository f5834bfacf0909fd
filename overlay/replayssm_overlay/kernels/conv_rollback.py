"""The conv-window rollback of the commit, done inside the fold's launch: each active row's conv state
becomes its window after the last accepted step, and each track row's track slot gets its window after
the track step.

Why inside the fold: SGLang 0.5.19's `fused_conv_window_scatter_with_mask` does the same copy as a Python
wrapper around a JIT kernel, called once for the active rows and once more for the track rows, casting
both index tensors on every call (the last accepted step arrives as int64): up to four small launches
and their Python on every commit, on the request's critical path. Here the fold's programs of a
(layer, row) -- HV * V / BV of them -- each copy a share of that row's windows (`copy_window`), so the
whole commit is one launch. It is a copy: bitwise by construction. The last accepted step is read as
`accept_lens - 1` on the GPU.

Shapes: conv `dst` [L, slots, dim, W] with contiguous (dim, W) per slot; window `src`
[L, rows, steps, dim, W], any strides (SGLang's deduplicated view overlaps its steps). Row r of the
batch reads `src[:, r]`. A row is skipped where its slot is < 0 or out of range, or its step is < 0 or
past the window, or r is past the window's rows, exactly as SGLang's scatter skips it.
"""

from __future__ import annotations

import triton
import triton.language as tl

from replayssm_overlay.errors import NotCovered

BLOCK = tl.constexpr(128)  # elements per copy step of one warp
DTYPES = {"torch.bfloat16": "bf16", "torch.float16": "fp16", "torch.float32": "fp32"}  # conv dtypes taken


@triton.jit
def copy_window(
    slot,
    step,
    src,
    dst,
    layer,
    row,
    start,
    chunk,
    elems,
    width,
    src_layer,
    src_row,
    src_step,
    src_dim,
    src_win,
    dst_layer,
    dst_slot,
    n_rows,
    n_steps,
    n_slots,
):
    """dst[layer, slot].flat[start:start+chunk] = src[layer, row, step] (flat in (dim, W) order), unless
    the row is one SGLang's scatter skips."""
    if (slot >= 0) & (slot < n_slots) & (step >= 0) & (step < n_steps) & (row < n_rows):
        base = src + layer * src_layer + row * src_row + step * src_step
        out = dst + layer * dst_layer + slot.to(tl.int64) * dst_slot
        end = tl.minimum(start + chunk, elems)
        for e0 in range(start, end, BLOCK):
            e = e0 + tl.arange(0, BLOCK)
            mask = e < end
            data = tl.load(base + (e // width) * src_dim + (e % width) * src_win, mask=mask)
            tl.store(out + e, data, mask=mask)


def runtime_args(dst, src, programs_per_row: int) -> tuple:
    """The fold's conv arguments (conv_elems .. conv_slots) for one conv pair; raises
    NotCovered for a layout it does not copy the way SGLang's scatter does."""
    if dst.ndim != 4 or src.ndim != 5 or dst.shape[0] != src.shape[0] or tuple(dst.shape[2:]) != tuple(src.shape[3:]):
        raise NotCovered(f"conv state {tuple(dst.shape)} and window {tuple(src.shape)} do not pair up")
    if dst.dtype != src.dtype or str(dst.dtype) not in DTYPES:
        raise NotCovered(f"conv dtypes {dst.dtype}/{src.dtype} (need one of {sorted(DTYPES)}, equal)")
    dim, width = dst.shape[2], dst.shape[3]
    if (width != 1 and dst.stride(3) != 1) or (dim != 1 and dst.stride(2) != width):
        raise NotCovered(f"conv state strides {dst.stride()} are not contiguous per slot")
    elems = dim * width
    ints = (
        elems,
        width,
        triton.cdiv(elems, programs_per_row),
        *src.stride(),
        dst.stride(0),
        dst.stride(1),
        src.shape[1],
        src.shape[2],
        dst.shape[1],
    )
    if any(value >= 2**31 for value in ints) or src.shape[1] * src.stride(1) >= 2**31:
        raise NotCovered("conv tensors too large for 32-bit row offsets")
    return ints


def no_conv(state) -> tuple:
    """(src, dst, ints) that copy nothing: for folds without a conv state (tests, benchmarks)."""
    return state, state, (1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
