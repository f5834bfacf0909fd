"""SGLang's own GDN kernels driven the way a GPU server drives them: the verify that writes the ReplaySSM
ring, and the token-by-token decode that the committed state must equal bitwise.

`verify_ring_write` is what `GDNAttnBackend` does for TARGET_VERIFY with a ReplaySSM fold pool: the conv
update over the dense `[bs, N]` window (writing the conv intermediate windows), then
`fused_sigmoid_gating_delta_rule_update(..., disable_state_update=True, cache_ring=True)`, which leaves
`temporal` alone and stores the raw (k, v, g, beta) of every draft step in the pool's ring.
`decode_reference` replays the accepted prefix one token at a time with the decode calls
(`causal_conv1d_update` on one token, then the recurrent update with state write-back, as
`TritonGDNKernel.decode` calls it) on copies of the pre-verify state.
"""

from dataclasses import dataclass

import torch

from harness.gdn_pool import TinyGDN


@dataclass
class LayerWeights:
    conv_weight: torch.Tensor  # [conv_dim, conv_kernel]
    A_log: torch.Tensor  # [HV]
    dt_bias: torch.Tensor  # [HV]


@dataclass
class VerifyWindow:
    """One verify step's inputs for every layer: the pre-conv mixed qkv and the gate inputs."""

    mixed_qkv: torch.Tensor  # [layers, bs, N, conv_dim], conv dtype
    a: torch.Tensor  # [layers, bs, N, HV] fp32
    b: torch.Tensor  # [layers, bs, N, HV] fp32


def random_weights(model: TinyGDN, generator: torch.Generator) -> list:
    def randn(*shape, dtype=torch.float32):
        return torch.randn(*shape, generator=generator, dtype=torch.float32).to(dtype)

    return [
        LayerWeights(
            conv_weight=(randn(model.conv_dim, model.conv_kernel) * 0.5).to(model.conv_dtype),
            A_log=randn(model.num_v_heads) * 0.5,
            dt_bias=randn(model.num_v_heads) * 0.5,
        )
        for _ in range(model.layers)
    ]


def random_window(model: TinyGDN, bs: int, draft_tokens: int, generator: torch.Generator) -> VerifyWindow:
    def randn(*shape):
        return torch.randn(model.layers, bs, draft_tokens, *shape, generator=generator)

    return VerifyWindow(
        mixed_qkv=randn(model.conv_dim).to(model.conv_dtype),
        a=randn(model.num_v_heads),
        b=randn(model.num_v_heads),
    )


def randomize_slots(pool, slots: torch.Tensor, generator: torch.Generator) -> None:
    """Give the listed mamba slots random, distinct pre-verify conv and recurrent states."""
    spec = pool.get_speculative_mamba2_params_all_layers()
    index = slots.to(torch.int64)
    temporal = torch.randn(spec.temporal[:, index].shape, generator=generator) * 0.5
    spec.temporal[:, index] = temporal.to(spec.temporal.dtype)
    for conv in spec.conv:
        conv[:, index] = torch.randn(conv[:, index].shape, generator=generator).to(conv.dtype)


def place_batch(pool, slot_count: int, bs: int, padded_rows, tracked: bool, generator: torch.Generator):
    """A batch of bs rows placed at random in a pool of slot_count slots: (slots, track_slots), the rows'
    slots (padded rows -1) and, if tracked, their own track slots; every slot of the pool gets random states
    (those no row names are spares that must stay untouched)."""
    order = torch.randperm(slot_count, generator=generator).to(torch.int32)
    slots = order[:bs].clone()
    slots[list(padded_rows)] = -1
    track_slots = order[bs : 2 * bs].clone() if tracked else None
    randomize_slots(pool, order, generator)
    return slots, track_slots


def _split_qkv(model: TinyGDN, mixed: torch.Tensor):
    """[T, conv_dim] -> q, k [1, T, H, K] and v [1, T, HV, V], as the GDN layer splits its conv output."""
    tokens = mixed.shape[0]
    q, k, v = torch.split(mixed, [model.key_dim, model.key_dim, model.value_dim], dim=-1)
    return (
        q.reshape(1, tokens, model.num_k_heads, model.head_k_dim),
        k.reshape(1, tokens, model.num_k_heads, model.head_k_dim),
        v.reshape(1, tokens, model.num_v_heads, model.head_v_dim),
    )


def _gated_delta_update(model: TinyGDN, w: LayerWeights, conv_out, a, b, *, state, state_indices, cu_seqlens, **mode):
    """SGLang's fused gated delta-rule update on conv output `conv_out` [T, conv_dim], with the GDN
    layer's fixed settings (L2-normed q/k, softplus 1/20); `mode` selects verify (ring write) or decode."""
    from harness.gdn_kernels import gdn_kernel_module

    fused_sigmoid_gating_delta_rule_update = gdn_kernel_module(
        "fused_sigmoid_gating_recurrent"
    ).fused_sigmoid_gating_delta_rule_update
    q, k, v = _split_qkv(model, conv_out)
    fused_sigmoid_gating_delta_rule_update(
        A_log=w.A_log,
        dt_bias=w.dt_bias,
        q=q,
        k=k,
        v=v,
        a=a,
        b=b,
        initial_state_source=state,
        initial_state_indices=state_indices,
        cu_seqlens=cu_seqlens,
        use_qk_l2norm_in_kernel=True,
        softplus_beta=1.0,
        softplus_threshold=20.0,
        is_kda=False,
        **mode,
    )


