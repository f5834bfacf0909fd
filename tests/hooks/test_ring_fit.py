"""The ring-fit rule (`hooks/ring_fit.py`): on a circular-ring release (0.5.20 on) DFLASH/DSPARK are
served only where `--linear-replayssm-cache-len` is a power of two of at least 16 (SGLang's commit kernel
compiles on the GPU from there) and at least twice the verify window, or exactly a window of 16 or 32 (a
ring of N commits what a ring of 2N does there: tests/releases/test_ring_length.py, benchmarks/gpu_ring.py
--pairs), refused at startup otherwise, naming both flags and the smallest ring that fits; 0.5.19 (whose
fold window is sized to the verify window) is not concerned.

In process on SGLang 0.5.19's real `KVCacheConfigurator`: the ring release is stood in for by the
protocol answer only (`protocol.installed`); the same cases run end to end on every ring release's own
code in tests/releases (`harness.configurator_probe.CASES`, "ring of ...").
"""

import pytest

from harness.configurator_probe import RING_FIT_REFUSAL, build_configurator, hf_config
from harness.context import published
from replayssm_overlay import protocol, selfcheck
from replayssm_overlay.errors import OverlayError
from replayssm_overlay.hooks import keep_kda_only_guard, refuse_unserved_pool, ring_fit


@pytest.mark.parametrize(
    "window,ring_len,fits",
    [
        (4, 16, True),
        (8, 16, True),
        (4, 64, True),
        (1, 16, True),
        (12, 32, True),  # 2N, at least 16
        (16, 16, True),
        (32, 32, True),  # exactly N, for the windows compared
        (4, 8, False),
        (1, 2, False),
        (8, 8, False),  # shorter than 16: SGLang's commit kernel does not compile
        (12, 16, False),
        (24, 32, False),
        (64, 64, False),  # N <= L < 2N where it was not compared
        (8, 12, False),
        (16, 8, False),  # not a power of two; shorter than the window
    ],
)
def test_the_rule_is_16_and_2n_or_exactly_n_for_the_windows_compared(window, ring_len, fits):
    assert ring_fit.fits(window, ring_len) is fits


@pytest.mark.parametrize(
    "window,smallest", [(1, 16), (4, 16), (5, 16), (8, 16), (12, 32), (16, 16), (24, 64), (32, 32)]
)
def test_the_fix_names_the_smallest_ring_that_fits(window, smallest):
    assert ring_fit.smallest_ring(window) == smallest and ring_fit.fits(window, smallest)
    assert not ring_fit.fits(window, smallest // 2)


def test_sglangs_default_ring_takes_dflashs_default_block():
    """16 draft tokens on SGLang's default --linear-replayssm-cache-len 16 start (the stock DFLASH flags)."""
    ring_fit.check("DFLASH", 16, 16)


def test_a_refusal_names_both_flags_and_the_fix():
    with pytest.raises(OverlayError) as refusal:
        ring_fit.check("DFLASH", 12, 16)
    message, fix = str(refusal.value), refusal.value.fix
    assert RING_FIT_REFUSAL in message and "--linear-replayssm-cache-len 16" in message
    assert "--speculative-dflash-block-size" in message and "window of 12 tokens" in message
    assert "shown to commit bitwise what a ring of 2N commits" in message
    assert "--linear-replayssm-cache-len 32" in fix and "N is 16 or at most 8" in fix
    with pytest.raises(OverlayError) as short:
        ring_fit.check("DFLASH", 16, 8)
    assert "commits stale rows" in str(short.value) and "lower" not in short.value.fix
    with pytest.raises(OverlayError) as below_16:
        ring_fit.check("DFLASH", 4, 8)
    assert "compiles on the GPU only for a ring of at least 16" in str(below_16.value)
    assert "--linear-replayssm-cache-len 16" in below_16.value.fix
    with pytest.raises(OverlayError) as dspark:
        ring_fit.check("DSPARK", 5, 12)
    assert "--speculative-dspark-block-size" in str(dspark.value) and "gamma + 1" in str(dspark.value)
    assert "--linear-replayssm-cache-len 16" in dspark.value.fix and "at most" not in dspark.value.fix
    assert "modulo a power of two" in str(dspark.value)
    with pytest.raises(OverlayError, match="no verify window"):
        ring_fit.check("DFLASH", None, 16)


def _ask(ask, algorithm="DFLASH", *, window=4, ring_len=16, builder=None):
    configurator = build_configurator(hf_config("qwen3-next"))
    with published(
        algorithm, speculative_num_draft_tokens=window, linear_replayssm_cache_len=ring_len, speculative_eagle_topk=1
    ):
        return ask(configurator) if builder is None else ask(configurator, builder)


@pytest.fixture
def ring_release(monkeypatch):
    """The installed release answers "circular ring" (its pools are the 0.5.19 code's, unused here)."""
    monkeypatch.setattr(protocol, "installed", lambda: protocol.RING)
    monkeypatch.setattr(selfcheck, "_checked", {})


@pytest.mark.parametrize("algorithm", ["DFLASH", "DSPARK"])
@pytest.mark.parametrize("window,ring_len", [(4, 4), (4, 8), (4, 12), (12, 16)])
def test_a_ring_release_refuses_a_window_the_ring_does_not_fit_at_startup(ring_release, algorithm, window, ring_len):
    for ask, builder in ((keep_kda_only_guard, None), (refuse_unserved_pool, "pd_decode")):
        with pytest.raises(OverlayError, match=RING_FIT_REFUSAL) as refusal:
            _ask(ask, algorithm, window=window, ring_len=ring_len, builder=builder)
        assert f"--linear-replayssm-cache-len {ring_fit.smallest_ring(window)}" in refusal.value.fix


def test_a_ring_release_serves_a_window_that_fits_and_checks_no_fold(ring_release, monkeypatch):
    monkeypatch.setattr(selfcheck, "_check", lambda *a: pytest.fail("the overlay's fold checked on a ring release"))
    assert _ask(keep_kda_only_guard, window=16, ring_len=16) is False
    (record,) = selfcheck.read_records()
    assert record["outcome"] == "ring-commit" and record["protocol"] == protocol.RING
    assert protocol.MTP_COMMIT in record["commit"] and record["fold"]["fold"] == "none"
    assert record["exactness"]["bitwise_equal_to"] == "sglang-mtp-commit"


@pytest.mark.parametrize("ring_len", [2, 4, 12, 16])
def test_sglang_0_5_19_is_not_concerned_by_the_ring_length(ring_len):
    """Its fold window is the verify window whatever `--linear-replayssm-cache-len` says (the cycle test
    `tests/cycle/test_commit_cycle.py` commits bitwise with a ring length below the window)."""
    assert protocol.installed() == protocol.FOLD
    assert _ask(keep_kda_only_guard, window=8, ring_len=ring_len) is False
