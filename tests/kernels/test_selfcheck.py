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

from replayssm_overlay import fold, protocol, records, selfcheck
from replayssm_overlay.errors import NotCovered
from replayssm_overlay.kernels import cuda_fold, gdn_fold, launch, nvrtc

SMALL = selfcheck.Geometry(
    num_v_heads=2, num_k_heads=1, head_v_dim=32, head_k_dim=128, window=4, state_dtype="float32", ring_dtype="bfloat16"
)


@pytest.fixture(autouse=True)
def overlay_fold(monkeypatch, tmp_path):
    """A fresh fold decision in RSO_FOLD=triton mode (the overlay's Triton kernel: the interpreter on the
    CPU), records in the test's tmp, the raw-window fold's protocol (0.5.19's), SGLang's recurrence importable
    on a GPU machine without sglang."""
    monkeypatch.setattr(fold, "_choice", None)
    monkeypatch.setattr(selfcheck, "_checked", {})
    monkeypatch.setenv(fold.ENV_FOLD, "triton")
    monkeypatch.setenv("RSO_KERNEL_DIR", str(tmp_path / "no-kernels"))
    monkeypatch.setenv(records.ENV_DIR, str(tmp_path / "state"))
    monkeypatch.setattr(protocol, "installed", lambda: protocol.FOLD)  # the fold's check, whatever SGLang is here
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
    state = types.SimpleNamespace(
        temporal=None,
        replayssm_rawv=None,
        replayssm_rawk=None,
        replayssm_g=None,
        replayssm_beta=None,
        conv=[],
        intermediate_conv_window=[],
    )
    lens = torch.tensor([1], dtype=torch.int32)
    fold.fold_accepted_prefix(
        spec_state=state, state_batch_indices=lens, accept_lens=lens, last_correct_step_indices=lens - 1
    )
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


def test_the_record_says_what_commits_and_what_is_bitwise():
    record = selfcheck.check_before_serving(SMALL, seed=9, protocol_name=protocol.FOLD)
    assert record["protocol"] == protocol.FOLD and record["commit"] == "the overlay's fold (overlay-triton)"
    assert record["exactness"]["bitwise_equal_to"] == "replayssm-off-state"
    assert any("track slot" in c for c in record["exactness"]["caveats"])


def test_a_ring_release_checks_nothing_and_records_sglangs_mtp_commit(monkeypatch, caplog):
    """The ring releases (0.5.20 on): the overlay's fold never commits, so nothing is compiled or compared, the fold
    choice is left alone, and the record says that SGLang's MTP commit commits."""
    monkeypatch.setattr(selfcheck, "_compare", lambda *a: pytest.fail("the overlay's fold checked on a ring release"))
    monkeypatch.setattr(fold, "chosen", lambda: pytest.fail("a fold chosen on a ring release"))
    with caplog.at_level(logging.INFO):
        record = selfcheck.check_before_serving(SMALL, seed=10, protocol_name=protocol.RING)
    assert record["outcome"] == "ring-commit" and protocol.MTP_COMMIT in record["detail"]
    assert record["fold"]["fold"] == "none" and protocol.MTP_COMMIT in record["commit"]
    assert record["exactness"]["bitwise_equal_to"] == "sglang-mtp-commit" and record["exactness"]["caveats"] == []
    assert not [r for r in caplog.records if "switching" in r.getMessage()]
    assert _only_record()["outcome"] == "ring-commit"


@pytest.mark.parametrize("ring_dtype", ["float16", "float32"])
def test_the_triton_kernel_reads_float16_and_float32_rings_bitwise(ring_dtype):
    """SGLANG_MAMBA_CONV_DTYPE sets the rings' dtype; the Triton kernel converts each load to fp32, as the
    recurrence does, so its check passes."""
    record = selfcheck.check_before_serving(
        selfcheck.Geometry(**{**SMALL.__dict__, "ring_dtype": ring_dtype}), seed=13, protocol_name=protocol.FOLD
    )
    assert record["outcome"] == "passed", record


