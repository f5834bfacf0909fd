"""Kernels prepared once for one grid and one set of constexprs, then launched with their runtime
arguments only.

Why: a Triton launch through `JITFunction.__getitem__` or the loader's `PrebuiltKernel` binds, selects
and checks every argument on every call (the loader's ~140 us per launch); the commit runs once per
verify step with the same pool, so all of that is done once, when a `commit_plan.CommitPlan` is made.
Each launch afterwards is one `cuLaunchKernel` through ctypes (`RawLaunch`) with the binary's parameters
as one buffer, written when it is prepared; a commit rewrites only its four index-vector pointers
(`Prepared.taking`). Triton's runner does per launch what the plan did once: its Python launcher, launch
metadata (built whenever the hook chain exists, which it always does), the empty hook chain called, and
`data_ptr` and `cuPointerGetAttribute` for each of the commit's 11 tensors: 13-16 us of host time against
7-9 raw on the H200's host (notes/perf.md, session 13). The types come from the binary's signature, the
offsets from the driver, which must report the sizes the signature implies; a binary that does not fit (or
a profiler's launch hook) goes through Triton's runner instead.

Two sources of compiled kernels, with one method, `prepare(fn, grid, args, constexprs, options,
device_index)` returning a `Prepared`:
- `PrebuiltKernels` (artifacts from `loader.ArtifactSet`): the binary that the example arguments satisfy,
  or `loader.ArtifactRefused` when none was built for them; nothing is compiled.
- `JitKernels`: Triton compiles the specialization of the example arguments on first use
  (`JITFunction.warmup`); under Triton's interpreter (CPU tests) every launch goes through the
  interpreter instead, as there is no compiled kernel.
The example arguments must be what later launches pass, as far as a specialization can tell (dtypes,
16-byte alignment of pointers, integer values Triton made constants of): `commit_plan` guarantees that for
the per-call index tensors (int32, contiguous, 16-byte aligned) and holds the pool tensors themselves.
Each kernel's constexprs are its last parameters, so a launch passes them after the runtime arguments.
"""

from __future__ import annotations

import ctypes
import os

from replayssm_overlay.kernels import cu_driver
from replayssm_overlay.kernels.cu_driver import CubinLaunch

RAW = True  # launch Triton's binaries with cuLaunchKernel where their parameters are known (else Triton's runner)
_SCALARS = {"i32": ctypes.c_int32, "i64": ctypes.c_int64, "fp32": ctypes.c_float}  # parameter types launched raw
_SCRATCH_POINTERS = 2  # Triton (3.6, 3.7) appends the global and the profile scratch pointer to every kernel


class Prepared:
    """A kernel prepared for one grid and constexprs, from example runtime arguments `args`.
    `prepared(*runtime)` launches it with every runtime argument; `prepared.taking(*positions)` is a launch
    that takes only the (pointer) arguments at those positions, the others as given to `prepare` (for a
    `RawLaunch`: as given to its last full launch, if any): what a commit passes (its index vectors; the pool
    and every integer are fixed by its plan)."""

    def __init__(self, args, launch_all):
        self.args, self._launch_all = tuple(args), launch_all

    def __call__(self, *runtime) -> None:
        self._launch_all(*runtime)

    def taking(self, *positions):
        args, launch_all = list(self.args), self._launch_all

        def launch(*values):
            for position, value in zip(positions, values):
                args[position] = value
            launch_all(*args)

        return launch


class RawLaunch(Prepared):
    """A Triton binary launched by `cu_driver.CubinLaunch` from one parameter buffer, written only at the
    arguments a call passes. No launcher module, no parameter array, no `data_ptr` and
    `cuPointerGetAttribute` per tensor (the plan checked the pool once; the caller checks the index vectors)."""

    def __init__(self, args, queue, values: list, fallback):
        from triton import knobs

        super().__init__(args, self._launch_every)
        self._queue, self._values, self._fallback = queue, values, fallback  # views into the buffer, or None
        self._runtime = knobs.runtime

    def _launch_every(self, *runtime) -> None:
        if _hooked(self._runtime):  # a profiler's launch hook: Triton's runner calls it
            return self._fallback(*runtime)
        for value, arg in zip(self._values, runtime):
            if value is not None:
                value.value = arg.data_ptr() if isinstance(value, ctypes.c_void_p) else arg
        self._queue()

    def taking(self, *positions):
        values, queue, runtime = [self._values[p] for p in positions], self._queue, self._runtime
        fallback = Prepared(self.args, self._fallback).taking(*positions)  # Triton's runner, the others as prepared
        if not all(isinstance(v, ctypes.c_void_p) for v in values):
            raise TypeError(f"positions {positions}: a raw launch takes pointer arguments only")

        def launch(*tensors):
            if _hooked(runtime):
                return fallback(*tensors)
            for value, tensor in zip(values, tensors):
                value.value = tensor.data_ptr()
            queue()

        return launch


