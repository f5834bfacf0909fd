"""`fold.fold_accepted_prefix` picks the overlay's fold or SGLang's, once, and says which in `describe()`.

SGLang's conv-window scatter refuses CPU tensors and SGLang's own fold needs a patched interpreter on the
CPU, so where a test reaches them it records the call instead (stand-ins, test-only); the temporal state
the overlay's kernel commits is the real thing, checked against SGLang's decode kernel.
"""

import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

from benchmarks.fold_cases import decode_reference, make_case
from replayssm_overlay import fold
from replayssm_overlay.errors import OverlayError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def fresh_choice(monkeypatch):
    monkeypatch.setattr(fold, "_choice", None)
    monkeypatch.delenv(fold.ENV_FOLD, raising=False)
    monkeypatch.setenv("RSO_KERNEL_DIR", "/nonexistent/replayssm-overlay-kernels")
    yield


def _recorders(monkeypatch):
    calls = {"conv": [], "sglang": []}
    monkeypatch.setattr(fold, "_conv_rollback", lambda *args: calls["conv"].append(args))
    module = types.ModuleType("sglang.kernels.ops.attention.fla.gdn_replayssm_spec_fold")
    module.commit_gdn_replayssm_fold_after_verify = lambda **kw: calls["sglang"].append(kw)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return calls


def _spec_state(case):
    return types.SimpleNamespace(temporal=case.temporal, replayssm_rawv=case.rawv, replayssm_rawk=case.rawk,
                                 replayssm_g=case.g, replayssm_beta=case.beta, conv=[], intermediate_conv_window=[])


def _commit(case):
    fold.fold_accepted_prefix(spec_state=_spec_state(case), state_batch_indices=case.slots,
                              accept_lens=case.accept_lens, last_correct_step_indices=case.accept_lens.long() - 1,
                              mamba_track_indices=case.track_slots, mamba_steps_to_track=case.track_steps)


def test_describe_imports_no_torch_and_defaults_to_sglang_without_artifacts():
    env = dict(os.environ, PYTHONPATH=f"{ROOT / 'overlay'}", RSO_KERNEL_DIR="/nonexistent/k")
    env.pop(fold.ENV_FOLD, None)
    code = ("import json, sys; from replayssm_overlay import fold; d = fold.describe(); "
            "assert 'torch' not in sys.modules and 'triton' not in sys.modules, sorted(sys.modules); print(json.dumps(d))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert '"fold": "sglang"' in out.stdout


def test_invalid_choice_is_refused(monkeypatch):
    monkeypatch.setenv(fold.ENV_FOLD, "fastest")
    assert fold.describe()["fold"] == "invalid"
    with pytest.raises(OverlayError, match="RSO_FOLD"):
        fold.fold_accepted_prefix(spec_state=None, state_batch_indices=None, accept_lens=None,
                                  last_correct_step_indices=None)


@pytest.mark.skipif(torch.cuda.is_available(), reason="interpreter test (CPU)")
def test_overlay_jit_commits_the_decode_state_and_rolls_conv_back(monkeypatch):
    monkeypatch.setenv(fold.ENV_FOLD, "overlay")
    calls = _recorders(monkeypatch)
    assert fold.describe()["fold"] == "overlay-jit"
    case = make_case(L=1, HV=2, H=1, K=128, V=32, N=3, slots=[2, 0], accept_lens=[3, 1], num_slots=4,
                     track=([3, -1], [1, -1]), seed=21)
    expected, tracked = decode_reference(case)
    _commit(case)
    assert fold.describe() == {"fold": "overlay-jit", "reason": fold._choice[1], "decided": True}
    assert torch.equal(case.temporal[:, [2, 0]], expected[:, [2, 0]])
    assert torch.equal(case.temporal[:, 3], tracked[0])
    assert not calls["sglang"] and len(calls["conv"]) == 1


def test_sglang_choice_and_fallback_on_unsupported_shapes(monkeypatch):
    calls = _recorders(monkeypatch)
    monkeypatch.setenv(fold.ENV_FOLD, "sglang")
    _commit(types.SimpleNamespace(temporal=None, rawv=None, rawk=None, g=None, beta=None, slots=None,
                                  accept_lens=torch.ones(1), track_slots=None, track_steps=None))
    assert len(calls["sglang"]) == 1 and fold.describe()["fold"] == "sglang"

    monkeypatch.setattr(fold, "_choice", None)
    monkeypatch.setenv(fold.ENV_FOLD, "overlay")
    small = types.SimpleNamespace(  # K = 64: not a tree the overlay reproduces
        temporal=torch.zeros(1, 2, 2, 32, 64), rawv=torch.zeros(1, 2, 2, 3, 32, dtype=torch.bfloat16),
        rawk=torch.zeros(1, 2, 1, 3, 64, dtype=torch.bfloat16), g=torch.zeros(1, 2, 2, 3),
        beta=torch.zeros(1, 2, 2, 3), slots=torch.tensor([0], dtype=torch.int32),
        accept_lens=torch.tensor([2], dtype=torch.int32), track_slots=None, track_steps=None)
    _commit(small)
    assert len(calls["sglang"]) == 2 and not calls["conv"]
    described = fold.describe()
    assert described["fold"] == "sglang" and "K=64" in described["reason"]
