"""The CUDA commit kernel (`gdn_fold.cu`) loaded into torch's CUDA context and launched with one driver
call per commit.

Why a launcher of our own: the kernel takes the Triton commit kernel's runtime arguments as one struct
(`FoldArgs`), so a `commit_plan.CommitPlan` fills it once per (pool, batch size, track choice) and a
commit (`CudaKernels.prepare`'s `launch.commit`) only checks the four index tensors, writes their pointers
(and which of them are int64) into it and calls `cuLaunchKernel` through ctypes on the current stream,
with the launch's other arguments built once as ctypes values: no argument binding, no Python binding of
CUDA, nothing allocated. The kernel reads int32 and int64 index vectors as given (`given_index`): the
server's track slots are int64, and a copy to int32 would cost a launch of its own on every commit.
CUDA-graph capture records the launch like any other on that stream.
A block is a team of warps (the cubin's `gdn_fold_team`) that fold one value head's column blocks and share
the normalization of its k window. The grid (`grid_size`) is as many blocks as the driver says fit at once (a
persistent grid, each block staging its next item while it folds one), or, where the window is short and the
work is many times the resident blocks, blocks of a few work units (the hardware's block scheduler then
balances what a static share leaves to the tail, and each block still stages its second unit while it folds
its first; notes/perf.md, "Levers tried"); the kernel takes any grid.

`CudaKernels` is the launch source of the "overlay-cuda" fold choice, with the `prepare` method of
`launch.JitKernels` (the Triton twin). Its binary is an sm_90 cubin from the artifact folder (compiled with
NVRTC by `replayssm-overlay kernels build`, checked by the loader: `loader.ArtifactSet.cuda_kernels`). A pool
the kernel does not cover (K != 128, V not a multiple of a team's columns: 64 for 4 warps of 16, a window over
32 steps, raw k/v rings that are not bf16, misaligned tensors) raises `errors.NotCovered` in
`prepare`, before anything is launched.
"""

from __future__ import annotations

import ctypes
import threading

from replayssm_overlay.errors import NotCovered
from replayssm_overlay.kernels import gdn_fold
from replayssm_overlay.kernels.cu_driver import CubinLaunch, driver
from replayssm_overlay.kernels.cu_driver import check as _check

KERNELS = {
    (2, False): "gdn_fold_conv2",
    (2, True): "gdn_fold_conv2_track",
    (4, False): "gdn_fold_conv4",
    (4, True): "gdn_fold_conv4_track",
}  # (conv element bytes, track) -> entry point
MAX_WINDOW = 32  # lane t of a warp holds step t's gates
CONV_CHUNK = 512  # conv elements per conv unit (gdn_fold.cu)
COLUMNS = 16  # state columns per work item: gdn_fold.cu's COLS for the layout nvrtc.py builds
_CARVEOUT_MAX_SHARED = 100  # percent of L1 as shared memory: each resident warp stages an 8 KB tile
_TEAM_SYMBOL = b"gdn_fold_team"  # int[2] in the cubin: warps per block without and with a track slot
_CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT = 9
_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
_CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1  # static shared memory of an entry point
_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16
_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97
_SIGNATURE = gdn_fold.fold_signature("bf16")  # the Triton kernel's runtime arguments, in order
_POINTERS = tuple(name for name, ty in _SIGNATURE.items() if ty.startswith("*"))
_INTS = tuple(name for name, ty in _SIGNATURE.items() if ty == "i32") + ("layers", "batch", "wide_indices")
_INDEX_VECTORS = 4  # the last pointers: slots, accept lens, track slots, track steps (bits 0..3 of wide_indices)
GRIDS = ("auto", "persistent", "per-item", "pairs", "strided")  # `grid_size`'s choices; all but auto pin a grid
STRIDED_BLOCKS = 3  # the "strided" grid: each block walks every third unit (the self-check's staging grid)
RING_DTYPE = "torch.bfloat16"  # the raw k/v rings are read as bf16 pairs (bf16_lo/bf16_hi)
AUTO_SHARE_MAX_WINDOW = {False: 6, True: 8}  # ring windows up to which blocks of a few work units win (track slot: 8)
AUTO_SHARE_MIN_WAVES = 4  # ... where that makes at least this many times the resident blocks (below, persistent)


class FoldArgs(ctypes.Structure):
    """`struct FoldArgs` of gdn_fold.cu, field for field."""

    _fields_ = [(name, ctypes.c_void_p) for name in _POINTERS] + [(name, ctypes.c_int32) for name in _INTS]