def test_the_triton_kernel_refuses_a_ring_dtype_it_does_not_read():
    state, rawv, rawk, g, beta = (
        torch.zeros(1, 2, 2, 32, 128),
        torch.zeros(1, 2, 2, 4, 32, dtype=torch.int16),
        torch.zeros(1, 2, 1, 4, 128, dtype=torch.int16),
        torch.zeros(1, 2, 2, 4),
        torch.zeros(1, 2, 2, 4),
    )
    with pytest.raises(NotCovered, match="raw ring dtypes"):
        gdn_fold.check_shapes(state, rawv, rawk, g, beta)


@pytest.mark.parametrize("ring_dtype", ["float16", "float32"])
def test_the_cuda_kernel_does_not_cover_float16_or_float32_rings_and_says_so(ring_dtype, monkeypatch):
    """It reads the rings as bf16 pairs: such a pool is "not-covered" (SGLang's fold commits it), refused
    before the binary loads, not a "mismatch" after a launch (nor an "error" where no GPU loads it)."""
    monkeypatch.setattr(fold, "_choice", ("overlay-cuda", "test", cuda_fold.CudaKernels(b"not a cubin", "test")))
    geometry = selfcheck.Geometry(**{**SMALL.__dict__, "head_v_dim": 64, "ring_dtype": ring_dtype})
    record = selfcheck.check_before_serving(geometry, seed=14, protocol_name=protocol.FOLD)
    assert record["outcome"] == "not-covered", record
    assert f"torch.{ring_dtype}" in record["detail"] and "bfloat16 rings only" in record["detail"]
    assert fold.describe()["fold"] == "sglang"


class _StagedStandIn(launch.JitKernels):
    """Test-only stand-in for the CUDA kernel's launch source on the CPU: Triton's kernel under the
    interpreter, with the CUDA source's `pinned(grid)`. `fault_when_staged`: its launches on a pinned grid
    reduce with the other tree, a fault that only a block folding several items would show."""

    kind = "overlay-cuda"

    def __init__(self, grid="auto", fault_when_staged=False, launched=None):
        self.grid, self.fault, self.launched = grid, fault_when_staged, [] if launched is None else launched

    @property
    def tree_numpy(self) -> bool:
        return launch.interpreting() != (self.fault and self.grid != "auto")

    def pinned(self, grid):
        return _StagedStandIn(grid, self.fault, self.launched)

    def prepare(self, fn, grid, args, constexprs, options, device_index=0):
        self.launched.append(self.grid)
        return super().prepare(fn, grid, args, constexprs, options, device_index)


def test_the_cuda_kernel_is_also_checked_on_a_grid_whose_blocks_stage_their_next_item(monkeypatch):
    source = _StagedStandIn()
    monkeypatch.setattr(fold, "_choice", ("overlay-cuda", "stand-in", source))
    record = selfcheck.check_before_serving(SMALL, seed=15, protocol_name=protocol.FOLD)
    assert record["outcome"] == "passed", record
    half = len(source.launched) // 2  # plans without and with a track slot, on each grid
    assert source.launched == ["auto"] * half + [selfcheck.STAGING_GRID] * half and half >= 2
    assert record["staging_grid"] == selfcheck.STAGING_GRID and record["staging_seconds"] >= 0


def test_a_fault_only_the_staging_path_has_is_caught(monkeypatch):
    monkeypatch.setattr(fold, "_choice", ("overlay-cuda", "stand-in", _StagedStandIn(fault_when_staged=True)))
    record = selfcheck.check_before_serving(SMALL, seed=16, protocol_name=protocol.FOLD)
    assert record["outcome"] == "mismatch" and f"pinned {selfcheck.STAGING_GRID} grid" in record["detail"], record
    assert fold.describe()["fold"] == "sglang"


