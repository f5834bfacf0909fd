"""SGLang 0.5.20+'s GDN circular ReplaySSM ring driven as a GPU server drives it, on the CPU (harness only).

From 0.5.20 on, a GDN pool under `--enable-linear-replayssm-spec` keeps a frozen checkpoint (`temporal`)
plus a per-request circular ring of the last L committed steps (update vector d, normalized k, gate g;
bf16 low parts in rawv/rawk when the ring dtype is not fp32) and three request-keyed cursors
(`replayssm_spec_write_pos`, `replayssm_cache_base`, `replayssm_is_flush`). This module holds:

- `ring_verify`: TARGET_VERIFY as `GDNAttnBackend._replayssm_target_verify` calls it: the conv update
  over the dense window, then `gdn_replayssm_spec_decode(..., launch_mode="verify")`, which reconstructs
  the outputs and appends the window to the ring at the request's cursors (it never touches `temporal`);
- `ring_tensors` / `snapshot` / `restore`: every tensor a commit may write (state, conv, ring, cursors);
- `recurrence_state`: the verify recurrence (`fused_sigmoid_gating_delta_rule_update` with state
  write-back) run over each row's accepted prefix of the verify's own conv outputs, the reference the
  ring's state is measured against;
- `materialized_state`: the state the ring stands for, computed on copies by SGLang's own compact commit
  kernel with every active row marked for a flush (the pool is not changed), so the distance from the
  token-by-token recurrence can be measured after steps that did not flush.
"""

import torch

from harness.gdn_kernels import gdn_kernel_module
from harness.gdn_pool import TinyGDN
from harness.recurrence import VerifyWindow, _gated_delta_update, _split_qkv, verify_conv

CURSORS = ("replayssm_spec_write_pos", "replayssm_cache_base", "replayssm_is_flush")
RING_FIELDS = ("temporal", "replayssm_d", "replayssm_k", "replayssm_g", "replayssm_rawv", "replayssm_rawk")


def is_ring_pool(pool) -> bool:
    """The pool's own attributes say "GDN circular ring" (what SGLang's MTP commit keys on)."""
    mamba_pool = pool.mamba_pool
    return getattr(mamba_pool, "replayssm_cache_base", None) is not None and not mamba_pool.replayssm_is_kda


def ring_tensors(pool) -> dict:
    """name -> tensor, for every pool tensor a post-verify commit may write (None fields left out)."""
    spec = pool.get_speculative_mamba2_params_all_layers()
    tensors = {name: getattr(spec, name) for name in RING_FIELDS if getattr(spec, name) is not None}
    tensors["conv"] = spec.conv[0]
    tensors.update({name: getattr(pool.mamba_pool, name) for name in CURSORS})
    return tensors


def snapshot(pool) -> dict:
    return {name: tensor.clone() for name, tensor in ring_tensors(pool).items()}


def restore(pool, saved: dict) -> None:
    for name, tensor in ring_tensors(pool).items():
        tensor.copy_(saved[name])


def ring_verify(
    model: TinyGDN,
    pool,
    weights: list,
    window: VerifyWindow,
    slots: torch.Tensor,
    rows: torch.Tensor,
    outputs: list | None = None,
) -> list:
    """TARGET_VERIFY on every layer for requests in req-pool rows `rows` with mamba slots `slots`;
    returns each layer's conv output [bs*N, conv_dim] (the recurrence's q, k, v inputs). `outputs`, if
    given, gets each layer's verify output [bs*N, HV, V] (what the model reads)."""
    decode = gdn_kernel_module("gdn_replayssm_spec_decode")
    mamba_pool = pool.mamba_pool
    bs, draft_tokens = window.mixed_qkv.shape[1:3]
    tokens = bs * draft_tokens
    query_start_loc = torch.arange(0, tokens + 1, draft_tokens, dtype=torch.int32)
    conv_outs = []
    for layer, w in enumerate(weights):
        cache = pool.mamba2_layer_cache(layer)
        conv_outs.append(verify_conv(model, cache, w, window.mixed_qkv[layer], slots))
        q, k, v = _split_qkv(model, conv_outs[-1])
        out = torch.empty(tokens, model.num_v_heads, model.head_v_dim)
        decode.gdn_replayssm_spec_decode(
            q=q[0],
            k=k[0],
            v=v[0],
            a=window.a[layer].reshape(tokens, model.num_v_heads),
            b=window.b[layer].reshape(tokens, model.num_v_heads),
            A_log=w.A_log,
            dt_bias=w.dt_bias,
            checkpoint_state=cache.temporal,
            d_cache=cache.replayssm_d,
            k_cache=cache.replayssm_k,
            g_cache=cache.replayssm_g,
            rawv_cache=cache.replayssm_rawv,
            rawk_cache=cache.replayssm_rawk,
            beta_cache=cache.replayssm_beta,
            out=out,
            query_start_loc=query_start_loc,
            ssm_state_indices=slots,
            replay_indices=rows,
            write_pos=mamba_pool.replayssm_spec_write_pos,
            cache_base=mamba_pool.replayssm_cache_base,
            is_flush=mamba_pool.replayssm_is_flush,
            max_cache_len=cache.replayssm_d.shape[-2],
            max_spec_len=draft_tokens,
            scale=model.head_k_dim**-0.5,
            use_qk_l2norm_in_kernel=True,
            null_block_id=-1,
            launch_mode="verify",
        )
        if outputs is not None:
            outputs.append(out)
    return conv_outs


