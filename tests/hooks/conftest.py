"""SGLang's GPU code paths run on the CPU here: Triton's interpreter is enabled before any SGLang kernel
is imported, and the conv scatter's CUDA-only check is relaxed (harness.on_cpu)."""

from harness import on_cpu

on_cpu.prepare()
