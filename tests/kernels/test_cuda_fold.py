"""The CUDA commit kernel (kernels/gdn_fold.cu, kernels/cuda_fold.py): what can be checked without a GPU
(it compiles for sm_90 with NVRTC within its register budget, its argument struct is the kernel's, the
host refuses what the kernel does not cover, its launch hands the driver one parameter buffer) and, on a GPU
(marked `gpu`),
that it is bitwise equal to SGLang's decode kernel run token by token."""

import ctypes
import re
import struct

import pytest
import torch

from benchmarks.fold_cases import decode_reference, make_case
from replayssm_overlay.errors import NotCovered, OverlayError
from replayssm_overlay.kernels import commit_plan, cu_driver, cuda_fold, gdn_fold, nvrtc
from tests.kernels import sass as sass_tools

BUDGET_REGISTERS = {False: 128, True: 168}  # with a track slot: 16 or 12 warps per SM (MIN_BLOCKS[_TRACK])
SPILL_OUTSIDE_STEPS = 8  # bytes stored + loaded, as ptxas counts them
SOURCE = nvrtc.SOURCE.read_text()


def _fold_args(state, rawv, rawk, g, beta, slots, lens, conv=None):
    ints = gdn_fold.runtime_args(state, rawv, rawk, g, beta)
    src, dst, conv_ints = gdn_fold.conv_args(state, *(conv or (None, None)))
    return (state, rawv, rawk, src, dst, g, beta, slots, lens, slots, lens, *ints, *conv_ints)


def _pool(V=128, RL=16, L=2, S=3, HV=4, H=2, device="cpu"):
    state = torch.zeros(L, S, HV, V, 128, device=device)
    rawv = torch.zeros(L, S, HV, RL, V, dtype=torch.bfloat16, device=device)
    rawk = torch.zeros(L, S, H, RL, 128, dtype=torch.bfloat16, device=device)
    g = torch.zeros(L, S, HV, RL, device=device)
    return state, rawv, rawk, g, torch.zeros_like(g)


def test_source_compiles_for_sm90_within_its_register_budget(tmp_path):
    """Within the registers of its occupancy, and no local memory in the step loop (a spill there cost 30%,
    notes/perf.md v7); outside it, at most SPILL_OUTSIDE_STEPS bytes (v13's track kernel reloads one value a
    thread per item: 4 bytes stored once, read once an item)."""
    cubin, report = nvrtc.build_fold()
    assert cubin[:4] == b"\x7fELF" and report["arch"] == "sm_90"
    assert set(report["ptxas"]) == set(cuda_fold.KERNELS.values())
    (tmp_path / "fold.cubin").write_bytes(cubin)
    for name, entry in report["ptxas"].items():
        assert entry["registers"] <= BUDGET_REGISTERS[name.endswith("_track")], (name, entry)
        assert entry["spill_bytes"] <= SPILL_OUTSIDE_STEPS, (name, entry)
        sass = sass_tools.sass_of(tmp_path / "fold.cubin", name)
        steps = sass_tools.step_loops(sass)
        local = [
            (hex(a), ins)
            for a, ins in sass
            if re.search(r"\b(LDL|STL)\b", ins) and any(first <= a <= last for first, last in steps)
        ]
        assert not local, (name, local)


def test_argument_struct_is_the_kernels_field_for_field():
    body = re.search(r"struct FoldArgs \{(.*?)\};", SOURCE, re.S).group(1)
    fields = []
    for decl in re.sub(r"//.*", "", body).split(";"):
        decl = decl.strip()
        if decl:
            pointer = "*" in decl
            names = decl.split("*")[-1] if pointer else decl.split(None, 1)[1]
            fields += [(n.strip(), pointer) for n in names.split(",")]
    assert fields == [(name, ty is ctypes.c_void_p) for name, ty in cuda_fold.FoldArgs._fields_]
    # and the Triton kernel's runtime arguments, in its order, come first, then the grid and the index dtypes
    assert [name for name, _ in fields[:-3]] == list(gdn_fold.fold_signature("bf16"))
    assert [name for name, _ in fields[-3:]] == ["layers", "batch", "wide_indices"]


