"""The post-verify commit of DFLASH and DSPARK for GDN pools in ReplaySSM spec-verify mode.

SGLang 0.5.19's DFLASH and DSPARK commits hand every pool to
`HybridLinearAttnBackend.update_mamba_state_after_mtp_verify`, which knows only the KDA fold and
otherwise scatters per-step intermediate states; a GDN ReplaySSM pool has none (`intermediate_ssm` is
None) and the scatter crashes. The patched methods call `dflash_commit` / `dspark_commit` first: when
the pool's own attributes say "GDN, ReplaySSM raw-window fold", this module folds the accepted prefix
(commit lengths include the bonus token) into the persistent state through
`replayssm_overlay.fold.fold_accepted_prefix` and returns True; for anything else (KDA, ReplaySSM off,
no mamba pool, an unknown pool) it returns False and SGLang's own code runs untouched.

From 0.5.20 on, a GDN ReplaySSM pool is a circular ring instead (`replayssm_cache_base` allocated,
`replayssm_is_kda` False): the commit is then the installed release's own MTP commit
(`hooks/ring_commit.py`). Which protocol is live is read from the pool, never from a version string.

DFLASH's post-verify lengths are `pre + commit_lens`: 0.5.19's DFLASH compares the pre-verify length
with `batch.seq_lens`, which is still the pre-verify length at that point, so it never commits the
extra-buffer track step. DSPARK passes correct post-verify lengths and they are used as given.

torch and SGLang are imported lazily: this module is loaded from SGLang's commit path.
"""

from dataclasses import dataclass


@dataclass
class _FoldTarget:
    """What the fold needs from a worker whose pool is a GDN ReplaySSM fold pool."""

    linear_backend: object  # the GDN backend inside HybridLinearAttnBackend
    spec_state: object  # MambaPool.SpeculativeState, all layers


def _ring_pool(worker) -> bool:
    """Whether `worker`'s target pool says "GDN circular ReplaySSM ring" (0.5.20 on): the cursors are
    allocated and the pool says explicitly that it is not KDA, exactly what SGLang's MTP commit keys on."""
    if not getattr(worker, "_need_mamba_verify_commit", False):
        return False
    req_pool = getattr(worker.target_worker.model_runner, "req_to_token_pool", None)
    mamba_pool = getattr(req_pool, "mamba_pool", None)
    return (
        getattr(mamba_pool, "replayssm_cache_base", None) is not None
        and getattr(mamba_pool, "replayssm_is_kda", None) is False
    )


def _fold_target(worker):
    """The GDN fold target of `worker`'s target model, or None when the live protocol is not ours."""
    if not getattr(worker, "_need_mamba_verify_commit", False):
        return None
    attn_backend = worker.target_worker.model_runner.attn_backend
    linear_backend = getattr(attn_backend, "linear_attn_backend", None)
    req_pool = getattr(linear_backend, "req_to_token_pool", None)
    mamba_pool = getattr(req_pool, "mamba_pool", None)
    if mamba_pool is None:
        return None
    if not getattr(mamba_pool, "replayssm_spec_fold", False):
        return None
    if getattr(mamba_pool, "replayssm_is_kda", True):  # KDA, or a pool that does not say: SGLang's code
        return None
    all_layers = req_pool.get_speculative_mamba2_params_all_layers()
    if getattr(all_layers, "replayssm_rawv", None) is None:
        return None
    return _FoldTarget(linear_backend=linear_backend, spec_state=all_layers)


def steps_to_track(seq_lens_pre, seq_lens_post, commit_lens, track_interval: int):
    """Per request, the verify step whose state must be stored in its extra-buffer track slot, or -1.

    A commit that moves a request from `pre` to `post` tokens crosses at most one multiple of
    `track_interval` (the interval is at least the window length); the state to keep is the one after
    the token that lands exactly on that multiple, i.e. step `boundary - pre - 1` of the window, and it
    exists only if that step was accepted.
    """
    import torch

    boundary = seq_lens_post // track_interval * track_interval
    crosses = seq_lens_pre // track_interval != seq_lens_post // track_interval
    step = torch.clamp(boundary - seq_lens_pre - 1, min=0)
    kept = crosses & (step < commit_lens.to(step.dtype))
    return torch.where(kept, step, torch.full_like(step, -1))  # the lengths' dtype: the CUDA kernel reads int64 too


def _commit(target: _FoldTarget, batch, seq_lens_pre, seq_lens_post, commit_lens) -> None:
    """Fold each request's accepted prefix (bonus included) into its slot, and its track step if any. The
    last accepted step (commit_lens - 1) is not computed here: the overlay's kernel reads it off the
    accept lengths, and SGLang's commit, where it runs, gets it from `fold_accepted_prefix`."""
    from replayssm_overlay.fold import fold_accepted_prefix

    request_count = commit_lens.shape[0]
    if request_count == 0:
        return
    mamba_track_indices = None
    mamba_steps_to_track = None
    if batch.mamba_track_indices is not None:
        from sglang.srt.runtime_context import mamba_track_grid

        mamba_steps_to_track = steps_to_track(
            seq_lens_pre, seq_lens_post, commit_lens, mamba_track_grid(batch.tree_cache.page_size)
        )
        mamba_track_indices = target.linear_backend._translate_mamba_indices(batch.mamba_track_indices)
    fold_accepted_prefix(
        spec_state=target.spec_state,
        state_batch_indices=target.linear_backend.forward_metadata.mamba_cache_indices[:request_count],
        accept_lens=commit_lens,
        mamba_track_indices=mamba_track_indices,
        mamba_steps_to_track=mamba_steps_to_track,
        null_block_id=-1,
    )


def dflash_commit(worker, batch, seq_lens_pre_verify, commit_lens, seq_lens_post_verify=None) -> bool:
    """`seq_lens_post_verify` (0.5.20 on) is `pre + commit_lens` by construction in DFLASH; the ring commit
    derives it the same way (SGLang's MTP commit does), the fold computes it (0.5.19 passes none)."""
    if _ring_pool(worker):
        from replayssm_overlay.hooks.ring_commit import commit_ring

        commit_ring(worker, batch, seq_lens_pre_verify, commit_lens, worker.block_size)
        return True
    target = _fold_target(worker)
    if target is None:
        return False
    _commit(target, batch, seq_lens_pre_verify, seq_lens_pre_verify + commit_lens, commit_lens)
    return True


def dspark_commit(worker, batch, seq_lens_pre_verify, seq_lens_post_verify, commit_lens) -> bool:
    ring = _ring_pool(worker)
    target = None if ring else _fold_target(worker)
    if not ring and target is None:
        return False
    from sglang.srt.runtime_context import get_spec

    topk = get_spec().speculative_eagle_topk
    assert topk in (None, 1), f"DSPARK commits a linear draft chain only (speculative_eagle_topk={topk})"
    if ring:
        from replayssm_overlay.hooks.ring_commit import commit_ring

        commit_ring(worker, batch, seq_lens_pre_verify, commit_lens, worker.verify_num_draft_tokens)
    else:
        _commit(target, batch, seq_lens_pre_verify, seq_lens_post_verify, commit_lens)
    return True
