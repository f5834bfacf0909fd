"""A real SGLang 0.5.19 `HybridReqToTokenPool` (with its `MambaPool`) in ReplaySSM spec mode, on the CPU.

The pool is built by SGLang's own constructors for a tiny hybrid GDN model (the shapes Qwen3-Next's
`mamba2_cache_params` would give at TP 1), with `enable_linear_replayssm_spec=True`, so it carries the
raw verify window (rawv/rawk/g/beta) instead of per-step intermediate states, exactly as a GPU server's
pool does. The conv pool is fp32 by default: Triton's interpreter computes `causal_conv1d_update`
wrongly in bf16 (numpy has no bf16), and fp32 lets the full conv -> recurrence chain be checked.
"""

from dataclasses import asdict, dataclass

import torch

from harness.cpu_redirects import cuda_zeros_to_cpu


@dataclass(frozen=True)
class TinyGDN:
    """The embedded default model: 2 GDN layers, 2 key heads, 4 value heads, tiny head dims."""

    layers: int = 2
    num_k_heads: int = 2  # H
    num_v_heads: int = 4  # HV
    head_k_dim: int = 16  # K
    head_v_dim: int = 32  # V
    conv_kernel: int = 4
    conv_dtype: torch.dtype = torch.float32
    state_dtype: torch.dtype = torch.float32  # the SSM state (--mamba-ssm-dtype)

    @property
    def key_dim(self) -> int:
        return self.num_k_heads * self.head_k_dim

    @property
    def value_dim(self) -> int:
        return self.num_v_heads * self.head_v_dim

    @property
    def conv_dim(self) -> int:
        """Width of the conv channel: q, k, v concatenated."""
        return 2 * self.key_dim + self.value_dim

    def describe(self) -> dict:
        return {
            **asdict(self),
            "conv_dtype": str(self.conv_dtype).replace("torch.", ""),
            "state_dtype": str(self.state_dtype).replace("torch.", ""),
        }


def cache_params(model: TinyGDN):
    """SGLang's `Mamba2CacheParams` for the model, as `Qwen3NextConfig.mamba2_cache_params` builds them."""
    from sglang.srt.configs.mamba_utils import Mamba2CacheParams, Mamba2StateDType, Mamba2StateShape

    shape = Mamba2StateShape.create(
        tp_world_size=1,
        intermediate_size=model.value_dim,
        n_groups=model.num_k_heads,
        num_heads=model.num_v_heads,
        head_dim=model.head_v_dim,
        state_size=model.head_k_dim,
        conv_kernel=model.conv_kernel,
        conv_shard_groups=[model.key_dim, model.key_dim, model.value_dim],
    )
    return Mamba2CacheParams(
        shape=shape,
        layers=list(range(model.layers)),
        dtype=Mamba2StateDType(conv=model.conv_dtype, temporal=model.state_dtype),
    )


def build_pool(model: TinyGDN, *, slots: int, draft_tokens: int, replayssm_spec: bool = True, ring_len: int = 16):
    """SGLang's own `HybridReqToTokenPool` on the CPU, sized for `slots` requests and mamba slots.
    `ring_len` is `--linear-replayssm-cache-len` (SGLang's default 16): the GDN circular ring's length
    L on 0.5.20 and later; 0.5.19's raw-window fold ignores it for GDN."""
    from sglang.srt.mem_cache.memory_pool import HybridReqToTokenPool

    with cuda_zeros_to_cpu():
        return HybridReqToTokenPool(
            size=slots,
            mamba_size=slots,
            mamba_spec_state_size=slots,
            max_context_len=64,
            device="cpu",
            enable_memory_saver=False,
            cache_params=cache_params(model),
            mamba_layer_ids=list(range(model.layers)),
            enable_mamba_extra_buffer=False,
            speculative_num_draft_tokens=draft_tokens,
            speculative_eagle_topk=1,
            enable_overlap_schedule=False,
            enable_linear_replayssm_spec=replayssm_spec,
            linear_replayssm_cache_len=ring_len,
        )