class LoadedFold:
    """The cubin's four entry points in the primary context of one device, with their grid size and the warps
    per block each was built for (the cubin's `gdn_fold_team`: its warps share one value head's normalized k)."""

    def __init__(self, cubin: bytes, device_index: int):
        import torch

        torch.cuda.init()
        with torch.cuda.device(device_index):
            torch.cuda.current_stream(device_index)  # torch's lazy init of this device (its primary context)
            lib = driver()
            dev, ctx = ctypes.c_int(), ctypes.c_void_p()
            _check(lib.cuDeviceGet(ctypes.byref(dev), device_index), "cuDeviceGet")
            _check(lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
            _check(lib.cuCtxPushCurrent_v2(ctx), "cuCtxPushCurrent")
            try:
                self._module = ctypes.c_void_p()
                self._image = ctypes.create_string_buffer(cubin, len(cubin))
                _check(lib.cuModuleLoadData(ctypes.byref(self._module), self._image), "cuModuleLoadData")
                sms, optin = ctypes.c_int(), ctypes.c_int()
                _check(
                    lib.cuDeviceGetAttribute(ctypes.byref(sms), _CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev),
                    "cuDeviceGetAttribute",
                )
                _check(
                    lib.cuDeviceGetAttribute(
                        ctypes.byref(optin), _CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev
                    ),
                    "cuDeviceGetAttribute",
                )
                self.functions, self._per_sm, self._sms = {}, {}, sms.value
                self.team = _read_team(lib, self._module)
                for key, name in KERNELS.items():
                    fn = ctypes.c_void_p()
                    _check(
                        lib.cuModuleGetFunction(ctypes.byref(fn), self._module, name.encode()),
                        f"cuModuleGetFunction {name}",
                    )
                    _check(
                        lib.cuFuncSetAttribute(
                            fn, _CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, _CARVEOUT_MAX_SHARED
                        ),
                        "cuFuncSetAttribute",
                    )
                    # a team's tiles and windows pass the 48 KB a block gets without opting in (a 16-step window:
                    # 48.03); the opt-in covers static and dynamic shared memory together, so a build with a static
                    # array gets the rest (the whole opt-in would be refused)
                    _check(
                        lib.cuFuncSetAttribute(
                            fn, _CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, optin.value - static_shared_bytes(fn)
                        ),
                        "cuFuncSetAttribute",
                    )
                    self.functions[key] = fn
            finally:
                _check(lib.cuCtxPopCurrent_v2(ctypes.byref(ctx)), "cuCtxPopCurrent")

    def programs(self, key, shared: int) -> int:
        """Blocks that fit on the device at once (the persistent grid) for one entry point and shared memory
        size; NotCovered where none fits (its launch would fail), when the plan is made."""
        found = self._per_sm.get((key, shared))
        if found is None:
            per_sm = ctypes.c_int()
            _check(
                driver().cuOccupancyMaxActiveBlocksPerMultiprocessor(
                    ctypes.byref(per_sm), self.functions[key], 32 * self.team[key[1]], ctypes.c_size_t(shared)
                ),
                "cuOccupancyMaxActiveBlocksPerMultiprocessor",
            )
            if per_sm.value < 1:
                raise NotCovered(
                    f"no block of {self.team[key[1]]} warps with {shared} bytes of shared"
                    " memory fits an SM of this device"
                )
            found = self._per_sm[(key, shared)] = per_sm.value * self._sms
        return found


def static_shared_bytes(function) -> int:
    """The static shared memory (`__shared__` arrays) of a loaded entry point, as the driver counts it."""
    static = ctypes.c_int()
    _check(
        driver().cuFuncGetAttribute(ctypes.byref(static), _CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, function),
        "cuFuncGetAttribute",
    )
    return static.value


def _read_team(lib, module) -> dict:
    """{track: warps per block} from the cubin's `gdn_fold_team`; NotCovered for a cubin without it."""
    address, size = ctypes.c_uint64(), ctypes.c_size_t()
    _check(
        lib.cuModuleGetGlobal_v2(ctypes.byref(address), ctypes.byref(size), module, _TEAM_SYMBOL),
        "cuModuleGetGlobal gdn_fold_team (a cubin of an older gdn_fold.cu?)",
    )
    team = (ctypes.c_int * 2)()
    _check(lib.cuMemcpyDtoH_v2(team, address, ctypes.c_size_t(ctypes.sizeof(team))), "cuMemcpyDtoH gdn_fold_team")
    return {False: team[0], True: team[1]}


def smem_bytes(window: int, team: int, columns: int = COLUMNS) -> int:
    """Dynamic shared memory of one block (gdn_fold.cu `Smem`): each warp's tile, the block's normalized k of
    two windows and their decays and betas, each warp's mbarrier."""
    return team * columns * 128 * 4 + 2 * window * 128 * 4 + 2 * 2 * window * 4 + team * 8


def _covers(args, columns: int = COLUMNS) -> None:
    """Raise NotCovered unless the kernel handles these (already Triton-checked) arguments."""
    state, rawv, rawk = args[:3]  # the conv pair is Triton-checked: bf16, fp16 or fp32, 2 or 4 bytes a copy
    if str(rawv.dtype) != RING_DTYPE or str(rawk.dtype) != RING_DTYPE:  # SGLANG_MAMBA_CONV_DTYPE sets the rings'
        raise NotCovered(
            f"raw k/v rings of {rawk.dtype}/{rawv.dtype} (the CUDA kernel reads "
            "bfloat16 rings only; the ring dtype is the conv dtype, "
            "SGLANG_MAMBA_CONV_DTYPE)"
        )
    V, RL = state.shape[3], rawv.shape[3]
    if V % columns or RL > MAX_WINDOW:
        raise NotCovered(
            f"V={V} (need a multiple of {columns}) or window {RL} (at most {MAX_WINDOW}) for the CUDA kernel"
        )
    for name, t, align in (
        ("state", state, 16),
        ("rawv", rawv, 16),
        ("rawk", rawk, 16),
        ("gate", args[5], 4),
        ("beta", args[6], 4),
    ):
        if t.data_ptr() % align:
            raise NotCovered(f"{name} is not {align}-byte aligned")


class CudaKernels:
    """The "overlay-cuda" launch source: `prepare` returns one commit's launch (see the module docstring)."""

    kind = "overlay-cuda"
    tree_numpy = False

    def __init__(self, cubin: bytes, origin: str, columns: int = COLUMNS, grid: str = "auto"):
        if grid not in GRIDS:
            raise ValueError(f"grid {grid!r} is not one of {', '.join(GRIDS)}")
        self.cubin, self.origin, self.columns = cubin, origin, columns  # columns: of this binary's layout
        self.grid = grid  # benchmarks and the window sweep pin a grid; serving uses auto
        self._loaded = {}
        self._lock = threading.Lock()

    def pinned(self, grid: str) -> CudaKernels:
        """The same binary, loaded once for both, launched on another grid (the self-check's staging grid)."""
        other = CudaKernels(self.cubin, self.origin, self.columns, grid)
        other._loaded, other._lock = self._loaded, self._lock
        return other

    def loaded(self, device_index: int) -> LoadedFold:
        """The binary loaded on that device (once; raises NotCovered if the driver refuses it)."""
        with self._lock:
            fold = self._loaded.get(device_index)
            if fold is None:
                fold = self._loaded[device_index] = LoadedFold(self.cubin, device_index)
            return fold

    def prepare(self, fn, grid, args, constexprs, options, device_index=0):
        """One commit's launch for the Triton kernel's runtime arguments `args` (the plan's pool tensors and
        example index tensors), on `grid`'s batch size; NotCovered before anything is loaded
        where the kernel does not cover the pool."""
        if fn is not gdn_fold.gdn_replayssm_fold_kernel:
            raise NotCovered(f"no CUDA kernel for {getattr(fn, '__name__', fn)}")
        _covers(args, self.columns)
        fold = self.loaded(device_index)
        key = (args[3].element_size(), bool(constexprs["HAS_TRACK"]))
        team = fold.team[key[1]]
        if args[0].shape[3] % (self.columns * team):
            raise NotCovered(
                f"V={args[0].shape[3]} (need a multiple of {self.columns * team}: "
                f"{team} warps of {self.columns} columns) for the CUDA kernel"
            )
        packed = pack(args, grid[1])
        shared = smem_bytes(packed.RL, team, self.columns)
        programs = grid_size(packed, team, fold.programs(key, shared), key[1], self.grid, self.columns)
        return _launcher(fold, fold.functions[key], programs, 32 * team, shared, packed, device_index)


def _launcher(fold, function, programs: int, threads: int, shared: int, packed, device_index: int):
    """The prepared launch: `launch.commit(slots, lens, track_slots, track_steps)` per commit (None track
    vectors: the kernel without a track slot ignores them), `launch(*runtime)` with the Triton kernel's runtime
    arguments (tests and benchmarks). Every argument of cuLaunchKernel but the stream is a ctypes value made
    here (`cu_driver.CubinLaunch`), so a call converts nothing (about 1 us less than argtypes on each launch)."""
    import torch

    from replayssm_overlay.kernels.commit_plan import indices

    queue = CubinLaunch(function, (programs,), threads, shared, packed, device_index)  # the struct is the buffer
    int32, int64 = torch.int32, torch.int64

    def commit(slots, lens, track_slots=None, track_steps=None):
        slots_at, wide, slots = given_index(slots, device_index, int32, int64, indices)
        lens_at, wide_lens, lens = given_index(lens, device_index, int32, int64, indices)
        wide |= wide_lens << 1
        if track_slots is None:
            track_at, steps_at, wide = slots_at, lens_at, wide | wide << 2
        else:
            track_at, wide_track, track_slots = given_index(track_slots, device_index, int32, int64, indices)
            steps_at, wide_steps, track_steps = given_index(track_steps, device_index, int32, int64, indices)
            wide |= wide_track << 2 | wide_steps << 3
        packed.slots, packed.accept_lens, packed.track_slots, packed.track_steps = slots_at, lens_at, track_at, steps_at
        packed.wide_indices = wide
        queue()  # the index tensors (or their copies) are alive until the launch is queued

    def launch(*runtime):
        commit(*runtime[7:11])

    launch.commit = commit
    launch.keep = (queue, fold)  # the struct and the module live as long as the launch
    return launch


def given_index(tensor, device_index: int, int32, int64, copy) -> tuple:
    """(address, 1 if int64 else 0, tensor) of an index vector the kernel reads as given: int32 or int64,
    1-D, contiguous, element-aligned, on the pool's device; else of its int32 copy made by `copy`
    (`commit_plan.indices`, which raises NotCovered for a vector that is not 1-D). torch's dtypes
    are passed in: this module imports torch only where it runs."""
    dtype, address = tensor.dtype, tensor.data_ptr()
    wide = 1 if dtype is int64 else 0 if dtype is int32 else -1
    if (
        wide >= 0
        and not address & (3 | wide << 2)
        and tensor.ndim == 1
        and tensor.is_contiguous()
        and tensor.get_device() == device_index
    ):
        return address, wide, tensor
    tensor = copy(tensor, device_index)
    return tensor.data_ptr(), 0, tensor


def pack(args, batch: int) -> FoldArgs:
    """The kernel's argument struct from the Triton kernel's runtime arguments (tensors, then integers)."""
    pointers, ints = args[: len(_POINTERS)], args[len(_POINTERS) :]
    if len(ints) != len(_INTS) - 3:
        raise ValueError(f"{len(args)} arguments, the commit kernel takes {len(_POINTERS) + len(_INTS) - 3}")
    import torch

    wide = sum(1 << j for j, t in enumerate(pointers[-_INDEX_VECTORS:]) if t.dtype is torch.int64)
    return FoldArgs(*[t.data_ptr() for t in pointers], *ints, args[0].shape[0], batch, wide)


def grid_size(
    packed: FoldArgs, team: int, resident: int, has_track: bool, grid: str = "auto", columns: int = COLUMNS
) -> int:
    """Blocks of the launch (>= 1). The kernel walks work units p, p + P, ... for any grid P, and a block stages
    its next unit while it folds one. Persistent: the `resident` blocks (fewer where there is less work). Auto:
    blocks of `auto_share` units where the window is at most AUTO_SHARE_MAX_WINDOW[has_track] and that makes at
    least AUTO_SHARE_MIN_WAVES waves of resident blocks, else persistent. There a unit is a few steps and its
    state traffic dominates: blocks that the hardware schedules as others finish balance the tail that a static
    share leaves, and each still stages its second unit under its first (397B at TP 4, a 4-step window, B=8:
    -3.5% against persistent, -2% against a block per unit). With fewer waves the last blocks would start only
    after the first had folded everything (up to +24%). "per-item" and "pairs" pin blocks of 1 and 2 units,
    "strided" STRIDED_BLOCKS blocks (each stages its next unit at every unit but its last, and steps the unit
    cursor by a stride that carries across its digits). Measured: notes/perf.md, "Levers tried"."""
    work = work_units(packed, team, columns)
    if grid == "strided":
        return min(STRIDED_BLOCKS, work)
    share = {"per-item": 1, "pairs": 2}.get(grid) or (auto_share(packed.RL, has_track) if grid == "auto" else 0)
    if share:
        blocks = -(-work // share)
        if grid != "auto" or blocks >= AUTO_SHARE_MIN_WAVES * resident:
            return blocks
    return min(resident, work)


def auto_share(window: int, has_track: bool) -> int:
    """Work units a block of the auto grid folds where its window is short enough (0: persistent): half the
    window's steps, at least 2 (measured best at windows 2-8: notes/perf.md, "Levers tried")."""
    return max(2, window // 2) if window <= AUTO_SHARE_MAX_WINDOW[has_track] else 0


def work_units(packed: FoldArgs, team: int, columns: int = COLUMNS) -> int:
    """Blocks of `team` warps that have work: team items (layer, row, value head, `team` column blocks) or
    conv units (a warp each), the larger."""
    rows = packed.layers * packed.batch
    conv_units = rows * -(-packed.conv_elems // CONV_CHUNK)
    return max(rows * packed.HV * (packed.V // (columns * team)), -(-conv_units // team), 1)
