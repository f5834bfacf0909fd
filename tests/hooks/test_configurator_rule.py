"""The overlay's configurator rule on SGLang 0.5.19's real `KVCacheConfigurator`, in process.

The configurator is the real class built around real config objects (tiny Qwen3-Next / Qwen3.5 for GDN,
Kimi-Linear for KDA, Falcon-H1 for a Mamba2 model), with a published runtime config; the stock
`_build_hybrid_req_pool` is driven for the stock rule, and `keep_kda_only_guard` is asked directly the
way the patched guard asks it. `test_patched_configurator.py` drives the patched method itself.
"""

import logging

import pytest

from harness.configurator_probe import (
    CASES,
    KDA_REFUSAL,
    RAGGED_REFUSAL,
    build_configurator,
    hf_config,
    matches,
    probe,
)
from harness.context import published
from replayssm_overlay.errors import OverlayError
from replayssm_overlay.hooks import keep_kda_only_guard


def ask_guard(model: str, algorithm: str, ragged_verify_mode: str = "static"):
    configurator = build_configurator(hf_config(model))
    with published(algorithm, ragged_verify_mode=ragged_verify_mode):
        return keep_kda_only_guard(configurator)


@pytest.mark.parametrize("model", ["qwen3-next", "qwen3.5"])
def test_gdn_dflash_is_lifted(model, caplog):
    with caplog.at_level(logging.INFO, logger="replayssm_overlay.hooks.configurator"):
        assert ask_guard(model, "DFLASH") is False
    lifted = [r for r in caplog.records if r.levelno == logging.INFO]
    assert len(lifted) == 1 and "DFLASH" in lifted[0].getMessage()


def test_gdn_dspark_static_is_lifted():
    assert ask_guard("qwen3-next", "DSPARK", "static") is False


@pytest.mark.parametrize("mode", ["compact", "cap-accept"])
def test_gdn_dspark_non_static_is_refused_naming_the_variable(mode):
    with pytest.raises(OverlayError) as refusal:
        ask_guard("qwen3-next", "DSPARK", mode)
    message = str(refusal.value)
    assert RAGGED_REFUSAL in message and f"SGLANG_RAGGED_VERIFY_MODE={mode}" in message
    assert refusal.value.fix


@pytest.mark.parametrize("model", ["falcon-h1", "kimi-linear"])
def test_non_gdn_models_keep_sglangs_error(model):
    assert ask_guard(model, "DFLASH") is True


def test_other_algorithms_keep_sglangs_error():
    assert ask_guard("qwen3-next", "EAGLE") is True


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_stock_rule_is_what_the_overlay_changes(case):
    """The unpatched `_build_hybrid_req_pool`: refuses every non-KDA model (the reason for the overlay),
    and accepts KDA and ReplaySSM off."""
    result = probe(case)
    assert matches(case.stock, result), result
    if case.stock == KDA_REFUSAL:
        assert result["error"] == "ValueError"


@pytest.mark.parametrize(
    "flags, sm_major, row",
    [
        ({}, 9, "fold-float32-triton-verify"),
        ({"linear_attn_backend": "flashinfer"}, 9, "fold-float32-flashinfer-verify"),
        ({"linear_attn_backend": "flashinfer"}, 8, "fold-float32-triton-verify"),
        ({"linear_attn_backend": "flashinfer"}, None, "fold-float32-flashinfer-verify"),
        (
            {"linear_attn_backend": "flashinfer", "linear_attn_verify_backend": "triton"},
            9,
            "fold-float32-triton-verify",
        ),
        (
            {"linear_attn_prefill_backend": "flashinfer", "linear_attn_verify_backend": "flashinfer"},
            10,
            "fold-float32-flashinfer-verify",
        ),
    ],
)
def test_the_record_and_the_info_line_carry_the_row_the_published_flags_pick(flags, sm_major, row, monkeypatch, caplog):
    """The hook reads the published --linear-attn-* flags and this GPU (stubbed here) when it lifts the
    refusal: the self-check record and the INFO line say the claim of that configuration's row."""
    from replayssm_overlay import exactness, fold, selfcheck
    from replayssm_overlay.hooks import configurator as rule

    monkeypatch.setattr(rule, "_sm_major", lambda: sm_major)
    monkeypatch.setattr(selfcheck, "_checked", {})
    monkeypatch.setenv(fold.ENV_FOLD, "sglang")
    monkeypatch.setattr(fold, "_choice", None)
    configurator = build_configurator(hf_config("qwen3-next"))
    with caplog.at_level(logging.INFO, logger="replayssm_overlay.hooks.configurator"):
        with published("DFLASH", **flags):
            assert keep_kda_only_guard(configurator) is False
    (record,) = selfcheck.read_records()
    assert record["exactness"]["row"] == row and record["stock_verify_kernel"] == exactness.ROW_BY_KEY[row].stock_verify
    (line,) = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert exactness.ROW_BY_KEY[row].statement.format(state="float32") in line
