"""CPU harness: runs SGLang 0.5.19's own GPU code paths on a CPU so the overlay can be tested and shown.

Not shipped in the wheel. It changes how SGLang runs (Triton interpreter fix, CUDA allocations and one
CUDA-only device check redirected to the CPU), which the shipped overlay must never do. Used by
`tests/hooks`, `tests/cycle` and `make demo` (`python -m harness.demo`).

Order matters: call `harness.interpreter.enable()` before anything imports SGLang's Triton kernels.
"""
