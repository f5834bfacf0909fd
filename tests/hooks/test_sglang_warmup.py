"""The default fold chain without a CUDA kernel: SGLang's own commit, compiled on the pool that serves once it
is built (`replayssm_overlay.sglang_warmup`), so that no request pays Triton's compile; the same where the
overlay's CUDA kernel commits (a call it does not take runs SGLang's commit); `RSO_FOLD=triton` still picks
the overlay's Triton kernel, and nothing is warmed for it.

In process on the CPU, under Triton's interpreter (tests/hooks/conftest.py): SGLang 0.5.19's real
configurator, its real `HybridReqToTokenPool` and PD-decode pool, SGLang's real commit (recorded on the way
through). Under the interpreter nothing is compiled, so what is checked is what decides a compile on the GPU:
the warm-up ran SGLang's commit before any commit, on the very tensors of the pool SGLang built (Triton keys
the fold on their strides), with the server's index dtypes, and wrote nothing. Whether the server's first
commit then finds it compiled is checked on the GPU (tests/kernels/test_sglang_warmup_gpu.py, `gpu`).
"""

import logging

import pytest
import torch

from harness.configurator_probe import build_configurator, hf_config
from harness.context import published
from harness.cpu_redirects import cuda_zeros_to_cpu
from harness.gdn_pool import TinyGDN, build_pool
from replayssm_overlay import fold, metrics, selfcheck, sglang_warmup
from replayssm_overlay.hooks import keep_kda_only_guard
from replayssm_overlay.kernels import launch

MAMBA_SLOTS = 6  # --max-mamba-cache-size: the pool has one slot more
DRAFT_TOKENS = 4
FOLD_MODULE = "sglang.kernels.ops.attention.fla.gdn_replayssm_spec_fold"


@pytest.fixture(autouse=True)
def fresh(monkeypatch, tmp_path):
    """An undecided fold with no prebuilt kernel folder (the default chain's case), nothing checked or warmed
    (tests/hooks/conftest.py puts MambaPool's constructor back after each test)."""
    monkeypatch.setattr(fold, "_choice", None)
    monkeypatch.setattr(fold, "_plans", {})
    monkeypatch.setattr(selfcheck, "_checked", {})
    monkeypatch.setattr(selfcheck, "_warmup", {})
    monkeypatch.delenv(fold.ENV_FOLD, raising=False)
    monkeypatch.setenv("RSO_KERNEL_DIR", str(tmp_path / "no-kernels"))


@pytest.fixture
def sglang_commits(monkeypatch):
    """Every call of SGLang's commit, as (spec_state, slots, accept lens, track slots, track steps), run for real."""
    import importlib

    module = importlib.import_module(FOLD_MODULE)
    real, calls = module.commit_gdn_replayssm_fold_after_verify, []

    def recorded(**kwargs):
        calls.append(kwargs)
        return real(**kwargs)

    monkeypatch.setattr(module, "commit_gdn_replayssm_fold_after_verify", recorded)
    return calls


def _published(**fields):
    return published(
        "DFLASH",
        max_mamba_cache_size=MAMBA_SLOTS,
        speculative_num_draft_tokens=DRAFT_TOKENS,
        speculative_eagle_topk=1,
        **fields,
    )


def _the_pool(configurator):
    """What `_build_hybrid_req_pool` builds for this configurator (its own arguments, SGLang's own class)."""
    from sglang.srt.mem_cache.memory_pool import HybridReqToTokenPool
    from sglang.srt.runtime_context import get_schedule, max_speculative_num_draft_tokens

    params = configurator.mambaish_config.mamba2_cache_params
    window = max_speculative_num_draft_tokens()
    with cuda_zeros_to_cpu():
        return HybridReqToTokenPool(
            size=4,
            mamba_size=get_schedule().max_mamba_cache_size,
            mamba_spec_state_size=4,
            max_context_len=64,
            device="cpu",
            enable_memory_saver=False,
            cache_params=params,
            mamba_layer_ids=list(params.layers),
            enable_mamba_extra_buffer=False,
            speculative_num_draft_tokens=window,
            speculative_eagle_topk=1,
            enable_overlap_schedule=False,
            enable_linear_replayssm_spec=True,
        )


def _outcome() -> dict:
    """This process's warm-up outcome, as its self-check record carries it."""
    return dict(selfcheck._warmup)


