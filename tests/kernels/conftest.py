"""The fold-kernel tests run SGLang's Triton kernels and ours on the CPU through Triton's interpreter,
which must be switched on before any kernel module is imported (Triton reads it when `@triton.jit`
decorates). With a CUDA device present nothing is switched, and the GPU tests run for real."""

import os

try:
    import torch

    _cuda = torch.cuda.is_available()
except ImportError:  # pragma: no cover - torch is part of the test venv
    _cuda = False

if not _cuda:
    os.environ.setdefault("TRITON_INTERPRET", "1")
