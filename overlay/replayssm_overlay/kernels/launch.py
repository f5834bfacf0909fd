"""Kernels prepared once for one grid and one set of constexprs, then launched with their runtime
arguments only.

Why: a Triton launch through `JITFunction.__getitem__` or the loader's `PrebuiltKernel` binds, selects
and checks every argument on every call (the loader's ~140 us per launch); the commit runs once per
verify step with the same pool, so all of that is done once, when a `commit_plan.CommitPlan` is made,
and each launch afterwards is Triton's own C launcher on a `CompiledKernel` (`compiled[grid](*args)`).

Two sources of compiled kernels, with one method, `prepare(fn, grid, args, constexprs, options,
device_index)`:
- `PrebuiltKernels` (artifacts from `loader.ArtifactSet`): the binary that the example arguments satisfy,
  or `loader.ArtifactRefused` when none was built for them; nothing is compiled.
- `JitKernels`: Triton compiles the specialization of the example arguments on first use
  (`JITFunction.warmup`); under Triton's interpreter (CPU tests) every launch goes through the
  interpreter instead, as there is no compiled kernel.
The example arguments must be what later launches pass, as far as a specialization can tell (dtypes,
16-byte alignment of pointers, integer divisibility): `commit_plan` guarantees that for the per-call
index tensors (int32, contiguous, 16-byte aligned) and holds the pool tensors themselves.
Each kernel's constexprs are its last parameters, so a launch passes them after the runtime arguments.
"""

from __future__ import annotations

import os


RAW = True  # call Triton's C launcher directly where its layout is known (else through CompiledKernel)


def _direct(compiled, grid: tuple, constexprs: dict, device_index: int):
    """Launch `compiled` on `grid` with the given runtime arguments (constexpr values appended)."""
    grid = tuple(grid) + (1,) * (3 - len(grid))
    runner = compiled[grid]  # loads the binary's handles
    tail = tuple(constexprs.values())

    def through_runner(*args):
        runner(*args, *tail)

    return (_raw(compiled, grid, tail, device_index, through_runner) if RAW else None) or through_runner


def _raw(compiled, grid, tail, device_index, fallback):
    """What `CompiledKernel[grid](*args)` does, less its per-call Python: Triton's C launcher called with
    the arguments its own `CudaLauncher.__call__` would pass, on the current stream of the pool's device.
    Only for the two launcher layouts known (Triton 3.6: one C module per signature, kernel arguments
    after the hooks; 3.7: one generic C launcher that takes the signature per call) and binaries that need
    no global or profile scratch; None otherwise (the caller keeps the runner). A launch hook (a profiler)
    sends the launch through the runner, which calls it."""
    launcher = getattr(compiled, "run", None)
    needed = ("launch", "global_scratch_size", "profile_scratch_size", "launch_cooperative_grid", "launch_pdl")
    if launcher is None or not all(hasattr(launcher, name) for name in needed):
        return None
    if launcher.global_scratch_size or launcher.profile_scratch_size:
        return None
    import torch
    from triton import knobs

    stream_of = torch._C._cuda_getCurrentRawStream
    runtime = knobs.runtime
    c_launch, gx, gy, gz = launcher.launch, *grid
    function, metadata = compiled.function, compiled.packed_metadata
    coop, pdl = launcher.launch_cooperative_grid, launcher.launch_pdl
    if hasattr(launcher, "arg_annotations") and hasattr(launcher, "kernel_signature"):  # Triton 3.7
        annotations, signature = launcher.arg_annotations, launcher.kernel_signature

        def launch(*args):
            if runtime.launch_enter_hook is not None:
                return fallback(*args)
            c_launch(gx, gy, gz, stream_of(device_index), function, coop, pdl, metadata, None, None, None, None, None,
                     annotations, signature, (*args, *tail))
    else:  # Triton 3.6

        def launch(*args):
            if runtime.launch_enter_hook is not None:
                return fallback(*args)
            c_launch(gx, gy, gz, stream_of(device_index), function, coop, pdl, None, None, metadata, None, None, None,
                     *args, *tail)

    return launch


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
            return lambda *runtime: fn[grid](*runtime, **constexprs, **options)
        compiled = fn.warmup(*args, grid=grid, **constexprs, **options)
        return _direct(compiled, grid, constexprs, device_index)


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
        return _direct(binary.compiled(), grid, constexprs, device_index)