def verify_conv(model: TinyGDN, cache, w: LayerWeights, mixed_qkv: torch.Tensor, slots: torch.Tensor):
    """The verify's conv update of one layer over the dense `[bs, N]` window `mixed_qkv` [bs, N, conv_dim]
    (writes the conv intermediate windows, indexed by row); returns the conv output [bs*N, conv_dim]."""
    from sglang.kernels.ops.mamba.causal_conv1d_triton import causal_conv1d_update

    bs = mixed_qkv.shape[0]
    conv_out = causal_conv1d_update(
        mixed_qkv.transpose(1, 2),  # [bs, conv_dim, N]
        cache.conv[0],
        w.conv_weight,
        None,
        "silu",
        conv_state_indices=slots,
        intermediate_conv_window=cache.intermediate_conv_window[0],
        intermediate_state_indices=torch.arange(bs, dtype=torch.int32),
    )
    return conv_out.transpose(1, 2).reshape(-1, model.conv_dim)


def verify_ring_write(model: TinyGDN, pool, weights: list, window: VerifyWindow, slots: torch.Tensor) -> None:
    """TARGET_VERIFY on every layer for the rows of `slots` (physical mamba slots, -1 = padded row)."""
    bs, draft_tokens = window.mixed_qkv.shape[1:3]
    tokens = bs * draft_tokens
    cu_seqlens = torch.arange(0, tokens + 1, draft_tokens, dtype=torch.int32)
    for layer, w in enumerate(weights):
        cache = pool.mamba2_layer_cache(layer)
        _gated_delta_update(
            model,
            w,
            verify_conv(model, cache, w, window.mixed_qkv[layer], slots),
            window.a[layer].reshape(tokens, model.num_v_heads),
            window.b[layer].reshape(tokens, model.num_v_heads),
            state=cache.temporal,
            state_indices=slots,
            cu_seqlens=cu_seqlens,
            disable_state_update=True,
            cache_ring=True,
            replayssm_rawv=cache.replayssm_rawv,
            replayssm_rawk=cache.replayssm_rawk,
            replayssm_g=cache.replayssm_g,
            replayssm_beta=cache.replayssm_beta,
        )


@dataclass
class DecodeReference:
    """Token-by-token decode over each row's accepted prefix, from the pre-verify state."""

    temporal: torch.Tensor  # [layers, slots+1, HV, V, K]: all slots, active ones advanced
    conv: torch.Tensor  # [layers, slots+1, conv_dim, kernel-1]
    # row -> (temporal [layers, HV, V, K], conv [layers, conv_dim, kernel-1]) after its track step
    tracked: dict


def decode_reference(
    model: TinyGDN,
    temporal: torch.Tensor,
    conv: torch.Tensor,
    weights: list,
    window: VerifyWindow,
    slots: torch.Tensor,
    commit_lens: torch.Tensor,
    track_steps: torch.Tensor | None = None,
) -> DecodeReference:
    """Decode `commit_lens[i]` tokens of row i (rows with slot -1 are padding and skipped), on copies of
    `temporal` and `conv` (the pool's pre-verify all-layers state). `track_steps[i] >= 0` also records
    row i's state after that step."""
    from sglang.kernels.ops.mamba.causal_conv1d_triton import causal_conv1d_update

    temporal, conv = temporal.clone(), conv.clone()
    snapshots = {}
    draft_tokens = window.mixed_qkv.shape[2]
    for step in range(draft_tokens):
        rows = [i for i in range(len(slots)) if slots[i] >= 0 and step < commit_lens[i]]
        if not rows:
            break
        index = torch.tensor(rows)
        row_slots = slots[index]
        cu_seqlens = torch.arange(len(rows) + 1, dtype=torch.int32)
        for layer, w in enumerate(weights):
            conv_out = causal_conv1d_update(
                window.mixed_qkv[layer, index, step].contiguous(),  # [rows, conv_dim]
                conv[layer],
                w.conv_weight,
                None,
                "silu",
                conv_state_indices=row_slots,
            )
            _gated_delta_update(
                model,
                w,
                conv_out,
                window.a[layer, index, step].contiguous(),
                window.b[layer, index, step].contiguous(),
                state=temporal[layer],
                state_indices=row_slots,
                cu_seqlens=cu_seqlens,
            )
        if track_steps is not None:
            for i in rows:
                if int(track_steps[i]) == step:
                    slot = int(slots[i])
                    snapshots[i] = (temporal[:, slot].clone(), conv[:, slot].clone())
    return DecodeReference(temporal=temporal, conv=conv, tracked=snapshots)