def _pending():
    from sglang.srt.mem_cache.memory_pool import MambaPool

    return hasattr(MambaPool.__init__, sglang_warmup._MARK)


def _check_warmed_on(calls, pool) -> None:
    """SGLang's commit ran without and with a track slot, padded rows only, the server's index dtypes, on the
    pool's own tensors, and wrote nothing."""
    real = pool.get_speculative_mamba2_params_all_layers()
    assert [call["mamba_track_indices"] is not None for call in calls] == [False, True]
    for call in calls:
        assert call["state_batch_indices"].dtype == call["accept_lens"].dtype == torch.int32
        assert call["state_batch_indices"].tolist() == [-1] * sglang_warmup.PADDED_ROWS
        if call["mamba_track_indices"] is not None:
            assert call["mamba_track_indices"].dtype == call["mamba_steps_to_track"].dtype == torch.int64
        used = call["spec_state"]
        for name in ("temporal", "replayssm_rawv", "replayssm_rawk", "replayssm_g", "replayssm_beta"):
            assert getattr(used, name) is getattr(real, name), name
        assert used.conv[0] is real.conv[0] and used.intermediate_conv_window[0] is real.intermediate_conv_window[0]
    assert not real.temporal.any() and not real.conv[0].any()  # nothing was written


def test_without_a_cuda_kernel_sglangs_fold_is_compiled_on_the_pool_once_built(sglang_commits, caplog):
    configurator = build_configurator(hf_config("qwen3-next"))
    with _published(), caplog.at_level(logging.INFO, logger=sglang_warmup.logger.name):
        assert keep_kda_only_guard(configurator) is False  # lifted: the server goes on to build its pool
        assert fold.chosen()[0] == "sglang" and "no usable CUDA commit kernel" in fold.chosen()[1]
        assert not sglang_commits and _pending()
        assert selfcheck.read_records()[0]["warmup"]["outcome"] == "pending"
        pool = _the_pool(configurator)
    assert not _pending()
    _check_warmed_on(sglang_commits, pool)
    (record,) = selfcheck.read_records()
    warmup = record["warmup"]
    assert warmup["outcome"] == "compiled" and "SGLang's fold commits" in warmup["detail"], warmup
    assert warmup["pool"]["slots"] == MAMBA_SLOTS + 1
    assert warmup["pool"]["layers"] == len(pool.mamba_pool.mamba_layer_ids)
    assert warmup["pool"]["conv_window_rows"] and warmup["seconds"] >= 0 and "compiles" in warmup
    assert [r.getMessage() for r in caplog.records if "compiled before serving" in r.getMessage()]

    # the server's commits then run SGLang's commit on its pool (no overlay plan, nothing compiled again here)
    state = pool.get_speculative_mamba2_params_all_layers()
    slots, lens = torch.tensor([1, 3], dtype=torch.int32), torch.tensor([2, 4], dtype=torch.int32)
    fold.fold_accepted_prefix(spec_state=state, state_batch_indices=slots, accept_lens=lens)
    assert len(sglang_commits) == 3 and sglang_commits[-1]["spec_state"] is state and not fold._plans
    assert fold.describe()["fold"] == "sglang"


def test_a_pd_decode_pool_is_warmed_with_its_own_slot_count(sglang_commits):
    """`--disaggregation-mode decode` sizes the pool max(mamba size, (requests + pre-allocated) * slots per
    request): more slots than `max_mamba_cache_size + 1`, so other strides, which the warm-up takes from the
    pool itself."""
    configurator = build_configurator(hf_config("qwen3-next"))
    with _published(disaggregation_mode="decode"):
        assert fold.chosen()[0] == "sglang"
        sglang_warmup.warm_before_serving()
        with cuda_zeros_to_cpu():
            pool = configurator._build_hybrid_mamba_decode_req_pool(
                max_num_reqs=MAMBA_SLOTS, extra_max_context_len=0, pre_alloc_size=2 * MAMBA_SLOTS
            )
    _check_warmed_on(sglang_commits, pool)
    slots = pool.get_speculative_mamba2_params_all_layers().temporal.shape[1]
    assert slots > MAMBA_SLOTS + 1 and _outcome()["pool"]["slots"] == slots


