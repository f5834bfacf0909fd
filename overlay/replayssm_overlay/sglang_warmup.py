"""SGLang's own commit compiled before the server serves, where it is the node's fold, so that no request
pays Triton's compile.

Why: where the overlay's CUDA kernel is not used (no prebuilt folder, a folder or a driver that refuses it,
a failed self-check, a non-fp32 state, `RSO_FOLD=sglang`), 0.5.19's commit is SGLang's
`commit_gdn_replayssm_fold_after_verify` (`fold.sglang_commit`): its fold kernel and its conv-window
scatter, two Triton kernels that Triton compiles on their first call, the fold in 1.3 to 1.9 s on the
H200 with an empty cache (notes/perf.md) -- otherwise on the first commit of the first request.

What runs: `warm_before_serving(configurator)`, called by the configurator hook after the self-check, when
this process's fold is SGLang's, runs `fold.sglang_commit` once without and once with a track slot, with
the server's index dtypes (int32 slots and accept lengths, int64 track vectors) and every row padded (slot
-1, nothing accepted, step -1): the kernels compile, return before they write, and the pool is untouched
(it does not exist yet). Triton keys SGLang's fold on constexprs that include every stride of the pool, so
the stand-in's tensors are views with the strides of the pool the configurator is about to build (one
layer; its slot count `max_mamba_cache_size + 1`, its heads, dims, window and dtypes, as `MambaPool`
allocates them) over two slots of memory. The conv scatter takes the pool's slot and request-row counts as
plain integers, for which the stand-in's two stand (the request rows, `max_running_requests + 1`, are not
even known before the pool is built); where Triton specializes one of them otherwise than the stand-in's,
that one small kernel compiles at the first commit.

Not warmed, and said in the log: releases whose pools are rings (0.5.20 on: their commit is the release's
MTP commit, whatever fold the overlay chose), a page-major pool (`--enable-page-major-kv-layout`: other strides),
a configurator that publishes no mamba cache size or window. A warm-up that fails is logged and leaves the
first commit to compile, as in stock SGLang; it never stops the server.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass

logger = logging.getLogger("replayssm_overlay.sglang_warmup")
STANDIN_SLOTS = 2  # slots of memory behind each view, and rows of the padded batch
_warmed = {}  # PoolLayout -> outcome: once per process and layout


@dataclass(frozen=True)
class PoolLayout:
    """What SGLang's fold and conv scatter are specialized on: the per-rank shapes and dtypes of one layer
    of the GDN ReplaySSM pool, and its slot count (the layer strides)."""

    slots: int  # max_mamba_cache_size + 1
    num_v_heads: int  # HV
    num_k_heads: int  # H
    head_v_dim: int  # V
    head_k_dim: int  # K
    window: int  # verify window N (the raw rings' record length)
    state_dtype: str
    ring_dtype: str  # raw k/v rings and conv states
    conv_shapes: tuple  # ((dim, width), ...) per conv state
    conv_window_dedup: bool  # SGLang's overlapping conv-window view (CUDA, linear draft chain)

    @classmethod
    def of_configurator(cls, configurator) -> "PoolLayout | str":
        """The layout `_build_hybrid_req_pool` will give the pool, or why it cannot be known here."""
        from sglang.srt.mem_cache.memory_pool import conv_window_dedup_enabled
        from sglang.srt.runtime_context import get_memory, get_schedule, get_spec, max_speculative_num_draft_tokens
        from sglang.srt.utils import is_cpu, is_npu

        if getattr(get_memory(), "enable_page_major_kv_layout", False):
            return "the pool has the page-major layout (--enable-page-major-kv-layout), whose strides differ"
        size, window = get_schedule().max_mamba_cache_size, max_speculative_num_draft_tokens()
        if size is None or window is None:
            return f"no mamba cache size or verify window is published (size {size}, window {window})"
        params = configurator.mambaish_config.mamba2_cache_params
        hv, v, k = params.shape.temporal
        dedup = not params.shape.disable_conv_window_dedup and conv_window_dedup_enabled(  # as MambaPool decides
            is_npu(), is_cpu(), get_spec().speculative_eagle_topk, params.is_kda)
        return cls(slots=int(size) + 1, num_v_heads=hv, num_k_heads=params.shape.num_k_heads_per_tp, head_v_dim=v,
                   head_k_dim=k, window=int(window), state_dtype=_name(params.dtype.temporal),
                   ring_dtype=_name(params.dtype.conv), conv_shapes=tuple(tuple(s) for s in params.shape.conv),
                   conv_window_dedup=dedup)


def _name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def warm_before_serving(configurator) -> dict | None:
    """Compile SGLang's commit for the pool the configurator is about to build, if it is this process's fold
    (once per layout); returns the outcome (None where the fold is the overlay's), logged either way."""
    from replayssm_overlay import fold

    if not _has_raw_window_fold():  # before the fold is chosen: none is, where none commits
        return _said("not-needed", "this SGLang's GDN pools are rings, committed by the release's MTP commit")
    if fold.chosen()[0] != "sglang":
        return None
    try:
        layout = PoolLayout.of_configurator(configurator)
    except Exception as err:  # a configurator of another shape: the first commit compiles, as in stock
        return _said("error", f"the pool's layout could not be read ({type(err).__name__}: {err})")
    if isinstance(layout, str):
        return _said("skipped", layout)
    if layout not in _warmed:
        started = time.monotonic()
        try:
            for track in (False, True):
                fold.sglang_commit(**_padded_commit(layout, track))
            _warmed[layout] = _said("compiled", f"in {time.monotonic() - started:.2f} s, for {layout}")
        except Exception as err:
            _warmed[layout] = _said("error", f"{type(err).__name__}: {err}")
    return _warmed[layout]


def _has_raw_window_fold() -> bool:
    """Whether the installed SGLang builds raw-window fold pools (0.5.19), whose commit `fold.sglang_commit`
    calls, not circular rings (0.5.20 on, which keep the former commit beside the ring's): read from its
    files (`replayssm_overlay.protocol`), without importing them."""
    from replayssm_overlay import protocol

    return protocol.installed() == protocol.FOLD


def _said(outcome: str, detail: str) -> dict:
    if outcome == "compiled":
        logger.info("replayssm-overlay: SGLang's fold compiled before serving %s", detail)
    elif outcome == "error":
        logger.warning("replayssm-overlay: SGLang's fold could not be compiled before serving (%s); the first "
                       "commit compiles it", detail)
    else:
        logger.info("replayssm-overlay: SGLang's fold not compiled before serving: %s", detail)
    return {"outcome": outcome, "detail": detail}


def _padded_commit(layout: PoolLayout, track: bool) -> dict:
    """`fold.sglang_commit`'s arguments: the stand-in pool and a batch of padded rows."""
    import types

    import torch

    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    state, ring = getattr(torch, layout.state_dtype), getattr(torch, layout.ring_dtype)
    HV, H, V, K, N = (layout.num_v_heads, layout.num_k_heads, layout.head_v_dim, layout.head_k_dim, layout.window)

    def view(*per_slot, dtype):
        return _slot_view(per_slot, layout.slots, dtype, device)

    spec_state = types.SimpleNamespace(
        temporal=view(HV, V, K, dtype=state), replayssm_rawv=view(HV, N, V, dtype=ring),
        replayssm_rawk=view(H, N, K, dtype=ring), replayssm_g=view(HV, N, dtype=torch.float32),
        replayssm_beta=view(HV, N, dtype=torch.float32),
        conv=[view(*shape, dtype=ring) for shape in layout.conv_shapes],
        intermediate_conv_window=[_conv_windows(shape, N, layout.conv_window_dedup, ring, device)
                                  for shape in layout.conv_shapes])
    padded = dict(dtype=torch.int32, device=device)
    wide = dict(dtype=torch.int64, device=device)
    return dict(spec_state=spec_state, state_batch_indices=torch.full((STANDIN_SLOTS,), -1, **padded),
                accept_lens=torch.zeros(STANDIN_SLOTS, **padded), last_correct_step_indices=None,
                mamba_track_indices=torch.full((STANDIN_SLOTS,), -1, **wide) if track else None,
                mamba_steps_to_track=torch.full((STANDIN_SLOTS,), -1, **wide) if track else None, null_block_id=-1)


def _slot_view(per_slot: tuple, slots: int, dtype, device):
    """[1, STANDIN_SLOTS, *per_slot], contiguous per slot, with the layer stride of a pool of `slots` slots."""
    import torch

    inner = math.prod(per_slot)
    strides = tuple(math.prod(per_slot[i + 1:]) for i in range(len(per_slot)))
    memory = torch.zeros(STANDIN_SLOTS * inner, dtype=dtype, device=device)
    return memory.as_strided((1, STANDIN_SLOTS, *per_slot), (slots * inner, inner, *strides))


def _conv_windows(shape: tuple, window: int, dedup: bool, dtype, device):
    """The per-step conv windows [1, rows, N, dim, width] as SGLang lays them out: one overlapping view over a
    [dim, N + width - 1] buffer per row (dedup), else a dense tensor."""
    import torch

    dim, width = shape
    if not dedup:
        return torch.zeros(1, STANDIN_SLOTS, window, dim, width, dtype=dtype, device=device)
    span = window + width - 1
    shared = torch.zeros(1, STANDIN_SLOTS, dim, span, dtype=dtype, device=device)
    return shared.as_strided((1, STANDIN_SLOTS, window, dim, width),
                             (STANDIN_SLOTS * dim * span, dim * span, 1, span, 1))