#: per-rank shapes of the supported models at TP 1-8 (HV, H, V) and their windows: the check's geometry
CHECKED_SHAPES = [(hv, max(1, hv // 2), 128, window) for hv in (4, 8, 16, 32, 64) for window in (2, 4, 8, 16)]


@pytest.mark.parametrize("has_track", [False, True])
@pytest.mark.parametrize("hv,h,v,window", CHECKED_SHAPES)
def test_on_the_staging_grid_every_block_of_the_checks_commit_folds_several_items(hv, h, v, window, has_track):
    """What makes the check run `has_next` in gdn_fold.cu whatever grid serving picks for its batch: on the
    staging grid each block stages its next item at every item but its last. The check's pool has two
    layers and a conv state of more than one 512-element conv unit per slot."""
    layers, slots = selfcheck.LAYERS, selfcheck.REQUESTS - len(selfcheck.PADDED_ROWS) + 2
    state = torch.zeros(layers, slots, hv, v, 128)
    rawv = torch.zeros(layers, slots, hv, window, v, dtype=torch.bfloat16)
    rawk = torch.zeros(layers, slots, h, window, 128, dtype=torch.bfloat16)
    g = torch.zeros(layers, slots, hv, window)
    conv = torch.zeros(layers, slots, selfcheck.CONV_DIM, selfcheck.CONV_WIDTH, dtype=torch.bfloat16)
    windows = torch.zeros(
        layers, selfcheck.REQUESTS, window, selfcheck.CONV_DIM, selfcheck.CONV_WIDTH, dtype=torch.bfloat16
    )
    batch = torch.zeros(selfcheck.REQUESTS, dtype=torch.int32)
    src, dst, conv_ints = gdn_fold.conv_args(state, conv, windows)
    args = (
        state,
        rawv,
        rawk,
        src,
        dst,
        g,
        g,
        batch,
        batch,
        batch,
        batch,
        *gdn_fold.runtime_args(state, rawv, rawk, g, g),
        *conv_ints,
    )
    packed = cuda_fold.pack(args, selfcheck.REQUESTS)
    assert packed.layers == 2 and packed.conv_elems > cuda_fold.CONV_CHUNK
    team = 4
    work = cuda_fold.work_units(packed, team)
    staged = cuda_fold.grid_size(packed, team, 132 * 4, has_track, selfcheck.STAGING_GRID)  # an H100's SMs
    assert staged == cuda_fold.STRIDED_BLOCKS and work >= 2 * staged, (work, staged)


def test_the_checks_batch_is_a_padded_batch_of_eight_on_two_layers():
    window = selfcheck._verified_window(SMALL, torch.device("cpu"), 3)
    slots, lens = window.slots.tolist(), window.accept_lens.tolist()
    assert len(slots) == selfcheck.REQUESTS >= 8 and window.initial.shape[0] == selfcheck.LAYERS == 2
    assert [row for row, slot in enumerate(slots) if slot < 0] == list(selfcheck.PADDED_ROWS) != []
    assert all(lens[row] == 0 for row in selfcheck.PADDED_ROWS) and lens[0] == SMALL.window
    assert sorted(s for s in slots if s >= 0) == list(range(selfcheck.REQUESTS - len(selfcheck.PADDED_ROWS)))
    assert selfcheck.CONV_DIM * selfcheck.CONV_WIDTH > cuda_fold.CONV_CHUNK
    assert window.conv_windows.shape[:2] == (selfcheck.LAYERS, selfcheck.REQUESTS)


def test_records_of_dead_processes_and_unreadable_files_are_listed(tmp_path):
    folder = tmp_path / "records"
    folder.mkdir()
    (folder / "selfcheck-999999999.json").write_text(json.dumps({"pid": 999999999, "time": 2, "outcome": "passed"}))
    (folder / "selfcheck-1.json").write_text("{not json")
    records = selfcheck.read_records(folder)
    assert records[0]["pid"] == 999999999 and records[0]["alive"] is False
    assert "unreadable" in records[1]["problem"]
    assert selfcheck.read_records(tmp_path / "absent") == []


GPU_TARGET = selfcheck.Geometry(
    num_v_heads=32,
    num_k_heads=16,
    head_v_dim=128,
    head_k_dim=128,
    window=16,
    state_dtype="float32",
    ring_dtype="bfloat16",
)


@pytest.mark.gpu
def test_gpu_the_overlays_fold_passes_at_the_target_shape():
    assert selfcheck.check_before_serving(GPU_TARGET, seed=11)["outcome"] == "passed"


@pytest.mark.gpu
def test_gpu_a_planted_reordered_tree_is_caught(monkeypatch):
    _plant_the_other_tree(monkeypatch)
    assert selfcheck.check_before_serving(GPU_TARGET, seed=12)["outcome"] == "mismatch"
    assert fold.describe()["fold"] == "sglang"


def _cuda_kernel_chosen(monkeypatch, source: str | None = None) -> cuda_fold.CudaKernels:
    """The CUDA kernel built here with NVRTC (from `source`, else gdn_fold.cu) as this process's fold."""
    cubin = nvrtc.compile_cubin(source, [])[0] if source else nvrtc.build_fold()[0]
    kernels = cuda_fold.CudaKernels(cubin, "nvrtc")
    monkeypatch.setattr(fold, "_choice", ("overlay-cuda", "nvrtc", kernels))
    return kernels


@pytest.mark.gpu
def test_gpu_the_cuda_kernel_passes_on_both_grids_and_the_cost_is_printed(monkeypatch, capsys):
    _cuda_kernel_chosen(monkeypatch)
    check = selfcheck.check_before_serving(GPU_TARGET, seed=17)  # compiles SGLang's recurrence (Triton's cache)
    monkeypatch.setattr(selfcheck, "_checked", {})
    record = selfcheck.check_before_serving(GPU_TARGET, seed=18)  # as a restart with a warm cache
    assert check["outcome"] == record["outcome"] == "passed", record
    assert record["staging_grid"] == selfcheck.STAGING_GRID
    with capsys.disabled():
        print(
            f"\nself-check at HV=32 H=16 K=V=128 T=16 (CUDA kernel, {torch.cuda.get_device_name()}): "
            f"{record['seconds']:.3f} s with a warm Triton cache ({check['seconds']:.3f} s cold), of which the "
            f"staging grid {record['staging_seconds'] * 1e3:.1f} ms"
        )


#: gdn_fold.cu's normalization of a block's next item; planted away, only a block with a next item folds wrong
NEXT_ITEM_NORMALIZED = "    if (has_next)\n      normalize_share<NT, HELD>(a, next, share,"


@pytest.mark.gpu
def test_gpu_a_fault_only_in_the_staging_path_is_caught(monkeypatch):
    """The kernel built with the next item's k never normalized: a block that folds more than one item
    commits wrong, and the check (on serving's grid where that already has such blocks, else on the
    pinned staging grid) says so and falls back."""
    source = nvrtc.SOURCE.read_text()
    assert source.count(NEXT_ITEM_NORMALIZED) == 1
    never = NEXT_ITEM_NORMALIZED.replace("(has_next)", "(has_next && a.batch < 0)")
    planted = source.replace(NEXT_ITEM_NORMALIZED, never)
    _cuda_kernel_chosen(monkeypatch, planted)
    record = selfcheck.check_before_serving(GPU_TARGET, seed=19)
    assert record["outcome"] == "mismatch" and "differs" in record["detail"], record
    assert fold.describe()["fold"] == "sglang"


@pytest.mark.gpu
@pytest.mark.parametrize("ring_dtype", ["float16", "float32"])
def test_gpu_rings_of_the_other_conv_dtypes(ring_dtype, monkeypatch):
    """SGLANG_MAMBA_CONV_DTYPE=float16 or float32: the Triton kernel (JIT) commits them bitwise; the CUDA
    kernel, which reads bf16 rings only, is "not-covered" and SGLang's fold commits."""
    geometry = selfcheck.Geometry(**{**GPU_TARGET.__dict__, "ring_dtype": ring_dtype})
    assert selfcheck.check_before_serving(geometry, seed=20)["outcome"] == "passed"
    monkeypatch.setattr(selfcheck, "_checked", {})
    _cuda_kernel_chosen(monkeypatch)
    record = selfcheck.check_before_serving(geometry, seed=21)
    assert record["outcome"] == "not-covered" and "bfloat16 rings only" in record["detail"], record
    assert fold.describe()["fold"] == "sglang"