def _hooked(runtime) -> bool:
    """A launch hook is set in `triton.knobs.runtime` (a profiler's, e.g. Proton). Triton 3.6 and 3.7 hold the
    hooks in a `HookChain` that is never None (set: its `calls` are not empty); older ones one hook or None."""
    hook = runtime.launch_enter_hook
    return bool(getattr(hook, "calls", hook))


def _direct(compiled, grid: tuple, args, constexprs: dict, device_index: int) -> Prepared:
    """`compiled` on `grid`, launched raw (`RawLaunch`) where `_parameter_buffer` lays out its parameters, else
    by Triton's runner (constexpr values appended)."""
    grid = tuple(grid) + (1,) * (3 - len(grid))
    runner = compiled[grid]  # loads the binary's handles
    tail = tuple(constexprs.values())

    def through_runner(*runtime):
        runner(*runtime, *tail)

    laid_out = _parameter_buffer(compiled, args, tail) if RAW else None
    if laid_out is None:
        return Prepared(args, through_runner)
    buffer, values = laid_out
    queue = CubinLaunch(compiled.function, grid, 32 * compiled.metadata.num_warps, compiled.metadata.shared, buffer,
                        device_index)
    return RawLaunch(args, queue, values, through_runner)


def _parameter_buffer(compiled, args, tail) -> tuple | None:
    """(the kernel's parameter buffer, a ctypes view into it per runtime argument: None where the binary takes
    none, an integer Triton specialized as a constant), holding the example's values; the global and profile
    scratch pointers Triton appends stay null. None for a binary whose launch needs more than
    `cuLaunchKernel` (cluster, cooperative or PDL launch, global or profile scratch) or whose parameters the
    driver reports other than its signature implies (count and sizes), so nothing is launched with a wrong
    layout."""
    launcher = getattr(compiled, "run", None)
    flags = ("global_scratch_size", "profile_scratch_size", "launch_cooperative_grid", "launch_pdl")
    if launcher is None or not all(hasattr(launcher, name) for name in flags):
        return None
    if any(getattr(launcher, name) for name in flags) or getattr(compiled.metadata, "num_ctas", 1) != 1:
        return None
    types = list(compiled.src.signature.values())
    if len(types) != len(args) + len(tail) or not all(t == "constexpr" for t in types[len(args):]):
        return None
    kinds = []  # per runtime argument: its ctypes type, or None
    for ty in types[:len(args)]:
        if ty == "constexpr":
            kinds.append(None)
        elif isinstance(ty, str) and ty.startswith("*"):
            kinds.append(ctypes.c_void_p)
        elif ty in _SCALARS:
            kinds.append(_SCALARS[ty])
        else:
            return None
    taken = [kind for kind in kinds if kind is not None] + [ctypes.c_void_p] * _SCRATCH_POINTERS
    layout = cu_driver.param_layout(compiled.function)
    if layout is None or [size for _, size in layout] != [ctypes.sizeof(kind) for kind in taken]:
        return None
    buffer = ctypes.create_string_buffer(layout[-1][0] + layout[-1][1])
    offsets, values = iter(offset for offset, _ in layout), []
    for kind, arg in zip(kinds, args):
        view = None if kind is None else kind.from_buffer(buffer, next(offsets))
        if view is not None:
            view.value = arg.data_ptr() if kind is ctypes.c_void_p else arg
        values.append(view)
    return buffer, values


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


class JitKernels:
    """Triton's JIT (or its interpreter)."""

    kind = "overlay-jit"

    @property
    def tree_numpy(self) -> bool:
        """Under the interpreter the reference reduces with numpy, so the kernels must too."""
        return interpreting()

    def prepare(self, fn, grid, args, constexprs, options, device_index=0):
        if interpreting():
            return Prepared(args, lambda *runtime: fn[grid](*runtime, **constexprs, **options))
        compiled = fn.warmup(*args, grid=grid, **constexprs, **options)
        return _direct(compiled, grid, args, constexprs, device_index)


class PrebuiltKernels:
    """Binaries from a checked artifact folder (`loader.ArtifactSet`); never compiles."""

    kind = "overlay-prebuilt"
    tree_numpy = False  # binaries have the GPU tree

    def __init__(self, artifacts):
        self.artifacts = artifacts
        self._kernels = {}

    def prepare(self, fn, grid, args, constexprs, options, device_index=0):
        kernel = self._kernels.get(fn.__name__)
        if kernel is None:
            kernel = self._kernels[fn.__name__] = self.artifacts.kernel(fn)
        binary = kernel.select([*args, *constexprs.values()], options)
        return _direct(binary.compiled(), grid, args, constexprs, device_index)
