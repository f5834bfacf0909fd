"""The node's self-check before serving (`replayssm_overlay.selfcheck`): the chosen fold against SGLang's
recurrence replayed token by token, and the fall-back to SGLang's fold when they differ.

On the CPU both run under Triton's interpreter, where the overlay's fold is bitwise equal to the decode
kernel only with its numpy tree (TREE_NUMPY): planting the other tree (the sm_90 one) is the deliberate
reordering the check must catch. On a GPU (marked `gpu`) the plant is the numpy tree instead. SGLang's own
fold is replaced by a recorder where a test reaches it (a stand-in, test-only): on the CPU it needs a
patched interpreter, and only the switch to it is under test.
"""

import json
import logging
import os
import sys
import types

import pytest
import torch

from replayssm_overlay import fold, records, selfcheck
from replayssm_overlay.kernels import launch

SMALL = selfcheck.Geometry(num_v_heads=2, num_k_heads=1, head_v_dim=32, head_k_dim=128, window=4,
                           state_dtype="float32", ring_dtype="bfloat16")


@pytest.fixture(autouse=True)
def overlay_fold(monkeypatch, tmp_path):
    """A fresh fold decision in RSO_FOLD=triton mode (the overlay's Triton kernel: the interpreter on the
    CPU), records in the test's tmp, SGLang's recurrence importable on a GPU machine without sglang."""
    monkeypatch.setattr(fold, "_choice", None)
    monkeypatch.setattr(selfcheck, "_checked", {})
    monkeypatch.setenv(fold.ENV_FOLD, "triton")
    monkeypatch.setenv("RSO_KERNEL_DIR", str(tmp_path / "no-kernels"))
    monkeypatch.setenv(records.ENV_DIR, str(tmp_path / "state"))
    if torch.cuda.is_available():
        from benchmarks.fold_cases import sglang_module

        sglang_module("fla.fused_sigmoid_gating_recurrent")


def _plant_the_other_tree(monkeypatch):
    """The JIT commit compiled with the other reduction tree than the reference has on this platform."""
    monkeypatch.setattr(launch.JitKernels, "tree_numpy", property(lambda self: not launch.interpreting()))


def _only_record():
    (record,) = selfcheck.read_records()
    return record


def test_the_overlays_fold_passes_and_stays_chosen(caplog):
    with caplog.at_level(logging.INFO, logger="replayssm_overlay.selfcheck"):
        record = selfcheck.check_before_serving(SMALL, seed=1)
    assert record["outcome"] == "passed", record
    assert fold.describe()["fold"] == "overlay-triton"
    assert [r.levelno for r in caplog.records if r.name.startswith("replayssm_overlay")] == [logging.INFO]
    stored = _only_record()
    assert stored["outcome"] == "passed" and stored["pid"] == os.getpid() and stored["alive"]
    assert stored["geometry"]["window"] == SMALL.window and stored["fold"]["fold"] == "overlay-triton"


def test_a_planted_reordered_tree_is_caught_and_falls_back_to_sglangs_fold(monkeypatch, caplog):
    _plant_the_other_tree(monkeypatch)
    with caplog.at_level(logging.INFO):
        record = selfcheck.check_before_serving(SMALL, seed=2)
    assert record["outcome"] == "mismatch", record
    assert "not bitwise SGLang's recurrence" in record["detail"] and "differs" in record["detail"]
    chosen = fold.describe()
    assert chosen["fold"] == "sglang" and "self-check" in chosen["reason"]
    errors = [r for r in caplog.records if r.levelno == logging.ERROR and r.name.startswith("replayssm_overlay")]
    assert len(errors) == 1 and "switching to SGLang's fold" in errors[0].getMessage()
    switches = [r for r in caplog.records if r.name == "replayssm_overlay.fold" and "switching" in r.getMessage()]
    assert len(switches) == 1
    assert _only_record()["outcome"] == "mismatch"

    calls = []
    stand_in = types.ModuleType("sglang.kernels.ops.attention.fla.gdn_replayssm_spec_fold")
    stand_in.commit_gdn_replayssm_fold_after_verify = lambda **kw: calls.append(kw)
    monkeypatch.setitem(sys.modules, stand_in.__name__, stand_in)
    state = types.SimpleNamespace(temporal=None, replayssm_rawv=None, replayssm_rawk=None, replayssm_g=None,
                                  replayssm_beta=None, conv=[], intermediate_conv_window=[])
    lens = torch.tensor([1], dtype=torch.int32)
    fold.fold_accepted_prefix(spec_state=state, state_batch_indices=lens, accept_lens=lens,
                              last_correct_step_indices=lens - 1)
    assert len(calls) == 1, "the commit after a failed self-check must run SGLang's fold"