def materialized_state(pool, slots: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """`temporal` [layers, slots+1, HV, V, K] as it would be if every active row flushed now: SGLang's
    `commit_gdn_replayssm_circular` on copies of the state and cursors, `is_flush` set for every row."""
    decode = gdn_kernel_module("gdn_replayssm_spec_decode")
    spec = pool.get_speculative_mamba2_params_all_layers()
    mamba_pool = pool.mamba_pool
    temporal = spec.temporal.clone()
    is_flush = mamba_pool.replayssm_is_flush.clone()
    is_flush[rows.to(torch.int64)] = 1
    decode.commit_gdn_replayssm_circular(
        checkpoint_state=temporal,
        d_cache=spec.replayssm_d,
        k_cache=spec.replayssm_k,
        g_cache=spec.replayssm_g,
        d_residual_cache=spec.replayssm_rawv,
        k_residual_cache=spec.replayssm_rawk,
        state_batch_indices=slots,
        replay_indices=rows,
        write_pos=mamba_pool.replayssm_spec_write_pos.clone(),
        cache_base=mamba_pool.replayssm_cache_base.clone(),
        is_flush=is_flush,
        accept_lens=torch.zeros(len(rows), dtype=torch.int32),
        null_block_id=-1,
    )
    return temporal


def recurrence_state(
    model: TinyGDN,
    temporal: torch.Tensor,
    weights: list,
    conv_outs: list,
    window: VerifyWindow,
    slots: torch.Tensor,
    commit_lens: torch.Tensor,
    track_steps: torch.Tensor | None = None,
):
    """Advance `temporal` [layers, slots+1, HV, V, K] (in place) by each row's accepted prefix, as the
    recurrence runs token by token (one varlen launch per layer and segment; the kernel carries the
    fp32 state from token to token exactly as repeated decode calls would). Rows with slot -1 are
    skipped. Returns row -> state [layers, HV, V, K] after its track step, for rows with one."""
    bs, draft_tokens = window.mixed_qkv.shape[1:3]
    lens = commit_lens.tolist()
    tracks = track_steps.tolist() if track_steps is not None else [-1] * bs
    first = [t + 1 if t >= 0 else n for n, t in zip(lens, tracks)]
    segments = [[(0, f) for f in first], [(f, n) for f, n in zip(first, lens)]]
    snapshots = {}
    for number, segment in enumerate(segments):
        active = [i for i, (lo, hi) in enumerate(segment) if hi > lo and slots[i] >= 0]
        if active:
            tokens = torch.cat(
                [torch.arange(i * draft_tokens + segment[i][0], i * draft_tokens + segment[i][1]) for i in active]
            )
            counts = torch.tensor([segment[i][1] - segment[i][0] for i in active])
            cu_seqlens = torch.cat([torch.zeros(1, dtype=torch.int64), counts.cumsum(0)]).to(torch.int32)
            for layer, w in enumerate(weights):
                _gated_delta_update(
                    model,
                    w,
                    conv_outs[layer][tokens].contiguous(),
                    window.a[layer].reshape(-1, model.num_v_heads)[tokens].contiguous(),
                    window.b[layer].reshape(-1, model.num_v_heads)[tokens].contiguous(),
                    state=temporal[layer],
                    state_indices=slots[active].contiguous(),
                    cu_seqlens=cu_seqlens,
                )
        if number == 0:
            snapshots = {i: temporal[:, int(slots[i])].clone() for i in range(bs) if tracks[i] >= 0 and slots[i] >= 0}
    return snapshots
