"""The overlay's GDN ReplaySSM fold against SGLang 0.5.19's decode kernel run token by token.

On the CPU both run under Triton's interpreter, where SGLang's reductions are numpy's: the kernel's
numpy tree must then be bitwise equal to the decode kernel. The GPU tree (the association the compiled
decode kernel has on sm_90) is checked against a numpy emulation of that tree; on a GPU (marked `gpu`)
the GPU tree is compared with the compiled decode kernel itself.
"""

import re

import numpy as np
import pytest
import torch

from benchmarks.fold_cases import decode_reference, make_case, reference_float64
from replayssm_overlay.errors import NotCovered
from replayssm_overlay.kernels import cuda_fold, gdn_fold, nvrtc

CASES = {
    # name: (L, HV, H, V, N, slots, accept_lens, num_slots, track)
    "window4-track": (2, 4, 2, 32, 4, [3, -1, 0, 5], [4, 2, 1, 3], 7, ([6, 2, -1, 1], [1, 0, -1, 2])),
    "window6-gqa1": (1, 2, 2, 64, 6, [2, 0, -1], [6, 1, 6], 4, None),
}


def _case(name, device="cpu", seed=0):
    L, HV, H, V, N, slots, lens, num_slots, track = CASES[name]
    return make_case(
        L=L,
        HV=HV,
        H=H,
        K=128,
        V=V,
        N=N,
        slots=slots,
        accept_lens=lens,
        num_slots=num_slots,
        track=track,
        device=device,
        seed=seed,
    )


def _fold(case, tree_numpy=None):
    state = case.initial.clone()
    gdn_fold.fold_all_layers(
        state,
        case.rawv,
        case.rawk,
        case.g,
        case.beta,
        case.slots,
        case.accept_lens,
        case.track_slots,
        case.track_steps,
        tree_numpy=tree_numpy,
    )
    return state


def _written_slots(case):
    slots = {s for s in case.slots.tolist() if s >= 0}
    if case.track_slots is not None:
        slots |= {
            ts
            for ts, st, s, n in zip(
                case.track_slots.tolist(), case.track_steps.tolist(), case.slots.tolist(), case.accept_lens.tolist()
            )
            if ts >= 0 and 0 <= st < n and s >= 0
        }
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
    with pytest.raises(NotCovered):
        gdn_fold.fold_all_layers(
            small, case.rawv, case.rawk[..., :64].contiguous(), case.g, case.beta, case.slots, case.accept_lens
        )


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(CASES))
def test_gpu_bitwise_equals_decode(name):
    case = _case(name, device="cuda", seed=7)
    expected, tracked = decode_reference(case)
    _check_against(case, _fold(case), expected, tracked)


# Every supported model's GDN heads (HV, H, K, V) from its config.json (linear_num_value_heads,
# linear_num_key_heads, linear_key_head_dim, linear_value_head_dim; sources: aot/README.md)
MODELS = {
    "qwen3-next-80b-a3b": (32, 16, 128, 128),
    "qwen3.5-35b-a3b": (32, 16, 128, 128),
    "qwen3.5-122b-a10b": (64, 16, 128, 128),
    "qwen3.5-397b-a17b": (64, 16, 128, 128),
    "qwen3.5-27b": (48, 16, 128, 128),
}


def test_every_supported_model_tensor_parallel_size_and_window_is_covered_by_both_kernels():
    """Per rank at TP 1, 2, 4, 8 (HV/tp value heads, H/tp key heads) and every window 2..16: the Triton
    kernel's checks pass and the CUDA kernel's (its host checks, and V a multiple of a team's columns, the
    warps of gdn_fold.cu's widest team), so no supported model falls back to SGLang's fold for its shape."""
    define = {m.group(1): int(m.group(2)) for m in re.finditer(r"#define (\w+) (\d+)", nvrtc.SOURCE.read_text())}
    team = max(define["TEAM"], define["TEAM_TRACK"])
    meta = dict(device="meta")
    for name, (hv, h, k, v) in MODELS.items():
        for tp in (1, 2, 4, 8):
            assert hv % tp == 0 and h % tp == 0, (name, tp)
            for window in range(2, 17):
                state = torch.empty(1, 2, hv // tp, v, k, **meta)
                rawv = torch.empty(1, 2, hv // tp, window, v, dtype=torch.bfloat16, **meta)
                rawk = torch.empty(1, 2, h // tp, window, k, dtype=torch.bfloat16, **meta)
                gate = torch.empty(1, 2, hv // tp, window, **meta)
                gdn_fold.check_shapes(state, rawv, rawk, gate, gate)
                cuda_fold._covers((state, rawv, rawk, None, None, gate, gate))
                assert v % (cuda_fold.COLUMNS * team) == 0, (name, tp, window)
