"""The bytes of a GDN model's mamba pool per GPU, buffer by buffer, as each supported SGLang release lays it out.

`MambaPool` allocates two kinds of rows: one per mamba state slot (`--max-mamba-cache-size`: the running
requests and the radix cache's kept states) and one per running request (the verify buffers). Every
release keeps, per slot, the conv state (conv width x (conv kernel - 1), conv dtype) and the SSM state
(HV x V x K, `--mamba-ssm-dtype`), and per request the verify's conv windows (one shared window of
N + conv kernel - 2 columns). With ReplaySSM off, each request also holds N full SSM-state snapshots
(`intermediate_ssm`), the cost ReplaySSM removes. With it on:

- 0.5.19 (`fold`): a raw window of N rows per SLOT: raw v and k (conv dtype), gate and beta (fp32);
- the ring releases (`ring`, `patcher.releases.RING_RELEASES`): a ring of L = `--linear-replayssm-cache-len`
  rows per REQUEST: compact d and k with their low parts (conv dtype) and the gate (fp32), and three
  cursors (int32, int32, int8).

Names are the pool's attribute names (`harness.pool_bytes` reads them the same way), so the test that holds
this to the builder compares dicts. The conv dtype is SGLang's default (bfloat16; SGLANG_MAMBA_CONV_DTYPE
unset).
"""

from __future__ import annotations

from dataclasses import dataclass

from replayssm_overlay.patcher.releases import RING_RELEASES
from replayssm_overlay.plan.model import SSM_DTYPE_BYTES, GdnModel

CONV_BYTES = 2  # bfloat16
FP32_BYTES = 4
RING_CURSOR_BYTES = {"replayssm_spec_write_pos": 4, "replayssm_cache_base": 4, "replayssm_is_flush": 1}
FOLD, RING = "fold", "ring"


def protocol(release: str) -> str:
    return RING if release in RING_RELEASES else FOLD


@dataclass(frozen=True)
class Rank:
    """One GPU's share of the model: the GDN layers, whole heads per attention-TP rank."""

    layers: int
    key_heads: int  # H / attention TP
    value_heads: int  # HV / attention TP
    key_dim: int  # K
    value_dim: int  # V
    conv_kernel: int
    ssm_bytes: int

    @classmethod
    def of(cls, model: GdnModel, attn_tp: int, ssm_dtype: str) -> Rank:
        model.check_tp(attn_tp)
        return cls(
            model.gdn_layers,
            model.linear_num_key_heads // attn_tp,
            model.linear_num_value_heads // attn_tp,
            model.linear_key_head_dim,
            model.linear_value_head_dim,
            model.linear_conv_kernel_dim,
            SSM_DTYPE_BYTES[ssm_dtype],
        )

    @property
    def conv_width(self) -> int:
        """q, k and v channels of one rank: the conv state's first axis."""
        return 2 * self.key_heads * self.key_dim + self.value_heads * self.value_dim

    @property
    def ssm_state(self) -> int:
        """Bytes of one layer's SSM state (HV x V x K)."""
        return self.value_heads * self.value_dim * self.key_dim * self.ssm_bytes


def buffers(rank: Rank, *, release: str, window: int, ring_len: int, replayssm: bool) -> dict:
    """{"slot": {buffer: bytes}, "request": {buffer: bytes}} of one rank's mamba pool."""
    n, layers = window, rank.layers
    slot = {
        "conv[0]": layers * rank.conv_width * (rank.conv_kernel - 1) * CONV_BYTES,
        "temporal": layers * rank.ssm_state,
    }
    request = {"_intermediate_conv_window_phys[0]": layers * rank.conv_width * (n + rank.conv_kernel - 2) * CONV_BYTES}
    if not replayssm:
        request["intermediate_ssm"] = layers * n * rank.ssm_state
    elif protocol(release) == FOLD:
        slot.update(_rows(rank, n, ("replayssm_rawv", "replayssm_rawk"), ("replayssm_g", "replayssm_beta")))
    else:
        request.update(
            _rows(rank, ring_len, ("replayssm_d", "replayssm_k", "replayssm_rawv", "replayssm_rawk"), ("replayssm_g",))
        )
        request.update(RING_CURSOR_BYTES)
    return {"slot": slot, "request": request}


def _rows(rank: Rank, rows: int, vk_names, gate_names) -> dict:
    """`rows` verify rows of every layer: v-shaped (HV x V) and k-shaped (H x K) buffers alternate in
    `vk_names`, in the conv dtype; per-head fp32 scalars in `gate_names`."""
    per_row = {"v": rank.value_heads * rank.value_dim, "k": rank.key_heads * rank.key_dim}
    sizes = {name: rank.layers * rows * per_row["vk"[index % 2]] * CONV_BYTES for index, name in enumerate(vk_names)}
    sizes.update({name: rank.layers * rows * rank.value_heads * FP32_BYTES for name in gate_names})
    return sizes


def per_request(layout: dict, slots_per_request: int = 1) -> int:
    """Bytes one running request costs: `slots_per_request` state slots and its verify buffers."""
    return slots_per_request * sum(layout["slot"].values()) + sum(layout["request"].values())
