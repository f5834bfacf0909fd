"""Drive the installed SGLang's (any supported release) real `KVCacheConfigurator` pool builders for a set of
model/flag cases: the hybrid request pool (`_build_hybrid_req_pool`, the one with the KDA-only guard) and
the PD-decode pool (`_build_hybrid_mamba_decode_req_pool`, a `--disaggregation-mode decode` server, no
guard in stock).

The configurator is the real class, built around real Hugging Face config objects of SGLang's own config
classes (a tiny Qwen3-Next and Qwen3.5 for hybrid GDN, Kimi-Linear for KDA, Falcon-H1 for a Mamba2 model
that is neither) and a published runtime config; the method either builds the real request pool (the
case is accepted; the pool's ReplaySSM attributes are reported) or raises (the case is refused; the
message is reported). Run in a process that imported stock SGLang, it shows the stock rule; in one that
imported a patched copy, the overlay's rule.
"""

import dataclasses
from dataclasses import dataclass
from types import SimpleNamespace

from harness.context import published
from harness.cpu_redirects import cuda_zeros_to_cpu
from harness.gdn_pool import TinyGDN

KDA_REFUSAL = "requires a KDA"
RAGGED_REFUSAL = "SGLANG_RAGGED_VERIFY_MODE=static"
RING_FIT_REFUSAL = "does not fit the verify window"
DRAFT_TOKENS = 4


def _gdn_fields(model: TinyGDN) -> dict:
    return dict(
        num_hidden_layers=model.layers,
        full_attention_interval=model.layers + 1,  # every layer a GDN layer
        linear_num_key_heads=model.num_k_heads,
        linear_num_value_heads=model.num_v_heads,
        linear_key_head_dim=model.head_k_dim,
        linear_value_head_dim=model.head_v_dim,
        linear_conv_kernel_dim=model.conv_kernel,
        hidden_size=64,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
    )


def hf_config(model_name: str, model: TinyGDN = TinyGDN()):
    """A real SGLang/HF config object for one of the probe's models."""
    from sglang.srt.configs import FalconH1Config, KimiLinearConfig, Qwen3_5Config, Qwen3NextConfig

    if model_name == "qwen3-next":
        return Qwen3NextConfig(**_gdn_fields(model))
    if model_name == "qwen3.5":
        return Qwen3_5Config(text_config=_gdn_fields(model))
    if model_name == "kimi-linear":
        return KimiLinearConfig(
            num_hidden_layers=model.layers,
            hidden_size=64,
            num_attention_heads=2,
            linear_attn_config={
                "num_heads": model.num_v_heads,
                "head_dim": model.head_k_dim,
                "short_conv_kernel_size": model.conv_kernel,
                "kda_layers": list(range(1, model.layers + 1)),
                "full_attn_layers": [],
            },
        )
    if model_name == "falcon-h1":
        return FalconH1Config(num_hidden_layers=model.layers)
    raise ValueError(f"unknown probe model {model_name!r}")


def build_configurator(config, *, layers: int | None = None):
    """The real `KVCacheConfigurator` for `config`, with only the fields the request-pool build reads; its
    rank holds layers 0..`layers` - 1 (default: the tiny model's)."""
    from sglang.srt.mem_cache.kv_cache_configurator import KVCacheConfigurator

    model_config = SimpleNamespace(
        hf_config=config,
        hf_text_config=config.get_text_config(),
        linear_attn_registry_result=None,
        is_draft_model=False,
        context_len=64,
    )
    fields = {f.name: None for f in dataclasses.fields(KVCacheConfigurator) if f.init}
    fields.update(
        device="cpu",
        model_config=model_config,
        layer_info=SimpleNamespace(
            start_layer=0,
            end_layer=TinyGDN().layers if layers is None else layers,
            is_hybrid_swa_mtp_draft=False,  # read by 0.5.21+'s __post_init__
            swa_attention_layer_ids=[],
        ),
    )
    fields.update({name: value for name, value in _later_release_fields().items() if name in fields})
    return KVCacheConfigurator(**fields)


def _later_release_fields() -> dict:
    """Fields that later releases' `KVCacheConfigurator.__post_init__` reads (a target that is not a
    draft worker, no speculative auxiliary draft, no KV sharding); only those the installed class has
    are passed."""
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    return {
        "spec_algorithm": SpeculativeAlgorithm.NONE,
        "is_draft_worker": False,
        "spec_aux_config": SimpleNamespace(draft_model_config=None, dflash_draft_num_layers=None),
        "enable_kv_cache_sharding": False,
        "use_mla_backend": False,
    }


@dataclass(frozen=True)
class Case:
    name: str
    model: str
    algorithm: str
    replayssm_spec: bool = True
    ragged_verify_mode: str = "static"
    stock: str = "accepted"  # expected outcome: "accepted", or a substring of the refusal
    overlay: str = "accepted"
    pd_decode: bool = False  # the PD-decode pool builder instead of the hybrid one
    ring_len: int = 16  # --linear-replayssm-cache-len (SGLang's default 16; the window is DRAFT_TOKENS)
    overlay_ring: str | None = None  # the overlay's outcome on a circular-ring release, where not `overlay`

    def expected(self, side: str, protocol: str) -> str:
        """The expected outcome of `side` ("stock" or "overlay") on a release of `protocol` (fold, ring)."""
        if side == "overlay" and protocol == "ring" and self.overlay_ring is not None:
            return self.overlay_ring
        return getattr(self, side)

    def flags(self) -> str:
        parts = [f"--speculative-algorithm {self.algorithm}"]
        if self.pd_decode:
            parts.append("--disaggregation-mode decode")
        if self.replayssm_spec:
            parts.append("--enable-linear-replayssm-spec")
        if self.ring_len != 16:
            parts.append(f"--linear-replayssm-cache-len {self.ring_len}")
        if self.algorithm == "DSPARK":
            parts.append(f"SGLANG_RAGGED_VERIFY_MODE={self.ragged_verify_mode}")
        return " ".join(parts)


