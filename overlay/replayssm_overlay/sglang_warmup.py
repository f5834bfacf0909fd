"""SGLang's own commit compiled on the pool that serves, before the first request, so that no request pays
Triton's compile.

Why: where the overlay's CUDA kernel is not used (no prebuilt folder, a folder or a driver that refuses it,
a failed self-check, a non-fp32 state, `RSO_FOLD=sglang`), 0.5.19's commit is SGLang's
`commit_gdn_replayssm_fold_after_verify` (`fold.sglang_commit`): its fold kernel and its conv-window
scatter, two Triton kernels that Triton compiles on their first call, the fold in 1.3 to 1.9 s on the
H200 with an empty cache (notes/perf.md) -- otherwise on the first commit of the first request. Where the
CUDA kernel commits, a call it does not take (`fold.fold_accepted_prefix`'s per-call fallback) runs the
same SGLang commit. Triton keys SGLang's fold on constexprs that include every stride of the pool, and the
pool's slot count is known only once the pool is built: a PD-decode pool (`--disaggregation-mode decode`)
has max(mamba size, (requests + pre-allocated) * slots per request) slots, not `max_mamba_cache_size + 1`,
so a stand-in sized from the configuration compiles the wrong specialization there.

What runs: `warm_before_serving()`, called by the configurator hook after the self-check, while the pool
builder that asked the hook is about to build its pool, arranges that the next `MambaPool` this process
constructs (that builder's, right after the hook returns) runs `fold.sglang_commit` on its own tensors
once constructed, without and with a track slot, with the server's index dtypes (int32 slots and accept
lengths, int64 track vectors) and every row padded (slot -1, nothing accepted, step -1): the kernels
compile and return before they write. The arrangement is one wrapper of `MambaPool.__init__`, removed
before the pool it warms is constructed (a pool whose construction fails leaves nothing behind).
Not warmed, and said in the log: releases whose pools are rings (0.5.20 on: their commit is the release's
MTP commit, whatever fold the overlay chose) and the overlay's Triton twin (`RSO_FOLD=triton`: its
self-check compiled it). A warm-up that fails is logged and leaves the first commit to compile, as in stock
SGLang; it never stops the server.

The outcome (`outcome`: compiled, error, not-needed, pending until the pool is built; `detail`; for a
compiled one the pool's shapes, `seconds` and the Triton compiles and cache hits counted through Triton's
compilation listener, None where this Triton has none) is logged, kept on this process's self-check record
(`warmup`: `replayssm-overlay status --json`) and exported by `replayssm-overlay metrics`.
"""

from __future__ import annotations

import contextlib
import logging
import time

logger = logging.getLogger("replayssm_overlay.sglang_warmup")
PADDED_ROWS = 2  # rows of the padded batch the warm-up commits
_MARK = "_replayssm_overlay_warmup"  # on the wrapper of MambaPool.__init__ while one is pending


def warm_before_serving() -> dict | None:
    """Arrange the warm-up of SGLang's commit on the pool about to be built, where that commit can run here;
    returns the outcome so far (None where the overlay's Triton twin commits), logged and recorded."""
    from replayssm_overlay import fold

    if not _has_raw_window_fold():  # before the fold is chosen: none is, where none commits
        return _recorded("not-needed", "this SGLang's GDN pools are rings, committed by the release's MTP commit")
    kind = fold.chosen()[0]
    if kind == "overlay-triton":
        return None
    role = (
        "SGLang's fold commits"
        if kind == "sglang"
        else "the overlay's CUDA kernel commits; a call it does not take runs SGLang's fold"
    )
    try:
        _after_next_pool(lambda pool: _warm(pool, role))
    except Exception as err:  # a MambaPool of another shape: the first commit compiles, as in stock
        return _recorded("error", f"the pool could not be watched for ({type(err).__name__}: {err})")
    return _recorded("pending", f"when the pool is built ({role})")


def _has_raw_window_fold() -> bool:
    """Whether the installed SGLang builds raw-window fold pools (0.5.19), whose commit `fold.sglang_commit`
    calls, not circular rings (0.5.20 on, which keep the former commit beside the ring's): read from its
    files (`replayssm_overlay.protocol`), without importing them."""
    from replayssm_overlay import protocol

    return protocol.installed() == protocol.FOLD


