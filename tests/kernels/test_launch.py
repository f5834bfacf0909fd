"""How a prepared Triton kernel is launched (kernels/launch.py): raw, through `cuLaunchKernel` with one
parameter buffer laid out at the offsets the driver reports, only where the binary's signature and those
parameters agree, and a commit rewrites only its index vectors. CPU tests use a stand-in for Triton's
CompiledKernel and for the driver's launch (no GPU here); on a GPU (marked `gpu`) the raw launch of the
JIT's binary is checked bitwise against Triton's own runner and against SGLang's decode kernel run token
by token."""

import ctypes
import struct
import types

import pytest
import torch

from benchmarks.fold_cases import decode_reference, make_case
from replayssm_overlay.kernels import commit_plan, cu_driver, gdn_fold, launch

SIGNATURE = {"state": "*fp32", "slots": "*i32", "HV": "i32", "GROUP": "constexpr", "stride": "i64", "K": "constexpr"}


class _Compiled:
    """Stands in for Triton's CompiledKernel: a signature, launch flags, and a runner that records."""

    def __init__(self, signature=SIGNATURE, **flags):
        self.src = types.SimpleNamespace(signature=dict(signature))
        self.metadata = types.SimpleNamespace(num_warps=4, shared=1024, num_ctas=1)
        self.run = types.SimpleNamespace(**{**dict(global_scratch_size=0, profile_scratch_size=0,
                                                    launch_cooperative_grid=False, launch_pdl=False), **flags})
        self.function = 0x1234
        self.runner_calls = []

    def __getitem__(self, grid):
        return lambda *args: self.runner_calls.append(args)


LAYOUT = [(0, 8), (8, 8), (16, 4), (24, 8), (32, 8), (40, 8)]  # state, slots, HV, stride, two scratch pointers


@pytest.fixture
def queued(monkeypatch):
    """Every raw launch as (grid, threads, shared, the parameters in the buffer at the time of the launch)."""
    launches = []

    class Queue:
        def __init__(self, function, grid, threads, shared, buffer, device_index):
            self.grid, self.threads, self.shared, self.buffer = grid, threads, shared, buffer

        def __call__(self):
            launches.append((self.grid, self.threads, self.shared, list(struct.unpack("<QQi4xqQQ", bytes(self.buffer)))))

    monkeypatch.setattr(launch, "CubinLaunch", Queue)
    monkeypatch.setattr(launch, "_hooked", lambda runtime: False)
    monkeypatch.setattr(launch.cu_driver, "param_layout", lambda function: LAYOUT)
    return launches


def _args():
    return (torch.zeros(4), torch.zeros(2, dtype=torch.int32), 16, 1, 2**33)


def test_a_binary_whose_parameters_match_its_signature_is_launched_raw(queued):
    state, slots, hv, group, stride = args = _args()
    compiled = _Compiled()
    prepared = launch._direct(compiled, (8, 2), args, {"K": 128}, 0)
    assert isinstance(prepared, launch.RawLaunch)
    prepared(*args)
    ((grid, threads, shared, values),) = queued
    # GROUP was made a constant by Triton (no parameter); the two scratch pointers come last, null
    assert (grid, threads, shared) == ((8, 2, 1), 128, 1024)
    assert values == [state.data_ptr(), slots.data_ptr(), 16, 2**33, 0, 0]
    assert compiled.runner_calls == []


def test_a_commit_rewrites_only_the_pointers_it_passes(queued):
    state, slots, *_ = args = _args()
    commit = launch._direct(_Compiled(), (8,), args, {"K": 128}, 0).taking(1)
    other = torch.zeros(2, dtype=torch.int32)
    commit(other)
    commit(slots)
    assert [values[:4] for *_, values in queued] == [[state.data_ptr(), other.data_ptr(), 16, 2**33],
                                                      [state.data_ptr(), slots.data_ptr(), 16, 2**33]]
    with pytest.raises(TypeError, match="pointer arguments only"):
        launch._direct(_Compiled(), (8,), args, {"K": 128}, 0).taking(2)


@pytest.mark.parametrize("what", ["driver sizes", "driver silent", "cluster", "pdl", "scratch", "fp16 scalar",
                                  "constexpr count"])
def test_a_binary_the_raw_launch_does_not_fit_goes_through_triton_s_runner(queued, monkeypatch, what):
    signature, flags, layout = dict(SIGNATURE), {}, LAYOUT
    if what == "driver sizes":
        layout = [(0, 8), (8, 8), (16, 4), (20, 4), (24, 8), (32, 8)]  # the i64 is not what the binary takes
    elif what == "driver silent":
        layout = None  # a driver without cuFuncGetParamInfo
    elif what == "pdl":
        flags["launch_pdl"] = True
    elif what == "scratch":
        flags["global_scratch_size"] = 64
    elif what == "fp16 scalar":
        signature["HV"] = "fp16"
    elif what == "constexpr count":
        signature.pop("K")
    monkeypatch.setattr(launch.cu_driver, "param_layout", lambda function: layout)
    compiled = _Compiled(signature, **flags)
    if what == "cluster":
        compiled.metadata.num_ctas = 2
    args = _args()
    prepared = launch._direct(compiled, (8,), args, {"K": 128}, 0)
    assert not isinstance(prepared, launch.RawLaunch)
    prepared.taking(1)(args[1])
    assert queued == [] and compiled.runner_calls == [(*args, 128)]