def test_under_the_cuda_kernel_the_per_call_fallback_is_warmed_too(monkeypatch, sglang_commits):
    monkeypatch.setattr(fold, "_choice", ("overlay-cuda", "stand-in", None))
    with _published():
        assert sglang_warmup.warm_before_serving()["outcome"] == "pending"
        built = build_pool(TinyGDN(), slots=MAMBA_SLOTS, draft_tokens=DRAFT_TOKENS)
    _check_warmed_on(sglang_commits, built.mamba_pool)
    outcome = _outcome()
    assert outcome["outcome"] == "compiled" and "a call it does not take runs SGLang's fold" in outcome["detail"]


def test_a_pool_whose_construction_fails_leaves_the_constructor_as_it_was(sglang_commits):
    from sglang.srt.mem_cache.memory_pool import MambaPool

    original = MambaPool.__init__
    with _published():
        sglang_warmup.warm_before_serving()
        assert _pending()
        with pytest.raises(TypeError):
            MambaPool(no_such_argument=1)
    assert MambaPool.__init__ is original and not sglang_commits


def test_a_failing_warm_up_is_an_outcome_not_a_failure(monkeypatch, sglang_commits):
    monkeypatch.setattr(fold, "sglang_commit", lambda **kw: (_ for _ in ()).throw(RuntimeError("no compiler")))
    with _published():
        sglang_warmup.warm_before_serving()
        build_pool(TinyGDN(), slots=MAMBA_SLOTS, draft_tokens=DRAFT_TOKENS)
    outcome = _outcome()
    assert outcome["outcome"] == "error" and "no compiler" in outcome["detail"]


def test_the_warm_up_is_in_status_and_the_metrics():
    live = {
        "alive": True,
        "outcome": "sglang-fold",
        "fold": {"fold": "sglang"},
        "warmup": {"outcome": "compiled", "seconds": 1.5, "compiles": 2, "cache_hits": 0},
    }
    found = metrics.facts({"selfcheck": [live, {**live, "warmup": {"outcome": "pending"}}, {**live, "alive": False}]})
    assert found["warmup_outcomes"] == {"compiled": 1, "pending": 1}
    assert found["warmup_compiles"] == 2 and found["warmup_seconds_max"] == 1.5
    text = metrics.exposition(found)
    assert 'replayssm_overlay_warmup_processes{outcome="compiled"} 1' in text
    assert "replayssm_overlay_warmup_compiles 2" in text and "replayssm_overlay_warmup_seconds_max 1.5" in text


def test_rso_fold_triton_picks_the_jit_twin_and_warms_nothing(monkeypatch, sglang_commits):
    monkeypatch.setenv(fold.ENV_FOLD, "triton")
    assert fold.describe()["fold"] == "overlay-triton"  # undecided: what the setting points to
    configurator = build_configurator(hf_config("qwen3-next", TinyGDN(head_k_dim=128)))  # a K the kernel takes
    with _published():
        assert keep_kda_only_guard(configurator) is False
    kind, _reason, kernels = fold.chosen()
    assert kind == "overlay-triton" and isinstance(fold.kernel_source(kernels), launch.JitKernels)
    assert not _pending() and not sglang_commits  # its self-check ran the Triton kernel itself
    record = selfcheck.read_records()[0]
    assert record["outcome"] == "passed" and record["warmup"] is None


@pytest.mark.parametrize("release, fold_pools", [("0.5.19", True), ("0.5.20", False), ("0.5.23", False)])
def test_only_a_release_whose_pools_fold_the_raw_window_is_warmed(release, fold_pools):
    """Read from each release's real tree, in a process that imports it: 0.5.20-0.5.22 still have the raw-window
    commit beside the ring's, and 0.5.23 moved the kernels to `linear/` (0.5.19: this venv's own)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    trees = [] if release == "0.5.19" else [str(root / ".venv" / "sglang-releases" / release)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root / "overlay"), *trees]))
    code = "from replayssm_overlay import sglang_warmup; print(sglang_warmup._has_raw_window_fold())"
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == str(fold_pools)


def test_a_ring_release_is_said_to_need_no_warm_up(monkeypatch):
    monkeypatch.setattr(sglang_warmup, "_has_raw_window_fold", lambda: False)
    assert sglang_warmup.warm_before_serving()["outcome"] == "not-needed" and not _pending()
