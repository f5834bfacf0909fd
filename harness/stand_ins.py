"""Test doubles for the GPU-server objects around SGLang's commit methods (harness only, never shipped).

A DFLASH/DSPARK worker, its target model runner, the hybrid attention backend and the schedule batch
cannot be built without a GPU server. The commit methods only read a few attributes of them, so these
stand-ins carry exactly those attributes around the REAL objects: the real `HybridReqToTokenPool`, the
real `HybridLinearAttnBackend.update_mamba_state_after_mtp_verify` and
`MambaAttnBackendBase._translate_mamba_indices` bound to the stand-in backends.
"""

from types import MethodType, SimpleNamespace


def hybrid_backend(pool, mamba_cache_indices):
    """A `HybridLinearAttnBackend` stand-in whose verify metadata holds `mamba_cache_indices`."""
    from sglang.srt.layers.attention.hybrid_linear_attn_backend import (
        HybridLinearAttnBackend,
        MambaAttnBackendBase,
    )

    linear = SimpleNamespace(
        forward_metadata=SimpleNamespace(mamba_cache_indices=mamba_cache_indices),
        req_to_token_pool=pool,
        accept_lens_pool=None,
    )
    linear._translate_mamba_indices = MethodType(MambaAttnBackendBase._translate_mamba_indices, linear)
    hybrid = SimpleNamespace(linear_attn_backend=linear)
    hybrid.update_mamba_state_after_mtp_verify = MethodType(
        HybridLinearAttnBackend.update_mamba_state_after_mtp_verify, hybrid
    )
    return hybrid


def spec_worker(pool, attn_backend, draft_tokens=None):
    """A DFLASH/DSPARK v2 worker stand-in: the attributes their commit methods read, and those SGLang's
    MTP commit reads from the target worker (a Qwen3-Next model config, so `mambaish_config` finds the
    GDN layers). `draft_tokens` is the verify window N: DFLASH's `block_size`, DSPARK's
    `verify_num_draft_tokens`."""
    from sglang.srt.configs.qwen3_next import Qwen3NextConfig

    model_runner = SimpleNamespace(
        attn_backend=attn_backend,
        req_to_token_pool=pool,
        model=None,
        model_config=SimpleNamespace(hf_config=Qwen3NextConfig()),
    )
    return SimpleNamespace(
        _need_mamba_verify_commit=True,
        target_worker=SimpleNamespace(model_runner=model_runner),
        block_size=draft_tokens,
        verify_num_draft_tokens=draft_tokens,
    )


def schedule_batch(req_pool_indices, seq_lens, mamba_track_indices=None, page_size=1):
    """A `ScheduleBatch` stand-in at commit time: `seq_lens` is still the pre-verify length (v2 workers),
    the forward mode is the verify's (not idle)."""
    return SimpleNamespace(
        req_pool_indices=req_pool_indices,
        seq_lens=seq_lens,
        seq_lens_cpu=seq_lens,
        mamba_track_indices=mamba_track_indices,
        tree_cache=SimpleNamespace(page_size=page_size),
        forward_mode=SimpleNamespace(is_idle=lambda: False),
    )


def recording_backend():
    """An attention-backend stand-in that only records what a commit method asks it to do (no pool, so
    the overlay's hooks decline it and SGLang's own method body runs)."""
    calls = []
    return SimpleNamespace(update_mamba_state_after_mtp_verify=lambda **kwargs: calls.append(kwargs), calls=calls)