def test_a_profiler_hook_sends_the_launch_through_triton_s_runner(queued, monkeypatch):
    args = _args()
    compiled = _Compiled()
    commit = launch._direct(compiled, (8,), args, {"K": 128}, 0).taking(1)
    monkeypatch.setattr(launch, "_hooked", lambda runtime: True)
    commit(args[1])
    assert queued == [] and compiled.runner_calls == [(*args, 128)]


def test_a_launch_hook_is_seen_as_set_only_when_one_is():
    """Triton 3.6's and 3.7's `launch_enter_hook` is a HookChain, never None: read as `is not None`, it sent
    every launch through Triton's runner (sessions 7-12 never launched raw). Older ones hold a hook or None."""
    from triton import knobs

    chain = knobs.HookChain()
    assert not launch._hooked(types.SimpleNamespace(launch_enter_hook=chain))
    chain.add(print)
    assert launch._hooked(types.SimpleNamespace(launch_enter_hook=chain))
    assert not launch._hooked(types.SimpleNamespace(launch_enter_hook=None))
    assert launch._hooked(types.SimpleNamespace(launch_enter_hook=print))
    assert not launch._hooked(knobs.runtime)  # nothing set in this process


def test_the_commit_passes_the_fold_its_four_index_vectors():
    names = list(gdn_fold.fold_signature("bf16"))
    assert [names[p] for p in commit_plan._INDEX_POSITIONS] == ["slots", "accept_lens", "track_slots", "track_steps"]


def _no_runner(*args):
    raise AssertionError("the raw launch went through Triton's runner")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
@pytest.mark.parametrize("track", [False, True])
def test_gpu_the_jit_binary_launched_raw_is_bitwise_triton_s_runner_and_the_decode_kernel(track, monkeypatch):
    case = make_case(L=3, HV=8, H=2, K=128, V=128, N=8, slots=[3, 0, -1, 5], accept_lens=[8, 1, 0, 5], num_slots=8,
                     track=([6, -1, 7, 2], [7, -1, 0, 4]) if track else None, device="cuda", seed=21 + track)
    expected, tracked = decode_reference(case)
    index = [t.to(torch.int32) for t in (case.slots, case.accept_lens)]
    index += [t.to(torch.int32) for t in (case.track_slots, case.track_steps)] if track else index
    results = {}
    for raw in (True, False):
        monkeypatch.setattr(launch, "RAW", raw)
        state = case.initial.clone()
        ints = gdn_fold.runtime_args(state, case.rawv, case.rawk, case.g, case.beta)
        src, dst, conv_ints = gdn_fold.conv_args(state, None, None)
        head = (state, case.rawv, case.rawk, src, dst, case.g, case.beta)
        example = [torch.zeros_like(t) for t in index]
        prepared = launch.JitKernels().prepare(
            gdn_fold.gdn_replayssm_fold_kernel, gdn_fold.fold_grid(state, len(index[0])),
            (*head, *example, *ints, *conv_ints), gdn_fold.fold_constexprs(track, False), commit_plan.FOLD_OPTIONS,
            torch.cuda.current_device())
        assert isinstance(prepared, launch.RawLaunch) is raw
        if raw:  # launched raw, not sent to the runner by a hook check (as every launch was under 3.7 until session 13)
            prepared._fallback = _no_runner
        prepared.taking(*commit_plan._INDEX_POSITIONS)(*index)
        torch.cuda.synchronize()
        results[raw] = state
    assert torch.equal(results[True], results[False])
    for slot in {int(s) for s in case.slots if s >= 0}:
        assert torch.equal(results[True][:, slot], expected[:, slot]), f"slot {slot}"
    for row, snapshot in tracked.items():
        assert torch.equal(results[True][:, int(case.track_slots[row])], snapshot), f"track slot of row {row}"


@pytest.mark.parametrize("handle", [0x5678, ctypes.c_void_p(0x5678)])
def test_the_driver_launch_passes_the_parameter_buffer_and_the_current_stream(monkeypatch, handle):
    """`cu_driver.CubinLaunch` with libcuda's cuLaunchKernel replaced by a recorder (no driver here): the
    function handle as Triton (an int) or cuModuleGetFunction (a c_void_p) gives it, no parameter array, and
    the buffer's bytes and size in `extra`, read at launch time."""
    seen = []

    def cu_launch_kernel(function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        assert params is None and (extra[0], extra[2], extra[4]) == (1, 2, None)
        size = ctypes.c_size_t.from_address(extra[3]).value
        seen.append((function.value, gx.value, gy.value, gz.value, bx.value, shared.value, stream.value,
                     struct.unpack("<Qi4x", ctypes.string_at(extra[1], size))))
        return 0

    monkeypatch.setattr(cu_driver, "driver", lambda: {"cuLaunchKernel": cu_launch_kernel})
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda device: 0x99 + device, raising=False)

    class Args(ctypes.Structure):
        _fields_ = [("state", ctypes.c_void_p), ("HV", ctypes.c_int32)]

    args = Args(0x1000, 7)
    queue = cu_driver.CubinLaunch(handle, (3, 2), 128, 512, args, 1)
    queue()
    args.HV = 8
    queue()
    assert seen == [(0x5678, 3, 2, 1, 128, 512, 0x9A, (0x1000, 7)), (0x5678, 3, 2, 1, 128, 512, 0x9A, (0x1000, 8))]
