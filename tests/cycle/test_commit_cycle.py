"""The verify -> commit cycle on SGLang 0.5.19's real pool and kernels, with the overlay's hooks called
directly (as the patched methods' first line calls them), under Triton's CPU interpreter.

Stand-ins (harness.stand_ins) replace only the GPU-server objects around the commit: the worker, the
hybrid backend shell and the schedule batch. The pool, the verify ring-write, the fold, the conv
rollback and the decode reference are SGLang's own code.
"""

import random

import pytest
import torch

from harness import stand_ins
from harness.context import published
from harness.cycle import SCENARIOS, Scenario, dflash_track_steps, hook_commit, run_cycle
from harness.gdn_pool import TinyGDN, build_pool
from replayssm_overlay.hooks import dflash_commit, dspark_commit
from replayssm_overlay.hooks.commit import steps_to_track

# Every scenario also runs through the patched worker methods in test_patched_cycle.py; here the hooks
# are called directly on the ones that exercise the most paths (mixed lengths, padding, tracking).
DIRECT = [s for s in SCENARIOS if s.name in ("mixed lengths", "padded rows") or (s.tracked and s.algorithm == "DFLASH")]


@pytest.mark.parametrize("scenario", DIRECT, ids=lambda s: f"{s.name}-{s.algorithm}")
def test_committed_state_equals_token_by_token_decode(scenario):
    result = run_cycle(scenario, hook_commit(scenario.algorithm), seed=1)
    assert result.committed, result.error
    assert result.checks and all(result.checks.values()), result.checks


@pytest.mark.parametrize("ring_len", [2, 4])
def test_the_fold_window_is_the_verify_window_whatever_the_ring_length(ring_len):
    """0.5.19 is not concerned by the ring-fit rule of the ring releases (`hooks/ring_fit.py`): its GDN
    fold pool sizes the raw window to the verify window N, not to `--linear-replayssm-cache-len` L, and the
    commit stays bitwise with L < N."""
    scenario = next(s for s in SCENARIOS if s.tracked and s.algorithm == "DFLASH")  # N = 6, track slots

    def short_ring(model, *, slots, draft_tokens):
        pool = build_pool(model, slots=slots, draft_tokens=draft_tokens, ring_len=ring_len)
        assert pool.get_speculative_mamba2_params_all_layers().replayssm_rawk.shape[3] == draft_tokens > ring_len
        return pool

    result = run_cycle(scenario, hook_commit(scenario.algorithm), seed=3, pool_builder=short_ring)
    assert result.committed and result.checks and all(result.checks.values()), result.checks


def test_the_comparison_catches_a_commit_one_token_short():
    """Negative control: folding one accepted token fewer must not pass as bitwise equal."""
    scenario = Scenario("all accepted", "DFLASH", 4, (4, 4, 4))
    commit = hook_commit("DFLASH")

    def short_commit(worker, batch, pre, post, commit_lens):
        commit(worker, batch, pre, post - 1, commit_lens - 1)

    result = run_cycle(scenario, short_commit, seed=2)
    assert result.committed
    assert result.checks["state == decode"] is False and result.checks["conv == decode"] is False


def test_track_steps_match_the_crossing_step():
    rng = random.Random(3)
    for _ in range(200):
        n = rng.randint(1, 8)
        scenario = Scenario(
            "random",
            "DFLASH",
            8,
            tuple(rng.randint(1, n) for _ in range(4)),
            seq_lens_pre=tuple(rng.randint(1, 40) for _ in range(4)),
        )
        pre = torch.tensor(scenario.seq_lens_pre)
        lens = torch.tensor(scenario.commit_lens, dtype=torch.int32)
        assert steps_to_track(pre, pre + lens, lens, 8).tolist() == scenario.expected_track_steps(8)


def test_stock_dflash_never_tracks_and_the_overlay_does():
    tracked = next(s for s in SCENARIOS if s.tracked and s.algorithm == "DFLASH")
    steps = dflash_track_steps(tracked)
    assert steps["sglang_dflash_body"] == [-1] * len(tracked.commit_lens)
    assert steps["overlay"] == steps["expected"] and max(steps["expected"]) >= 0


def _commit_inputs(pool, bs=2):
    slots = torch.arange(bs, dtype=torch.int32)
    worker = stand_ins.spec_worker(pool, stand_ins.hybrid_backend(pool, slots))
    batch = stand_ins.schedule_batch(torch.arange(bs), torch.full((bs,), 9))
    return worker, batch, batch.seq_lens.clone(), torch.ones(bs, dtype=torch.int32)


def _both_hooks_decline(worker, batch, pre, lens):
    with published("DSPARK", speculative_eagle_topk=1):
        return not dflash_commit(worker, batch, pre, lens) and not dspark_commit(worker, batch, pre, pre + lens, lens)


def test_hooks_decline_a_pool_without_replayssm():
    pool = build_pool(TinyGDN(), slots=3, draft_tokens=4, replayssm_spec=False)
    assert _both_hooks_decline(*_commit_inputs(pool))


def test_hooks_decline_a_kda_replayssm_pool():
    pool = build_pool(TinyGDN(), slots=3, draft_tokens=4)
    pool.mamba_pool.replayssm_is_kda = True  # the attribute a KDA ReplaySSM pool carries
    assert _both_hooks_decline(*_commit_inputs(pool))


def test_hooks_decline_when_sglang_needs_no_mamba_commit():
    pool = build_pool(TinyGDN(), slots=3, draft_tokens=4)
    worker, batch, pre, lens = _commit_inputs(pool)
    worker._need_mamba_verify_commit = False
    assert _both_hooks_decline(worker, batch, pre, lens)


def test_hooks_decline_a_backend_without_a_mamba_pool():
    worker, batch, pre, lens = _commit_inputs(pool=None)
    worker.target_worker.model_runner.attn_backend = stand_ins.recording_backend()
    assert _both_hooks_decline(worker, batch, pre, lens)


def test_hooks_take_a_gdn_replayssm_fold_pool():
    """Positive control for the declines above: the same inputs on a GDN fold pool are taken."""
    pool = build_pool(TinyGDN(), slots=3, draft_tokens=4)
    worker, batch, pre, lens = _commit_inputs(pool)
    with published("DFLASH"):
        assert dflash_commit(worker, batch, pre, lens) is True
