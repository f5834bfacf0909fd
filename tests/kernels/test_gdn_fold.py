"""The overlay's GDN ReplaySSM fold against SGLang 0.5.19's decode kernel run token by token.

On the CPU both run under Triton's interpreter, where SGLang's reductions are numpy's: the kernel's
numpy tree must then be bitwise equal to the decode kernel. The GPU tree (the association the compiled
decode kernel has on sm_90) is checked against a numpy emulation of that tree; on a GPU (marked `gpu`)
the GPU tree is compared with the compiled decode kernel itself.
"""

import os

import numpy as np
import pytest
import torch

from benchmarks.fold_cases import decode_reference, make_case, reference_float64
from replayssm_overlay.kernels import gdn_fold

CASES = {
    # name: (L, HV, H, V, N, slots, accept_lens, num_slots, track)
    "window4-track": (2, 4, 2, 32, 4, [3, -1, 0, 5], [4, 2, 1, 3], 7, ([6, 2, -1, 1], [1, 0, -1, 2])),
    "window6-gqa1": (1, 2, 2, 64, 6, [2, 0, -1], [6, 1, 6], 4, None),
}


def _case(name, device="cpu", seed=0):
    L, HV, H, V, N, slots, lens, num_slots, track = CASES[name]
    return make_case(L=L, HV=HV, H=H, K=128, V=V, N=N, slots=slots, accept_lens=lens, num_slots=num_slots,
                     track=track, device=device, seed=seed)


def _fold(case, tree_numpy=None):
    state = case.initial.clone()
    gdn_fold.fold_all_layers(state, case.rawv, case.rawk, case.g, case.beta, case.slots, case.accept_lens,
                             case.track_slots, case.track_steps, tree_numpy=tree_numpy)
    return state


def _written_slots(case):
    slots = {s for s in case.slots.tolist() if s >= 0}
    if case.track_slots is not None:
        slots |= {ts for ts, st, s, n in zip(case.track_slots.tolist(), case.track_steps.tolist(),
                                              case.slots.tolist(), case.accept_lens.tolist())
                  if ts >= 0 and 0 <= st < n and s >= 0}
    return slots


def _check_against(case, state, expected, tracked):
    for slot in {s for s in case.slots.tolist() if s >= 0}:
        assert torch.equal(state[:, slot], expected[:, slot]), f"slot {slot} differs from the reference"
    for row, snapshot in tracked.items():
        track_slot = int(case.track_slots[row])
        assert torch.equal(state[:, track_slot], snapshot), f"track slot {track_slot} of row {row} differs"
    untouched = [s for s in range(state.shape[1]) if s not in _written_slots(case)]
    assert torch.equal(state[:, untouched], case.initial[:, untouched]), "a slot nobody commits was written"


@pytest.mark.skipif(torch.cuda.is_available(), reason="interpreter test (CPU)")
@pytest.mark.parametrize("name", sorted(CASES))
def test_numpy_tree_bitwise_equals_decode_under_interpreter(name):
    case = _case(name, seed=11)
    expected, tracked = decode_reference(case)
    if case.track_slots is not None:
        assert tracked, "the case must exercise a track store"
    _check_against(case, _fold(case, tree_numpy=True), expected, tracked)


