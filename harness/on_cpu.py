"""Everything a process needs before it runs SGLang's GPU code paths on the CPU, in the right order."""

from harness import interpreter


def prepare() -> None:
    """Turn on Triton's interpreter (before any SGLang kernel is imported), then relax the conv scatter's
    CUDA-only check (this imports SGLang). Idempotent."""
    interpreter.enable()
    from harness.cpu_redirects import relax_conv_scatter_cuda_guard

    relax_conv_scatter_cuda_guard()
