"""The commit plan on prebuilt binaries (`kernels/commit_plan.py` with `launch.PrebuiltKernels`): one
binary per launch, chosen once when the plan is made; a pool that no binary covers (another dtype, a
misaligned tensor, an uncovered head geometry) is refused when the plan is made, before anything is
launched. CPU only: the binaries' launches are recorded by a stand-in for Triton's CompiledKernel; what
the kernels compute is checked on the GPU (benchmarks/gpu_commit.py)."""

import types

import pytest
import torch

from replayssm_overlay.kernels import commit_plan, loader


def _pool(layers=3, slots=9, hv=16, h=4, v=128, window=4, dim=96, raw=torch.bfloat16, conv=torch.bfloat16):
    """CPU tensors (never launched on): only shapes, strides, dtypes and addresses matter."""
    span = window + 2
    shared = torch.zeros(layers, 8, dim, span, dtype=conv)
    return types.SimpleNamespace(
        temporal=torch.zeros(layers, slots, hv, v, 128), replayssm_rawv=torch.zeros(layers, slots, hv, window, v, dtype=raw),
        replayssm_rawk=torch.zeros(layers, slots, h, window, 128, dtype=raw),
        replayssm_g=torch.zeros(layers, slots, hv, window), replayssm_beta=torch.zeros(layers, slots, hv, window),
        conv=[torch.zeros(layers, slots, dim, 3, dtype=conv)],
        intermediate_conv_window=[shared.as_strided((layers, 8, window, dim, 3), (8 * dim * span, dim * span, 1, span, 1))])


@pytest.mark.parametrize("geometry", [dict(hv=16, h=4, window=4), dict(hv=32, h=16, window=16),
                                      dict(hv=8, h=2, window=2, v=64), dict(hv=64, h=16, window=11)])
def test_one_binary_per_launch_for_every_covered_geometry_and_window(recorded, geometry):
    kernels, calls = recorded
    pool = _pool(**geometry)
    for has_track in (False, True):
        plan = commit_plan.CommitPlan(pool, 5, has_track, kernels)
        idx = torch.zeros(5, dtype=torch.int32)
        plan.run(idx, idx, idx, idx)
        plan.run(idx, idx, idx, idx)
    labels = [spec["label"] for spec, _grid, _args in calls]
    assert len(calls) == 4 and len(set(labels)) == 2  # one launch per commit: with and without a track (int32)
    spec, grid, args = calls[0]
    hv, v = geometry["hv"], geometry.get("v", 128)
    assert grid == (v // 16, 5, hv * 3) and args[0] is pool.temporal and spec["constexprs"]["HAS_TRACK"] is False
    assert args[3] is pool.intermediate_conv_window[0] and args[4] is pool.conv[0]
    n_const = len(spec["constexprs"])  # passed last, after the 13 conv integers
    assert args[-n_const - 17:-n_const - 13] == (hv, hv // geometry["h"], v, geometry["window"])


def test_int64_track_vectors_are_read_as_given_by_their_own_binary_and_others_copied(recorded):
    """The server's track vectors are int64: with a track slot the plan launches the binary built for int64
    track vectors with the tensors themselves (no copy launched); int32 ones, or int64 ones it cannot read
    as given (a strided view), go to the int32 binary, the latter as int32 copies."""
    kernels, calls = recorded
    plan = commit_plan.CommitPlan(_pool(), 5, True, kernels)
    idx = torch.zeros(5, dtype=torch.int32)
    track, steps = torch.arange(5, dtype=torch.int64), torch.zeros(5, dtype=torch.int64)
    plan.run(idx, idx, track, steps)
    plan.run(idx, idx, idx, idx)
    strided = torch.arange(10, dtype=torch.int64)[::2]
    plan.run(idx, idx, strided, steps)
    (wide, _, wide_args), (narrow, _, _), (copied, _, copied_args) = calls
    assert "track vectors int64" in wide["label"] and wide_args[9] is track and wide_args[10] is steps
    assert "int64" not in narrow["label"] and narrow["label"] == copied["label"]
    assert copied_args[9].dtype == copied_args[10].dtype == torch.int32 and torch.equal(copied_args[9], strided.int())


def test_a_folder_without_the_int64_track_binary_still_commits_with_copies(recorded, monkeypatch):
    kernels, calls = recorded
    prepare = kernels.prepare

    def no_int64_binary(fn, grid, args, *rest):
        if args[9].dtype is torch.int64:
            raise loader.ArtifactRefused("no prebuilt binary for int64 track vectors", "rebuild the folder")
        return prepare(fn, grid, args, *rest)

    monkeypatch.setattr(kernels, "prepare", no_int64_binary)
    plan = commit_plan.CommitPlan(_pool(), 5, True, kernels)
    idx, wide = torch.zeros(5, dtype=torch.int32), torch.zeros(5, dtype=torch.int64)
    plan.run(idx, idx, wide, wide)
    ((spec, _grid, args),) = calls
    assert "int64" not in spec["label"] and args[9].dtype == args[10].dtype == torch.int32


@pytest.mark.parametrize("change, match", [
    (dict(raw=torch.float16), "no prebuilt gdn_replayssm_fold_kernel"),  # a ring dtype that was not built
    (dict(conv=torch.float64), "conv dtypes"),
    (dict(v=72), "head dims"),  # V not a multiple of 16
    (dict(hv=12, h=8), "head dims"),  # HV not a multiple of H
])
def test_an_uncovered_pool_is_refused_before_anything_is_launched(recorded, change, match):
    kernels, calls = recorded
    with pytest.raises((loader.ArtifactRefused, ValueError), match=match):
        commit_plan.CommitPlan(_pool(**change), 4, False, kernels)
    assert not calls


def test_a_misaligned_pool_tensor_is_refused_before_anything_is_launched(recorded):
    kernels, calls = recorded
    pool = _pool()
    shifted = torch.zeros(pool.temporal.numel() + 1)[1:].view(pool.temporal.shape)  # 4 bytes off 16-byte alignment
    pool.temporal = shifted
    with pytest.raises(loader.ArtifactRefused, match="no prebuilt gdn_replayssm_fold_kernel"):
        commit_plan.CommitPlan(pool, 4, False, kernels)
    assert not calls


def test_index_tensors_are_used_as_given_or_copied_once_aligned():
    given = torch.arange(6, dtype=torch.int32)
    assert commit_plan.indices(given, -1) is given
    for odd in (given[1:5], given.long(), given[::2]):
        copy = commit_plan.indices(odd, -1)
        assert copy.dtype == torch.int32 and copy.is_contiguous() and copy.data_ptr() % 16 == 0
        assert torch.equal(copy, odd.to(torch.int32))