def _after_next_pool(callback) -> None:
    """`callback(mamba_pool)` once the next `MambaPool` of this process is constructed (a pending one is
    replaced)."""
    from sglang.srt.mem_cache.memory_pool import MambaPool

    original = MambaPool.__init__
    original = getattr(original, _MARK, original)

    def constructed(self, *args, **kwargs):
        MambaPool.__init__ = original
        original(self, *args, **kwargs)
        callback(self)

    setattr(constructed, _MARK, original)
    MambaPool.__init__ = constructed


def _warm(mamba_pool, role: str) -> dict:
    """SGLang's commit on `mamba_pool`'s own tensors, every row padded; never raises."""
    from replayssm_overlay import fold
    from replayssm_overlay.kernels.commit_plan import describe_pool

    started = time.monotonic()
    try:
        spec_state = mamba_pool.get_speculative_mamba2_params_all_layers()
        pool = {
            **describe_pool(spec_state),
            "conv": [list(t.shape[2:]) for t in spec_state.conv],
            "conv_window_rows": [int(t.shape[1]) for t in spec_state.intermediate_conv_window],
        }
        with _counted_compiles() as counts:
            for track in (False, True):
                fold.sglang_commit(**_padded_commit(spec_state, track))
            _synchronize(spec_state.temporal)
    except Exception as err:
        return _recorded("error", f"{type(err).__name__}: {err}")
    seconds = round(time.monotonic() - started, 3)
    return _recorded(
        "compiled", f"in {seconds:.2f} s on the pool that serves ({role})", pool=pool, seconds=seconds, **counts
    )


@contextlib.contextmanager
def _counted_compiles():
    """{"compiles": n, "cache_hits": n} of Triton's compiler while the block runs (None each where this
    Triton has no compilation listener)."""
    counts = {"compiles": None, "cache_hits": None}
    try:
        from triton import knobs

        previous = knobs.compilation.listener
    except (ImportError, AttributeError):
        yield counts
        return
    counts.update(compiles=0, cache_hits=0)

    def listener(*args, **kwargs):
        counts["cache_hits" if kwargs.get("cache_hit") else "compiles"] += 1
        if previous is not None:
            previous(*args, **kwargs)

    knobs.compilation.listener = listener
    try:
        yield counts
    finally:
        knobs.compilation.listener = previous


def _synchronize(tensor) -> None:
    import torch

    if tensor.is_cuda:
        torch.cuda.synchronize(tensor.device)


def _padded_commit(spec_state, track: bool) -> dict:
    """`fold.sglang_commit`'s arguments: the pool's own state and a batch of padded rows."""
    import torch

    device = spec_state.temporal.device
    padded = dict(dtype=torch.int32, device=device)
    wide = dict(dtype=torch.int64, device=device)
    return dict(
        spec_state=spec_state,
        state_batch_indices=torch.full((PADDED_ROWS,), -1, **padded),
        accept_lens=torch.zeros(PADDED_ROWS, **padded),
        last_correct_step_indices=None,
        mamba_track_indices=torch.full((PADDED_ROWS,), -1, **wide) if track else None,
        mamba_steps_to_track=torch.full((PADDED_ROWS,), -1, **wide) if track else None,
        null_block_id=-1,
    )


def _recorded(outcome: str, detail: str, **facts) -> dict:
    """The outcome, logged and put on this process's self-check record."""
    from replayssm_overlay import selfcheck

    if outcome == "compiled":
        logger.info("replayssm-overlay: SGLang's fold compiled before serving %s", detail)
    elif outcome == "error":
        logger.warning(
            "replayssm-overlay: SGLang's fold could not be compiled before serving (%s); the first commit compiles it",
            detail,
        )
    elif outcome == "pending":
        logger.info("replayssm-overlay: SGLang's fold will be compiled %s", detail)
    else:
        logger.info("replayssm-overlay: SGLang's fold not compiled before serving: %s", detail)
    result = {"outcome": outcome, "detail": detail, **facts}
    selfcheck.note_warmup(result)
    return result
