"""`refuse_unserved_pool`: the pool builders stock 0.5.19 runs without its KDA-only guard (PD decode,
unified memory), on the real `KVCacheConfigurator` with a published runtime config, in process.

The PD-decode builder is also driven end to end through the patched file (`test_patched_configurator.py`,
cases "PD decode: ..."); the unified-memory builder needs a whole unified KV pool, so here the hook is
asked directly, the way its inserted lines ask it (test_hookpoints checks those lines).
"""

import pytest

from harness.configurator_probe import PD_DECODE_REFUSAL, RAGGED_REFUSAL, build_configurator, hf_config
from harness.context import published
from replayssm_overlay.errors import OverlayError
from replayssm_overlay.hooks import refuse_unserved_pool


def ask(builder, model="qwen3-next", algorithm="DFLASH", replayssm_spec=True, mode="static"):
    configurator = build_configurator(hf_config(model))
    with published(algorithm, replayssm_spec=replayssm_spec, ragged_verify_mode=mode):
        return refuse_unserved_pool(configurator, builder)


@pytest.mark.parametrize("algorithm", ["DFLASH", "DSPARK"])
def test_pd_decode_with_gdn_replayssm_is_refused_with_the_fix(algorithm):
    with pytest.raises(OverlayError) as refusal:
        ask("pd_decode", algorithm=algorithm)
    assert PD_DECODE_REFUSAL in str(refusal.value) and algorithm in str(refusal.value)
    assert "--enable-linear-replayssm-spec" in refusal.value.fix


@pytest.mark.parametrize("builder", ["pd_decode", "unified_memory"])
def test_non_static_dspark_is_told_the_static_rule_on_every_builder(builder):
    with pytest.raises(OverlayError, match=RAGGED_REFUSAL):
        ask(builder, algorithm="DSPARK", mode="compact")


def test_unified_memory_says_sglang_turns_replayssm_off():
    with pytest.raises(OverlayError) as refusal:
        ask("unified_memory")
    assert "turns ReplaySSM spec-verify off without saying so" in str(refusal.value)
    assert "--enable-unified-memory" in refusal.value.fix


@pytest.mark.parametrize("builder", ["pd_decode", "unified_memory"])
@pytest.mark.parametrize(
    "model,algorithm,replayssm_spec",
    [("kimi-linear", "DFLASH", True), ("falcon-h1", "DFLASH", True), ("qwen3-next", "DFLASH", False),
     ("qwen3-next", "EAGLE", True)],
)
def test_what_the_overlay_does_not_serve_is_left_to_sglang(builder, model, algorithm, replayssm_spec):
    assert ask(builder, model=model, algorithm=algorithm, replayssm_spec=replayssm_spec) is None


def test_an_unknown_builder_is_a_version_mismatch():
    with pytest.raises(OverlayError, match="unknown pool builder"):
        ask("somewhere_else")
