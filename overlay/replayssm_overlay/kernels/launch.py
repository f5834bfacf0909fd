"""The overlay's Triton commit kernel prepared for one grid and one set of constexprs, then launched with its
runtime arguments only: the launch source of the "overlay-triton" fold choice (`RSO_FOLD=triton`), the JIT
twin of the CUDA kernel that the CPU tests run under Triton's interpreter.

`JitKernels.prepare(fn, grid, args, constexprs, options, device_index)` returns a `Prepared` launch with the
method of `cuda_fold.CudaKernels.prepare`, so a `commit_plan.CommitPlan` takes either. Triton compiles each
specialization on its first launch (a node that chose this fold compiles it in its self-check, before it
serves) and caches it; every launch goes through Triton's own runner, which checks and binds the arguments
each time (13-16 us of host time a commit on the H200's host, notes/perf.md): this is the operator's
explicit choice and the tests' kernel, not the served default.
"""

from __future__ import annotations

import os


class Prepared:
    """A kernel prepared for one grid and constexprs, from example runtime arguments `args`.
    `prepared.taking(*positions)` is a launch that takes only the (pointer) arguments at those positions, the
    others as given to `prepare`: what a commit passes (its index vectors; the pool and every integer are fixed
    by its plan)."""

    def __init__(self, args, launch_all):
        self.args, self._launch_all = tuple(args), launch_all

    def taking(self, *positions):
        args, launch_all = list(self.args), self._launch_all

        def launch(*values):
            for position, value in zip(positions, values):
                args[position] = value
            launch_all(*args)

        return launch


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


class JitKernels:
    """Triton's JIT (or, with TRITON_INTERPRET=1, its interpreter)."""

    kind = "overlay-triton"

    @property
    def tree_numpy(self) -> bool:
        """Under the interpreter the reference reduces with numpy, so the kernels must too."""
        return interpreting()

    def prepare(self, fn, grid, args, constexprs, options, device_index=0):
        return Prepared(args, lambda *runtime: fn[grid](*runtime, **constexprs, **options))
