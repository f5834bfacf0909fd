"""`fold.fold_accepted_prefix` picks the overlay's commit or SGLang's once per process, says which in
`describe()`, and runs SGLang's commit for the calls the overlay does not cover, one shape at a time.

SGLang's own commit needs CUDA (its conv scatter refuses CPU tensors), so where a test reaches it it
records the call instead (a stand-in, test-only); the temporal state the overlay's kernel commits is the
real thing, checked against SGLang's decode kernel, and the conv rollback against a plain copy.
"""

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

from benchmarks.fold_cases import decode_reference, make_case
from replayssm_overlay import fold, records
from replayssm_overlay.errors import OverlayError
from replayssm_overlay.kernels import commit_plan, gdn_fold

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def fresh_choice(monkeypatch, tmp_path):
    monkeypatch.setenv(records.ENV_DIR, str(tmp_path / "state"))
    monkeypatch.setattr(fold, "_choice", None)
    monkeypatch.setattr(fold, "_plans", {})
    monkeypatch.setattr(fold, "_fallbacks", {})
    monkeypatch.delenv(fold.ENV_FOLD, raising=False)
    monkeypatch.setenv("RSO_KERNEL_DIR", "/nonexistent/replayssm-overlay-kernels")
    yield


def _sglang_recorder(monkeypatch):
    calls = []
    module = types.ModuleType("sglang.kernels.ops.attention.fla.gdn_replayssm_spec_fold")
    module.commit_gdn_replayssm_fold_after_verify = lambda **kw: calls.append(kw)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return calls


def _conv_pair(L, S, rows, N, dim=24, width=3, seed=0):
    """A conv pool and a deduplicated window view like SGLang's (step t = shared[..., t:t+width])."""
    gen = torch.Generator().manual_seed(seed)
    dst = torch.randn(L, S, dim, width, generator=gen).to(torch.bfloat16)
    span = N + width - 1
    shared = torch.randn(L, rows, dim, span, generator=gen).to(torch.bfloat16)
    src = shared.as_strided((L, rows, N, dim, width), (rows * dim * span, dim * span, 1, span, 1))
    return dst, src


def _spec_state(case, conv=None):
    conv = conv or _conv_pair(case.L, case.temporal.shape[1], len(case.slots), case.N)
    return types.SimpleNamespace(
        temporal=case.temporal,
        replayssm_rawv=case.rawv,
        replayssm_rawk=case.rawk,
        replayssm_g=case.g,
        replayssm_beta=case.beta,
        conv=[conv[0]],
        intermediate_conv_window=[conv[1]],
    )


def _commit(case, ss=None):
    ss = ss or _spec_state(case)
    fold.fold_accepted_prefix(
        spec_state=ss,
        state_batch_indices=case.slots,
        accept_lens=case.accept_lens,
        mamba_track_indices=case.track_slots,
        mamba_steps_to_track=case.track_steps,
    )
    return ss


def _conv_expected(conv, src, slots, lens, track_slots=None, track_steps=None):
    """SGLang's scatter semantics as a plain copy: active rows get step lens-1, track rows their step."""
    out = conv.clone()
    pairs = [(slots, lens - 1)] + ([(track_slots, track_steps)] if track_slots is not None else [])
    for dst_rows, steps in pairs:
        for row, (slot, step) in enumerate(zip(dst_rows.tolist(), steps.tolist())):
            if 0 <= slot < conv.shape[1] and 0 <= step < src.shape[2]:
                out[:, slot] = src[:, row, step]
    return out