def _emulated_gpu_tree(case):
    """Numpy float32 emulation of the decode kernel's sm_90 association (without its fma contraction,
    which the interpreter does not do either): per group of 4 k a left-to-right chain, then pairs i, i^16,
    i^8, i^4, i^2, i^1 of the 32 group sums."""

    def ksum(p):  # p [..., 128] -> [...]
        g = p.reshape(*p.shape[:-1], 32, 4)
        x = ((g[..., 0] + g[..., 1]) + g[..., 2]) + g[..., 3]
        while x.shape[-1] > 1:
            half = x.shape[-1] // 2
            x = x[..., :half] + x[..., half:]
        return x[..., 0]

    state = case.initial.numpy().copy()
    rawk = case.rawk.float().numpy()
    rawv = case.rawv.float().numpy()
    g, beta = case.g.numpy(), case.beta.numpy()
    group = case.HV // case.H
    steps = case.track_steps.tolist() if case.track_steps is not None else None
    for i, (slot, n) in enumerate(zip(case.slots.tolist(), case.accept_lens.tolist())):
        if slot < 0:
            continue
        for t in range(n):
            for layer in range(case.L):
                for hv in range(case.HV):
                    k = rawk[layer, slot, hv // group, t]
                    k = k * (np.float32(1) / np.sqrt(ksum(k * k) + np.float32(1e-6)))  # x * rcp(y): see _l2_normalized
                    h = state[layer, slot, hv] * np.exp(g[layer, slot, hv, t])
                    v = (rawv[layer, slot, hv, t] - ksum(h * k[None, :])) * beta[layer, slot, hv, t]
                    state[layer, slot, hv] = h + k[None, :] * v[:, None]
            if steps is not None and steps[i] == t and case.track_slots[i] >= 0:
                state[:, int(case.track_slots[i])] = state[:, slot]
    return torch.from_numpy(state)


@pytest.mark.skipif(torch.cuda.is_available(), reason="interpreter test (CPU)")
def test_gpu_tree_matches_its_emulation_under_interpreter():
    case = _case("window4-track", seed=5)
    state = _fold(case, tree_numpy=False)
    assert torch.equal(state, _emulated_gpu_tree(case))
    # and the two trees do differ, so the test above tells them apart
    assert not torch.equal(state, _fold(case, tree_numpy=True))


@pytest.mark.skipif(torch.cuda.is_available(), reason="interpreter test (CPU)")
def test_close_to_float64_reference():
    case = _case("window6-gqa1", seed=3)
    state = _fold(case).double()
    ref = reference_float64(case)
    active = [s for s in case.slots.tolist() if s >= 0]
    err = (state[:, active] - ref[:, active]).norm() / ref[:, active].norm()
    assert err < 1e-5, err


def test_unsupported_head_dim_is_refused():
    case = _case("window6-gqa1")
    small = case.initial[..., :64].contiguous()
    with pytest.raises(gdn_fold.FoldShapeNotSupported):
        gdn_fold.fold_all_layers(small, case.rawv, case.rawk[..., :64].contiguous(), case.g, case.beta,
                                 case.slots, case.accept_lens)


def test_aot_specializations_describe_every_runtime_argument():
    specs = gdn_fold.aot_specializations(32, 16, 128, 128, 16)
    assert {s["kernel"].__name__ for s in specs} == {"gdn_replayssm_fold_kernel"}
    for spec in specs:
        names = spec["kernel"].arg_names
        assert set(spec["signature"]) | set(spec["constexprs"]) == set(names)
        assert not set(spec["signature"]) & set(spec["constexprs"])
        assert list(spec["constexprs"]) == names[-len(spec["constexprs"]):]  # launched last
        assert spec["constexprs"]["TREE_NUMPY"] is False
    # per conv dtype: no track slot; a track slot with int32 track vectors; one with int64 (as the server's)
    assert sorted((s["signature"]["conv_dst"], s["constexprs"]["HAS_TRACK"], s["signature"]["track_slots"],
                   s["signature"]["track_steps"]) for s in specs) == [
        (f"*{dtype}", track, index, index) for dtype in ("bf16", "fp16", "fp32")
        for track, index in ((False, "*i32"), (True, "*i32"), (True, "*i64"))]
    assert all(ty == "*i32" for s in specs for name, ty in s["signature"].items() if name in ("slots", "accept_lens"))
    # geometry and window are runtime arguments: every covered shape asks for the same binaries
    assert gdn_fold.aot_specializations(16, 4, 128, 128, 4) == specs
    assert gdn_fold.aot_specializations(32, 16, 64, 128, 16) == []
    assert gdn_fold.aot_specializations(32, 12, 128, 128, 16) == []  # HV not a multiple of H


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(CASES))
def test_gpu_bitwise_equals_decode(name):
    case = _case(name, device="cuda", seed=7)
    expected, tracked = decode_reference(case)
    _check_against(case, _fold(case), expected, tracked)


def test_every_preset_window_and_tensor_parallel_size_is_covered_by_the_same_binaries():
    """Coverage of the default build: every supported model (aot/build.py's presets, from their configs)
    at TP 1, 2, 4, 8 and every window 2..16 asks for the same nine binaries, none of them empty."""
    from replayssm_overlay.aot import build

    expected = gdn_fold.aot_specializations(32, 16, 128, 128, 16)
    assert len(expected) == 9
    for name, preset in build.PRESETS.items():
        for shape in build.shapes_for(preset, build.DEFAULT_TP_SIZES):
            for window in build.DEFAULT_WINDOWS:
                assert gdn_fold.aot_specializations(shape.hv, shape.h, shape.k, shape.v, window) == expected, (
                    name, shape, window)
    assert build.DEFAULT_WINDOWS == tuple(range(2, 17))
