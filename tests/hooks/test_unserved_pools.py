"""`refuse_unserved_pool`: the pool builders stock SGLang runs without its KDA-only guard (PD decode,
unified memory), on the real `KVCacheConfigurator` with a published runtime config, in process.

The PD-decode builder is also driven end to end through the patched file (`test_patched_configurator.py`,
cases "PD decode: ...", and the commit cycle on the pool it builds: tests/cycle); the unified-memory
builder needs a whole unified KV pool, so here the hook is asked directly, the way its inserted lines ask
it (test_hookpoints checks those lines).
"""

import logging

import pytest

from harness.configurator_probe import RAGGED_REFUSAL, build_configurator, hf_config
from harness.context import published
from replayssm_overlay import selfcheck
from replayssm_overlay.errors import OverlayError
from replayssm_overlay.hooks import refuse_unserved_pool


def ask(builder, model="qwen3-next", algorithm="DFLASH", replayssm_spec=True, mode="static"):
    configurator = build_configurator(hf_config(model))
    with published(algorithm, replayssm_spec=replayssm_spec, ragged_verify_mode=mode, speculative_num_draft_tokens=4):
        return refuse_unserved_pool(configurator, builder)


@pytest.mark.parametrize("algorithm", ["DFLASH", "DSPARK"])
def test_pd_decode_with_gdn_replayssm_is_served_after_the_self_check(algorithm, monkeypatch, caplog):
    """Served as the hybrid pool is (`admit`): the node's self-check ran and wrote its record, one INFO line."""
    monkeypatch.setattr(selfcheck, "_checked", {})
    with caplog.at_level(logging.INFO, logger="replayssm_overlay.hooks.configurator"):
        assert ask("pd_decode", algorithm=algorithm) is None
    (record,) = selfcheck.read_records()
    assert record["alive"] and record["geometry"]["window"] == 4
    (line,) = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert f"allowing {algorithm}" in line and record["commit"] in line


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
    [
        ("kimi-linear", "DFLASH", True),
        ("falcon-h1", "DFLASH", True),
        ("qwen3-next", "DFLASH", False),
        ("qwen3-next", "EAGLE", True),
    ],
)
def test_what_the_overlay_does_not_serve_is_left_to_sglang(builder, model, algorithm, replayssm_spec):
    assert ask(builder, model=model, algorithm=algorithm, replayssm_spec=replayssm_spec) is None


def test_an_unknown_builder_is_a_version_mismatch():
    with pytest.raises(OverlayError, match="unknown pool builder"):
        ask("somewhere_else")