def test_the_hosts_layout_constants_are_the_builds():
    """The host sizes the grid and checks V against the columns of an item: if gdn_fold.cu's defaults
    changed without cuda_fold.py, V % COLS would go unchecked and columns past the last block unfolded.
    The warps per block it reads from the cubin itself (`gdn_fold_team`, checked on a GPU below)."""
    define = {m.group(1): int(m.group(2)) for m in re.finditer(r"#define (\w+) (\d+)", SOURCE)}
    assert define["CQ"] * 32 // (1 << define["LANE_A_BITS"]) == cuda_fold.COLUMNS
    assert 32 * define["CONV_PER_LANE"] == cuda_fold.CONV_CHUNK
    team, tile = define["TEAM"], cuda_fold.COLUMNS * define["K_DIM"] * 4
    window_bytes = 16 * define["K_DIM"] * 4 + 2 * 16 * 4  # a window's normalized k, decays and betas
    assert cuda_fold.smem_bytes(16, team) == team * tile + 2 * window_bytes + 8 * team
    assert re.search(r"__constant__ int gdn_fold_team\[2\] = \{TEAM, TEAM_TRACK\};", SOURCE)
    for warps_per_sm in ("MIN_BLOCKS", "MIN_BLOCKS_TRACK"):  # whole teams per SM: the occupancy the registers are for
        assert define[warps_per_sm] % define["TEAM" if warps_per_sm == "MIN_BLOCKS" else "TEAM_TRACK"] == 0


