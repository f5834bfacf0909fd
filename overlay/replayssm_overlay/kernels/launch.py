"""Kernels prepared once for one grid and one set of constexprs, then launched with their runtime
arguments only.

Why: a Triton launch through `JITFunction.__getitem__` or the loader's `PrebuiltKernel` binds, selects
and checks every argument on every call (the loader's ~140 us per launch); the commit runs once per
verify step with the same pool, so all of that is done once, when a `commit_plan.CommitPlan` is made,
and each launch afterwards is Triton's own C launcher on a `CompiledKernel` (`compiled[grid](*args)`).

Two sources of compiled kernels, with one method, `prepare(fn, grid, args, constexprs, options)`:
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


def _direct(compiled, grid: tuple, constexprs: dict):
    """Launch `compiled` on `grid` with the given runtime arguments (constexpr values appended)."""
    runner = compiled[tuple(grid) + (1,) * (3 - len(grid))]
    tail = tuple(constexprs.values())
    return lambda *args: runner(*args, *tail)


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


class JitKernels:
    """Triton's JIT (or its interpreter)."""

    kind = "overlay-jit"

    @property
    def tree_numpy(self) -> bool:
        """Under the interpreter the reference reduces with numpy, so the kernels must too."""
        return interpreting()

    def prepare(self, fn, grid, args, constexprs, options):
        if interpreting():
            return lambda *runtime: fn[grid](*runtime, **constexprs, **options)
        compiled = fn.warmup(*args, grid=grid, **constexprs, **options)
        return _direct(compiled, grid, constexprs)


class PrebuiltKernels:
    """Binaries from a checked artifact folder (`loader.ArtifactSet`); never compiles."""

    kind = "overlay-prebuilt"
    tree_numpy = False  # binaries have the GPU tree

    def __init__(self, artifacts):
        self.artifacts = artifacts
        self._kernels = {}

    def prepare(self, fn, grid, args, constexprs, options):
        kernel = self._kernels.get(fn.__name__)
        if kernel is None:
            kernel = self._kernels[fn.__name__] = self.artifacts.kernel(fn)
        binary = kernel.select([*args, *constexprs.values()], options)
        return _direct(binary.compiled(), grid, constexprs)