def test_describe_imports_no_torch_and_defaults_to_sglang_without_artifacts():
    env = dict(os.environ, PYTHONPATH=f"{ROOT / 'overlay'}", RSO_KERNEL_DIR="/nonexistent/k")
    env.pop(fold.ENV_FOLD, None)
    code = (
        "import json, sys; from replayssm_overlay import fold; d = fold.describe(); "
        "assert 'torch' not in sys.modules and 'triton' not in sys.modules, sorted(sys.modules); print(json.dumps(d))"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert '"fold": "sglang"' in out.stdout


def test_invalid_choice_is_refused(monkeypatch):
    monkeypatch.setenv(fold.ENV_FOLD, "fastest")
    assert fold.describe()["fold"] == "invalid"
    with pytest.raises(OverlayError, match="RSO_FOLD"):
        fold.fold_accepted_prefix(
            spec_state=None, state_batch_indices=None, accept_lens=None, last_correct_step_indices=None
        )


@pytest.mark.skipif(torch.cuda.is_available(), reason="interpreter test (CPU)")
@pytest.mark.parametrize("track_dtype", [torch.int32, torch.int64])  # int64: as the server passes them
def test_the_triton_twin_commits_the_decode_state_and_rolls_conv_back(monkeypatch, track_dtype):
    monkeypatch.setenv(fold.ENV_FOLD, "triton")
    calls = _sglang_recorder(monkeypatch)
    assert fold.describe()["fold"] == "overlay-triton"
    case = make_case(
        L=2,
        HV=2,
        H=1,
        K=128,
        V=32,
        N=3,
        slots=[2, 0, -1],
        accept_lens=[3, 1, 2],
        num_slots=5,
        track=([3, -1, 4], [1, -1, 0]),
        seed=21,
    )
    case.track_slots, case.track_steps = case.track_slots.to(track_dtype), case.track_steps.to(track_dtype)
    expected, tracked = decode_reference(case)
    conv = _conv_pair(2, 5, 3, 3, seed=4)
    before = conv[0].clone()
    checked = []  # the vectors passed through `indices` (the int32 launch's: it copies what that cannot read)
    indices = commit_plan.indices
    monkeypatch.setattr(commit_plan, "indices", lambda t, device: checked.append(t.dtype) or indices(t, device))
    ss = _commit(case, _spec_state(case, conv))
    assert checked == [torch.int32, torch.int32, track_dtype, track_dtype]  # the int64 ones copied for the call
    assert fold.describe() == {
        "fold": "overlay-triton",
        "reason": fold._choice[1],
        "decided": True,
        "fallbacks": [],
        "fallbacks_recorded": [],
    }
    assert torch.equal(case.temporal[:, [2, 0]], expected[:, [2, 0]])
    assert torch.equal(case.temporal[:, 3], tracked[0])
    assert torch.equal(case.temporal[:, [1, 4]], case.initial[:, [1, 4]])  # row 2 is padding: its track too
    assert torch.equal(
        ss.conv[0], _conv_expected(before, conv[1], case.slots, case.accept_lens, case.track_slots, case.track_steps)
    )
    assert not calls


@pytest.mark.skipif(torch.cuda.is_available(), reason="interpreter test (CPU)")
def test_a_plan_is_made_once_per_pool_and_batch_size(monkeypatch):
    from replayssm_overlay.kernels import commit_plan

    monkeypatch.setenv(fold.ENV_FOLD, "triton")
    made = []
    real = commit_plan.CommitPlan
    monkeypatch.setattr(commit_plan, "CommitPlan", lambda *a, **kw: made.append(a[1:3]) or real(*a, **kw))
    case = make_case(L=1, HV=2, H=2, K=128, V=16, N=2, slots=[1, 0], accept_lens=[2, 1], num_slots=3, seed=2)
    ss = _spec_state(case)
    for _ in range(3):
        fold.fold_accepted_prefix(spec_state=ss, state_batch_indices=case.slots, accept_lens=case.accept_lens)
    fold.fold_accepted_prefix(spec_state=ss, state_batch_indices=case.slots[:1], accept_lens=case.accept_lens[:1])
    assert made == [(2, False), (1, False)]
    # index tensors of another dtype or a misaligned view are copied once per call, not refused
    odd = torch.tensor([7, 1, 0], dtype=torch.int64)[1:]
    fold.fold_accepted_prefix(spec_state=ss, state_batch_indices=odd, accept_lens=case.accept_lens)
    assert made == [(2, False), (1, False)] and not fold.fallbacks()


def test_an_index_tensor_no_launch_takes_runs_sglangs_commit_for_that_call(monkeypatch):
    """A slot vector that is not 1-D is refused by the run before anything is launched (never a crash, never a
    launch on a misread vector): SGLang's commit gets that call, and it is listed."""
    calls = _sglang_recorder(monkeypatch)
    monkeypatch.setenv(fold.ENV_FOLD, "triton")
    case = make_case(L=1, HV=2, H=2, K=128, V=16, N=2, slots=[1, 0], accept_lens=[2, 1], num_slots=3, seed=3)
    ss = _spec_state(case)
    before = case.temporal.clone()
    fold.fold_accepted_prefix(spec_state=ss, state_batch_indices=case.slots.view(2, 1), accept_lens=case.accept_lens)
    assert len(calls) == 1 and torch.equal(case.temporal, before)
    (entry,) = fold.describe()["fallbacks"]
    assert entry["calls"] == 1 and "need 1-D" in entry["reason"]


def test_sglang_choice_runs_sglang_s_commit(monkeypatch):
    calls = _sglang_recorder(monkeypatch)
    monkeypatch.setenv(fold.ENV_FOLD, "sglang")
    lens = torch.tensor([2, 1], dtype=torch.int32)
    fold.fold_accepted_prefix(
        spec_state=None, state_batch_indices=torch.tensor([0, 1], dtype=torch.int32), accept_lens=lens
    )
    assert len(calls) == 1 and fold.describe()["fold"] == "sglang"
    assert torch.equal(calls[0]["last_correct_step_indices"], lens - 1)  # computed only on this path


def _unsupported_pool():
    """K = 64: not a tree the overlay reproduces."""
    return types.SimpleNamespace(
        temporal=torch.zeros(1, 2, 2, 32, 64),
        replayssm_rawv=torch.zeros(1, 2, 2, 3, 32, dtype=torch.bfloat16),
        replayssm_rawk=torch.zeros(1, 2, 1, 3, 64, dtype=torch.bfloat16),
        replayssm_g=torch.zeros(1, 2, 2, 3),
        replayssm_beta=torch.zeros(1, 2, 2, 3),
        conv=[],
        intermediate_conv_window=[],
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="interpreter test (CPU)")
def test_an_uncovered_shape_runs_sglang_for_its_calls_only_and_is_listed(monkeypatch, caplog):
    calls = _sglang_recorder(monkeypatch)
    monkeypatch.setenv(fold.ENV_FOLD, "triton")
    small = _unsupported_pool()
    before = small.temporal.clone()
    one = dict(
        state_batch_indices=torch.tensor([0], dtype=torch.int32), accept_lens=torch.tensor([2], dtype=torch.int32)
    )
    with caplog.at_level("WARNING", logger="replayssm_overlay.fold"):
        for _ in range(2):
            fold.fold_accepted_prefix(spec_state=small, **one)
    assert len(calls) == 2 and torch.equal(small.temporal, before)  # SGLang's (recorded) commit ran, not ours
    assert sum("K=64" in r.getMessage() for r in caplog.records) == 1  # logged once per shape
    (entry,) = fold.describe()["fallbacks"]
    assert entry["calls"] == 2 and "K=64" in entry["reason"] and "K=64" in entry["shape"]
    # and on disk, for `status --json` in another process
    env = dict(os.environ, PYTHONPATH=f"{ROOT / 'overlay'}")
    code = "import json; from replayssm_overlay import fold; print(json.dumps(fold.describe()['fallbacks_recorded']))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    (recorded,) = json.loads(out.stdout)
    assert recorded["pid"] == os.getpid() and recorded["shape"] == entry["shape"]
    # the next covered call is the overlay's again: no process-wide switch
    case = make_case(L=1, HV=2, H=2, K=128, V=16, N=2, slots=[1], accept_lens=[2], num_slots=2, seed=8)
    expected, _ = decode_reference(case)
    _commit(case)
    assert len(calls) == 2 and torch.equal(case.temporal[:, 1], expected[:, 1])
    assert fold.describe()["fold"] == "overlay-triton"


def test_index_tensors_are_used_as_given_or_copied_once_aligned():
    given = torch.arange(6, dtype=torch.int32)
    assert commit_plan.indices(given, -1) is given
    for odd in (given[1:5], given.long(), given[::2]):
        copy = commit_plan.indices(odd, -1)
        assert copy.dtype == torch.int32 and copy.is_contiguous() and copy.data_ptr() % 16 == 0
        assert torch.equal(copy, odd.to(torch.int32))


def test_the_commit_passes_the_fold_its_four_index_vectors():
    names = list(gdn_fold.fold_signature("bf16"))
    assert [names[p] for p in commit_plan._INDEX_POSITIONS] == ["slots", "accept_lens", "track_slots", "track_steps"]
