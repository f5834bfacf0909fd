"""The default fold chain without a CUDA kernel: SGLang's own commit, compiled when the configurator lifts the
refusal (`replayssm_overlay.sglang_warmup`), so that no request pays Triton's compile; `RSO_FOLD=triton`
still picks the overlay's Triton kernel, and nothing is warmed for it.

In process on the CPU, under Triton's interpreter (tests/hooks/conftest.py): SGLang 0.5.19's real
configurator and real `HybridReqToTokenPool`, SGLang's real commit (recorded on the way through). Under the
interpreter nothing is compiled, so what is checked is what decides a compile on the GPU: the warm-up ran
SGLang's commit before any commit, on tensors with the strides, inner shapes and dtypes of the pool SGLang
then builds (Triton keys the fold on them), with the server's index dtypes, and wrote nothing. Whether the
server's first commit then finds it compiled is checked on the GPU (tests/kernels/test_selfcheck.py, `gpu`).
"""

import logging

import pytest
import torch

from harness.configurator_probe import build_configurator, hf_config
from harness.context import published
from harness.cpu_redirects import cuda_zeros_to_cpu
from harness.gdn_pool import TinyGDN
from replayssm_overlay import fold, selfcheck, sglang_warmup
from replayssm_overlay.hooks import keep_kda_only_guard
from replayssm_overlay.kernels import launch

MAMBA_SLOTS = 6  # --max-mamba-cache-size: the pool has one slot more
DRAFT_TOKENS = 4
FOLD_MODULE = "sglang.kernels.ops.attention.fla.gdn_replayssm_spec_fold"


@pytest.fixture(autouse=True)
def fresh(monkeypatch, tmp_path):
    """An undecided fold with no prebuilt kernel folder (the default chain's case), nothing checked or warmed."""
    monkeypatch.setattr(fold, "_choice", None)
    monkeypatch.setattr(fold, "_plans", {})
    monkeypatch.setattr(selfcheck, "_checked", {})
    monkeypatch.setattr(sglang_warmup, "_warmed", {})
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
    return published("DFLASH", max_mamba_cache_size=MAMBA_SLOTS, speculative_num_draft_tokens=DRAFT_TOKENS,
                     speculative_eagle_topk=1, **fields)


def _the_pool(configurator):
    """What `_build_hybrid_req_pool` builds for this configurator (its own arguments, SGLang's own class)."""
    from sglang.srt.mem_cache.memory_pool import HybridReqToTokenPool
    from sglang.srt.runtime_context import get_schedule, max_speculative_num_draft_tokens

    params = configurator.mambaish_config.mamba2_cache_params
    with cuda_zeros_to_cpu():
        return HybridReqToTokenPool(
            size=4, mamba_size=get_schedule().max_mamba_cache_size, mamba_spec_state_size=4, max_context_len=64,
            device="cpu", enable_memory_saver=False, cache_params=params, mamba_layer_ids=list(params.layers),
            enable_mamba_extra_buffer=False, speculative_num_draft_tokens=max_speculative_num_draft_tokens(),
            speculative_eagle_topk=1, enable_overlap_schedule=False, enable_linear_replayssm_spec=True)


def _layout(tensor) -> tuple:
    """What Triton specializes a pool tensor on, but the slot count (the stand-in has two slots of memory)."""
    return tensor.dtype, tuple(tensor.shape[2:]), tensor.stride()


def test_without_a_cuda_kernel_sglangs_fold_commits_and_is_compiled_before_serving(sglang_commits, caplog):
    configurator = build_configurator(hf_config("qwen3-next"))
    with _published(), caplog.at_level(logging.INFO, logger=sglang_warmup.logger.name):
        assert keep_kda_only_guard(configurator) is False  # lifted: the server goes on to build its pool
        assert fold.chosen()[0] == "sglang" and "no usable CUDA commit kernel" in fold.chosen()[1]
        warmed = list(sglang_commits)
        pool = _the_pool(configurator)
    (outcome,) = sglang_warmup._warmed.values()
    assert outcome["outcome"] == "compiled", outcome
    assert [r.getMessage() for r in caplog.records if "compiled before serving" in r.getMessage()]

    # before any commit: SGLang's commit, without and with a track slot, with the server's index dtypes
    assert [call["mamba_track_indices"] is not None for call in warmed] == [False, True]
    for call in warmed:
        assert call["state_batch_indices"].dtype == call["accept_lens"].dtype == torch.int32
        assert call["state_batch_indices"].tolist() == [-1, -1]  # padded rows: nothing is committed
        if call["mamba_track_indices"] is not None:
            assert call["mamba_track_indices"].dtype == call["mamba_steps_to_track"].dtype == torch.int64
        # on tensors laid out as the pool's: the fold's constexpr strides, the conv states' strides
        stand_in, real = call["spec_state"], pool.get_speculative_mamba2_params_all_layers()
        for name in ("temporal", "replayssm_rawv", "replayssm_rawk", "replayssm_g", "replayssm_beta"):
            assert _layout(getattr(stand_in, name)) == _layout(getattr(real, name)), name
        assert [_layout(t) for t in stand_in.conv] == [_layout(t) for t in real.conv]
        windows = zip(stand_in.intermediate_conv_window, real.intermediate_conv_window)
        assert all(_layout(s)[:2] == _layout(r)[:2] and s.stride()[1:] == r.stride()[1:] for s, r in windows)
        assert not stand_in.temporal.any() and not stand_in.conv[0].any()  # and nothing was written

    # the server's commits then run SGLang's commit on its pool (no overlay plan, nothing compiled again here)
    state = pool.get_speculative_mamba2_params_all_layers()
    slots, lens = torch.tensor([1, 3], dtype=torch.int32), torch.tensor([2, 4], dtype=torch.int32)
    fold.fold_accepted_prefix(spec_state=state, state_batch_indices=slots, accept_lens=lens)
    assert len(sglang_commits) == 3 and sglang_commits[-1]["spec_state"] is state and not fold._plans
    assert fold.describe()["fold"] == "sglang"


def test_rso_fold_triton_picks_the_jit_twin_and_warms_nothing(monkeypatch, sglang_commits):
    monkeypatch.setenv(fold.ENV_FOLD, "triton")
    assert fold.describe()["fold"] == "overlay-triton"  # undecided: what the setting points to
    configurator = build_configurator(hf_config("qwen3-next", TinyGDN(head_k_dim=128)))  # a K the kernel takes
    with _published():
        assert keep_kda_only_guard(configurator) is False
    kind, _reason, kernels = fold.chosen()
    assert kind == "overlay-triton" and isinstance(fold.kernel_source(kernels), launch.JitKernels)
    assert not sglang_warmup._warmed and not sglang_commits  # its self-check ran the Triton kernel itself
    assert selfcheck.read_records()[0]["outcome"] == "passed"


def test_a_pool_layout_the_configurator_cannot_tell_is_not_warmed_and_the_guard_still_lifts(caplog):
    configurator = build_configurator(hf_config("qwen3-next"))
    with published("DFLASH", speculative_num_draft_tokens=DRAFT_TOKENS), \
            caplog.at_level(logging.INFO, logger=sglang_warmup.logger.name):
        assert keep_kda_only_guard(configurator) is False
    assert "no mamba cache size" in caplog.text and not sglang_warmup._warmed


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
    assert sglang_warmup.warm_before_serving(configurator=None)["outcome"] == "not-needed"