def test_a_non_fp32_state_uses_sglangs_fold_and_says_so(caplog):
    bf16 = selfcheck.Geometry(**{**SMALL.__dict__, "state_dtype": "bfloat16"})
    with caplog.at_level(logging.WARNING, logger="replayssm_overlay.fold"):
        record = selfcheck.check_before_serving(bf16, seed=3)
    assert record["outcome"] == "sglang-fold" and "bfloat16" in record["detail"]
    assert fold.describe()["fold"] == "sglang"
    assert len([r for r in caplog.records if "bfloat16" in r.getMessage()]) == 1


def test_a_check_that_cannot_run_falls_back():
    record = selfcheck.check_before_serving(selfcheck.Geometry(**{**SMALL.__dict__, "window": None}), seed=4)
    assert record["outcome"] == "error" and "could not run" in record["detail"]
    assert "no verify window" in record["detail"]
    assert fold.describe()["fold"] == "sglang"


def test_a_shape_the_overlay_does_not_cover_uses_sglangs_fold():
    record = selfcheck.check_before_serving(selfcheck.Geometry(**{**SMALL.__dict__, "head_k_dim": 64}), seed=6)
    assert record["outcome"] == "not-covered" and "K=64" in record["detail"]
    assert fold.describe()["fold"] == "sglang"


def test_the_check_runs_once_per_geometry(monkeypatch):
    first = selfcheck.check_before_serving(SMALL, seed=7)
    monkeypatch.setattr(selfcheck, "_compare", lambda *a: pytest.fail("checked twice"))
    assert selfcheck.check_before_serving(SMALL, seed=8) is first


def test_sglangs_fold_needs_no_check(monkeypatch):
    monkeypatch.setenv(fold.ENV_FOLD, "sglang")
    record = selfcheck.check_before_serving(SMALL, seed=5)
    assert record["outcome"] == "sglang-fold" and "nothing to check" in record["detail"]


def test_records_of_dead_processes_and_unreadable_files_are_listed(tmp_path):
    folder = tmp_path / "records"
    folder.mkdir()
    (folder / "selfcheck-999999999.json").write_text(json.dumps({"pid": 999999999, "time": 2, "outcome": "passed"}))
    (folder / "selfcheck-1.json").write_text("{not json")
    records = selfcheck.read_records(folder)
    assert records[0]["pid"] == 999999999 and records[0]["alive"] is False
    assert "unreadable" in records[1]["problem"]
    assert selfcheck.read_records(tmp_path / "absent") == []


GPU_TARGET = selfcheck.Geometry(num_v_heads=32, num_k_heads=16, head_v_dim=128, head_k_dim=128, window=16,
                                state_dtype="float32", ring_dtype="bfloat16")


@pytest.mark.gpu
def test_gpu_the_overlays_fold_passes_at_the_target_shape():
    assert selfcheck.check_before_serving(GPU_TARGET, seed=11)["outcome"] == "passed"


@pytest.mark.gpu
def test_gpu_a_planted_reordered_tree_is_caught(monkeypatch):
    _plant_the_other_tree(monkeypatch)
    assert selfcheck.check_before_serving(GPU_TARGET, seed=12)["outcome"] == "mismatch"
    assert fold.describe()["fold"] == "sglang"