CASES = (
    Case("GDN + DFLASH", "qwen3-next", "DFLASH", stock=KDA_REFUSAL),
    Case("GDN (Qwen3.5) + DFLASH", "qwen3.5", "DFLASH", stock=KDA_REFUSAL),
    Case("GDN + DSPARK static", "qwen3-next", "DSPARK", stock=KDA_REFUSAL),
    Case(
        "GDN + DSPARK compact",
        "qwen3-next",
        "DSPARK",
        ragged_verify_mode="compact",
        stock=KDA_REFUSAL,
        overlay=RAGGED_REFUSAL,
    ),
    Case(
        "GDN + DSPARK cap-accept",
        "qwen3-next",
        "DSPARK",
        ragged_verify_mode="cap-accept",
        stock=KDA_REFUSAL,
        overlay=RAGGED_REFUSAL,
    ),
    Case("KDA + DFLASH", "kimi-linear", "DFLASH"),
    Case("GDN + DFLASH, ReplaySSM off", "qwen3-next", "DFLASH", replayssm_spec=False),
    Case("Mamba2 (Falcon-H1) + DFLASH", "falcon-h1", "DFLASH", stock=KDA_REFUSAL, overlay=KDA_REFUSAL),
    # the window (4) against the GDN ReplaySSM ring: 0.5.19's fold window is sized to the window, whatever
    # the ring length; the ring releases need a power of two of at least 16 and of at least twice the window
    # (hooks/ring_fit.py; the default ring of 16 is the accepted case above)
    Case(
        "GDN + DFLASH, ring of 2N below 16",
        "qwen3-next",
        "DFLASH",
        ring_len=2 * DRAFT_TOKENS,
        stock=KDA_REFUSAL,
        overlay_ring=RING_FIT_REFUSAL,
    ),
    Case(
        "GDN + DFLASH, ring of N",
        "qwen3-next",
        "DFLASH",
        ring_len=DRAFT_TOKENS,
        stock=KDA_REFUSAL,
        overlay_ring=RING_FIT_REFUSAL,
    ),
    Case(
        "GDN + DSPARK static, ring shorter than N",
        "qwen3-next",
        "DSPARK",
        ring_len=DRAFT_TOKENS // 2,
        stock=KDA_REFUSAL,
        overlay_ring=RING_FIT_REFUSAL,
    ),
    Case("PD decode: GDN + DFLASH", "qwen3-next", "DFLASH", pd_decode=True),
    Case("PD decode: GDN + DSPARK static", "qwen3-next", "DSPARK", pd_decode=True),
    Case(
        "PD decode: GDN + DFLASH, ring of 12 (not a power of two)",
        "qwen3-next",
        "DFLASH",
        pd_decode=True,
        ring_len=12,
        overlay_ring=RING_FIT_REFUSAL,
    ),
    Case(
        "PD decode: GDN + DSPARK compact",
        "qwen3-next",
        "DSPARK",
        ragged_verify_mode="compact",
        pd_decode=True,
        overlay=RAGGED_REFUSAL,
    ),
    Case("PD decode: KDA + DFLASH", "kimi-linear", "DFLASH", pd_decode=True),
    Case("PD decode: GDN + DFLASH, ReplaySSM off", "qwen3-next", "DFLASH", replayssm_spec=False, pd_decode=True),
)


def probe(case: Case, model: TinyGDN = TinyGDN()) -> dict:
    """Run the case's pool builder for `model`'s head shapes; report 'accepted' (with the pool's ReplaySSM
    mode) or 'refused' (with the error type and message)."""
    with published(
        case.algorithm,
        replayssm_spec=case.replayssm_spec,
        ragged_verify_mode=case.ragged_verify_mode,
        max_mamba_cache_size=4,
        speculative_num_draft_tokens=DRAFT_TOKENS,
        speculative_eagle_topk=1,
        disaggregation_mode="decode" if case.pd_decode else "null",
        linear_replayssm_cache_len=case.ring_len,
    ):
        configurator = build_configurator(hf_config(case.model, model))  # later releases read the config here
        try:
            with cuda_zeros_to_cpu():
                if case.pd_decode:
                    pool = configurator._build_hybrid_mamba_decode_req_pool(
                        max_num_reqs=4, extra_max_context_len=0, pre_alloc_size=0
                    )
                else:
                    pool = configurator._build_hybrid_req_pool(max_num_reqs=4, extra_max_context_len=0)
        except Exception as error:
            return {"outcome": "refused", "error": type(error).__name__, "message": str(error)}
    mamba_pool = pool.mamba_pool
    return {
        "outcome": "accepted",
        "pool": {
            "replayssm_spec_fold": bool(mamba_pool.replayssm_spec_fold),
            "replayssm_is_kda": bool(getattr(mamba_pool, "replayssm_is_kda", False)),
            "replayssm_ring": getattr(mamba_pool, "replayssm_cache_base", None) is not None,
        },
    }


def matches(expected: str, result: dict) -> bool:
    """Whether a probe result is the expected outcome ('accepted', or a substring of the refusal)."""
    if expected == "accepted":
        return result["outcome"] == "accepted"
    return result["outcome"] == "refused" and expected in result["message"]