def test_pack_puts_each_runtime_argument_in_its_field():
    state, rawv, rawk, g, beta = _pool(RL=8)
    slots, lens = torch.tensor([0, 2], dtype=torch.int32), torch.tensor([8, 3], dtype=torch.int32)
    args = _fold_args(state, rawv, rawk, g, beta, slots, lens)
    packed = cuda_fold.pack(args, batch=2)
    assert (packed.state, packed.rawk, packed.accept_lens) == (state.data_ptr(), rawk.data_ptr(), lens.data_ptr())
    assert (packed.HV, packed.GROUP, packed.V, packed.RL, packed.layers, packed.batch) == (4, 2, 128, 8, 2, 2)
    assert packed.state_slot_tiles == 4 and packed.rawk_slot_rows == 2 * 8
    assert cuda_fold.work_units(packed, team=4) == 2 * 2 * 4 * (128 // (4 * cuda_fold.COLUMNS))
    assert cuda_fold.work_units(packed, team=1) == 2 * 2 * 4 * (128 // cuda_fold.COLUMNS)
    assert packed.wide_indices == 0  # int32 index vectors
    wide = cuda_fold.pack(_fold_args(state, rawv, rawk, g, beta, slots, lens.long()), batch=2)
    assert wide.wide_indices == 0b1010  # the accept lengths, given twice (as the track steps of a plan without track)
    with pytest.raises(ValueError, match="arguments"):
        cuda_fold.pack(args[:-1], batch=2)


def test_short_windows_with_enough_work_get_blocks_of_a_few_units_and_the_rest_a_persistent_grid():
    """grid_size: persistent (the resident blocks, or fewer where the work is less) unless the ring window is at
    most 6 steps (8 with a track slot) and blocks of auto_share units (half the window, at least 2) are at least
    AUTO_SHARE_MIN_WAVES times the resident blocks; a pinned grid is taken as given; an unknown one is refused
    when the kernels are made."""

    def packed(RL, batch, L=2, HV=4):
        state, rawv, rawk, g, beta = _pool(RL=RL, L=L, HV=HV, H=2)
        slots = lens = torch.zeros(batch, dtype=torch.int32)
        return cuda_fold.pack(_fold_args(state, rawv, rawk, g, beta, slots, lens), batch=batch)

    waves = cuda_fold.AUTO_SHARE_MIN_WAVES
    for RL, track, share in ((1, False, 2), (4, False, 2), (6, False, 3), (7, False, 0), (8, True, 4), (9, True, 0)):
        p = packed(RL, batch=8)
        work = cuda_fold.work_units(p, team=4)  # 2 layers x 8 rows x 4 heads x 2 chunks = 128
        assert cuda_fold.auto_share(RL, track) == share
        few = work // (share or 1) // waves  # the most resident blocks for which blocks of `share` units still win
        blocks = -(-work // share) if share else few
        assert cuda_fold.grid_size(p, 4, resident=few, has_track=track) == blocks
        assert cuda_fold.grid_size(p, 4, resident=few + 1, has_track=track) == few + 1  # too few waves: persistent
        assert cuda_fold.grid_size(p, 4, resident=few, has_track=track, grid="per-item") == work
        assert cuda_fold.grid_size(p, 4, resident=few, has_track=track, grid="pairs") == work // 2
        assert cuda_fold.grid_size(p, 4, resident=few, has_track=track, grid="persistent") == few
        assert cuda_fold.grid_size(p, 4, resident=few, has_track=track, grid="strided") == cuda_fold.STRIDED_BLOCKS
    small = packed(4, batch=1)
    assert cuda_fold.grid_size(small, 4, resident=528, has_track=False) == cuda_fold.work_units(small, team=4) == 16
    with pytest.raises(ValueError, match="grid 'wide'"):
        cuda_fold.CudaKernels(b"", "test", grid="wide")


def test_a_commit_reads_element_aligned_int32_and_int64_vectors_as_given_and_copies_the_rest():
    """What the launch's `commit` hands the kernel (`given_index`): the address of any 1-D, contiguous,
    element-aligned int32 or int64 vector and whether it is int64; an int32 copy of a strided view or another
    dtype; NotCovered, before any launch, for a vector that is not 1-D."""

    def given(t):
        return cuda_fold.given_index(t, -1, torch.int32, torch.int64, commit_plan.indices)

    base = torch.arange(6, dtype=torch.int32)
    for usable, wide in ((base, 0), (base[1:5], 0), (base.long(), 1), (base.long()[3:], 1)):
        address, bit, tensor = given(usable)
        assert (address, bit, tensor) == (usable.data_ptr(), wide, usable)
    for odd in (base[::2], base.to(torch.int16), base.long()[::2]):
        address, bit, copy = given(odd)
        assert bit == 0 and copy.dtype == torch.int32 and copy.is_contiguous() and address == copy.data_ptr()
        assert torch.equal(copy, odd.to(torch.int32))
    with pytest.raises(NotCovered, match="1-D"):
        given(base.view(2, 3))


@pytest.mark.parametrize("what", ["V", "window", "misaligned rawk", "float16 rings", "float32 rings"])
def test_pools_the_kernel_does_not_cover_are_refused_before_anything_loads(what):
    """Pools the Triton kernel takes but a CUDA build does not: V not a multiple of a (32-column) layout's
    item, a window of more steps than a warp has lanes, a ring that is not 16-byte aligned, rings of another
    dtype than bf16 (SGLANG_MAMBA_CONV_DTYPE=float16 or float32: the kernel reads bf16 pairs)."""
    state, rawv, rawk, g, beta = _pool(V=48 if what == "V" else 128, RL=33 if what == "window" else 8)
    if what == "misaligned rawk":
        rawk = torch.zeros(rawk.numel() + 1, dtype=torch.bfloat16)[1:].view(rawk.shape)
    if what.endswith("rings"):
        dtype = getattr(torch, what.split()[0])
        rawv, rawk = rawv.to(dtype), rawk.to(dtype)
    slots = lens = torch.zeros(1, dtype=torch.int32)
    args = _fold_args(state, rawv, rawk, g, beta, slots, lens)  # the Triton kernel's checks pass
    kernels = cuda_fold.CudaKernels(b"not a cubin", "test", columns=32 if what == "V" else cuda_fold.COLUMNS)
    with pytest.raises(NotCovered):
        kernels.prepare(
            gdn_fold.gdn_replayssm_fold_kernel, (8, 1, 8), args, gdn_fold.fold_constexprs(False, False), {}, 0
        )
    assert kernels._loaded == {}  # refused before the binary was loaded


def _offset_int32(t):
    """An int32 copy of `t` that starts 4 bytes past a 16-byte boundary (a slice of a larger vector)."""
    out = torch.empty(t.numel() + 1, dtype=torch.int32, device=t.device)[1:]
    out.copy_(t)
    return out


def _many_rows(batch):
    """A batch of more rows than a warp has lanes (the other cases have at most 5): padded rows, rows with
    nothing accepted, track slots past the active ones."""
    slots = [-1 if row % 9 == 4 else row for row in range(batch)]
    track_slots = [batch + row // 13 if row % 13 == 0 else -1 for row in range(batch)]  # rows 26, 39 (, 52) store
    track_steps = [row // 13 % 2 if slot >= 0 else -1 for row, slot in enumerate(track_slots)]
    return dict(
        L=1,
        HV=4,
        H=2,
        V=64,
        N=4,
        slots=slots,
        accept_lens=[row * 7 % 5 for row in range(batch)],
        num_slots=batch + 6,
        track=(track_slots, track_steps),
    )


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
@pytest.mark.parametrize("track", [False, True])
@pytest.mark.parametrize("indices", ["int32", "int64 and offset"])
@pytest.mark.parametrize("grid", cuda_fold.GRIDS[1:])
def test_gpu_bitwise_equals_decode(track, indices, grid):
    """Against the decode kernel token by token; the index vectors as the copy to int32 makes them, or as the
    server gives some of them (int64: its track slots) and as views 4 bytes off 16-byte alignment; on the
    persistent grid, on a block per work unit and on a block per two."""
    cubin, _ = nvrtc.build_fold()
    _assert_bitwise(cuda_fold.CudaKernels(cubin, "nvrtc", grid=grid), track, indices)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
@pytest.mark.parametrize("track", [False, True])
def test_gpu_a_build_with_static_shared_memory_loads_and_stays_bitwise(track):
    """The loader opts each entry point in to the device's shared memory less its static arrays (the opt-in
    covers both; the whole of it is refused for a function with a static array, and every commit would then
    run SGLang's fold). Built here with a 1 KB static array in every entry point, never written in a launch."""
    entry = "    fold_body<E, TRACK, NT>(a); \\\n"
    assert SOURCE.count(entry) == 1
    padded = SOURCE.replace(
        entry, "    __shared__ volatile int pad[256]; \\\n    if (a.batch < 0) pad[threadIdx.x & 255] = 0; \\\n" + entry
    )
    kernels = cuda_fold.CudaKernels(nvrtc.compile_cubin(padded, [])[0], "nvrtc")
    _assert_bitwise(kernels, track, "int32")
    for function in kernels.loaded(torch.cuda.current_device()).functions.values():  # the array is in the build
        assert cuda_fold.static_shared_bytes(function) == 1024


def _assert_bitwise(kernels, track, indices):
    """`kernels`' fold of five pools (windows 4, 16 and 32, up to 70 rows) equals the decode kernel's, token by
    token."""
    for seed, cfg in enumerate(
        (
            dict(
                L=2,
                HV=4,
                H=2,
                V=64,
                N=4,
                slots=[3, -1, 0, 5],
                accept_lens=[4, 2, 1, 3],
                num_slots=7,
                track=([6, -1, -1, 1], [1, -1, -1, 2]),
            ),
            dict(
                L=3,
                HV=32,
                H=16,
                V=128,
                N=16,
                slots=[4, 0, -1, 7, 2],
                accept_lens=[16, 3, 5, 1, 9],
                num_slots=9,
                track=([1, 8, -1, -1, 3], [7, 0, -1, -1, 8]),
            ),
            # a window past the raw k the warps hold for their shares (4 warps x SHARE_HELD rounds of 4 steps)
            dict(
                L=2, HV=4, H=2, V=128, N=32, slots=[1, 2], accept_lens=[32, 21], num_slots=4, track=([3, -1], [30, -1])
            ),
            _many_rows(40),
            _many_rows(70),
        )
    ):
        case = make_case(**cfg, K=128, device="cuda", seed=11 + seed)
        expected, tracked = decode_reference(case)
        state = case.initial.clone()
        vector = _offset_int32 if indices != "int32" else (lambda t: t.to(torch.int32))
        slots, lens = vector(case.slots), case.accept_lens.long() if indices != "int32" else vector(case.accept_lens)
        args = list(_fold_args(state, case.rawv, case.rawk, case.g, case.beta, slots, lens))
        if track:
            args[9] = case.track_slots.long() if indices != "int32" else vector(case.track_slots)
            args[10] = vector(case.track_steps)
        run = kernels.prepare(
            gdn_fold.gdn_replayssm_fold_kernel,
            gdn_fold.fold_grid(state, len(slots)),
            tuple(args),
            gdn_fold.fold_constexprs(track, False),
            {},
            torch.cuda.current_device(),
        )
        run(*args)
        torch.cuda.synchronize()
        for slot in {s for s in cfg["slots"] if s >= 0}:
            assert torch.equal(state[:, slot], expected[:, slot]), f"slot {slot} differs ({cfg['L']} layers)"
        if track:
            for row, snapshot in tracked.items():
                assert torch.equal(state[:, int(case.track_slots[row])], snapshot), f"track slot of row {row}"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
def test_gpu_the_host_reads_the_team_from_the_cubin_and_refuses_narrower_pools():
    """The warps per block come from the cubin (`gdn_fold_team`), and a V that is a multiple of an item's
    columns but not of a team's is refused after loading, before anything is launched; so is a block that
    fits no SM (more shared memory than the device has), where its launch would fail."""
    define = {m.group(1): int(m.group(2)) for m in re.finditer(r"#define (\w+) (\d+)", SOURCE)}
    cubin, _ = nvrtc.build_fold()
    kernels = cuda_fold.CudaKernels(cubin, "nvrtc")
    device = torch.cuda.current_device()
    assert kernels.loaded(device).team == {False: define["TEAM"], True: define["TEAM_TRACK"]}
    state, rawv, rawk, g, beta = _pool(V=cuda_fold.COLUMNS * (define["TEAM"] - 1), device="cuda")
    slots = lens = torch.zeros(1, dtype=torch.int32, device="cuda")
    before = state.clone()
    with pytest.raises(NotCovered, match="warps of"):
        kernels.prepare(
            gdn_fold.gdn_replayssm_fold_kernel,
            gdn_fold.fold_grid(state, 1),
            _fold_args(state, rawv, rawk, g, beta, slots, lens),
            gdn_fold.fold_constexprs(False, False),
            {},
            device,
        )
    assert torch.equal(state, before)
    with pytest.raises(NotCovered):
        kernels.loaded(device).programs((2, False), 1 << 20)  # 1 MiB of shared memory per block


def test_a_layout_whose_warp_is_not_16_columns_wide_does_not_build():
    """The raw v window spreads one step's 8 bf16 pairs over 8 lanes: a layout of 8 columns per warp (2 columns
    a thread, 8 lanes per column group) would shuffle another step's v into the fold, so the source refuses it."""
    with pytest.raises(OverlayError, match="8 bf16 pairs per step"):
        nvrtc.compile_cubin(SOURCE, ["-DCQ=2", "-DLANE_A_BITS=3"])


@pytest.mark.parametrize("unroll", [3, 5])
def test_a_step_unroll_that_nvvm_compiles_without_a_remainder_loop_does_not_build(unroll):
    """NVRTC 13.0 compiles the step loop unrolled by 3 or 5 with no remainder: it runs up to 4 steps past the
    accepted ones, reads past the block's shared memory (an unroll-3 build crashed on an H200)
    and folds extra steps. The source refuses such a build instead of making one (notes/perf.md)."""
    with pytest.raises(OverlayError, match="power of two"):
        nvrtc.compile_cubin(SOURCE, [f"-DSTEP_UNROLL={unroll}"])


def test_the_driver_launch_passes_the_parameter_buffer_and_the_current_stream(monkeypatch):
    """`cu_driver.CubinLaunch` with libcuda's cuLaunchKernel replaced by a recorder (no driver here): the
    function handle as cuModuleGetFunction gives it, no parameter array, and the buffer's bytes and size in
    `extra`, read at launch time."""
    seen = []

    def cu_launch_kernel(function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        assert params is None and (extra[0], extra[2], extra[4]) == (1, 2, None)
        size = ctypes.c_size_t.from_address(extra[3]).value
        seen.append(
            (
                function.value,
                gx.value,
                gy.value,
                gz.value,
                bx.value,
                shared.value,
                stream.value,
                struct.unpack("<Qi4x", ctypes.string_at(extra[1], size)),
            )
        )
        return 0

    monkeypatch.setattr(cu_driver, "driver", lambda: {"cuLaunchKernel": cu_launch_kernel})
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda device: 0x99 + device, raising=False)

    class Args(ctypes.Structure):
        _fields_ = [("state", ctypes.c_void_p), ("HV", ctypes.c_int32)]

    args = Args(0x1000, 7)
    queue = cu_driver.CubinLaunch(ctypes.c_void_p(0x5678), (3, 2), 128, 512, args, 1)
    queue()
    args.HV = 8
    queue()
    assert seen == [(0x5678, 3, 2, 1, 128, 512, 0x9A, (0x1000, 7)), (0x5678, 3, 2, 1, 128, 512, 0x9A, (0x1000, 8))]
