"""Shared test setup: import this tree's packages first, run Triton kernels under its interpreter where
no GPU is present, and skip GPU tests there.

GPU tests are marked `gpu`; where torch sees no CUDA device they are skipped (never faked). The
interpreter must be chosen before anything imports Triton, so it is set here, at the very start of the
session, rather than by whichever test folder happens to be collected first.
"""

import os
import pathlib
import shutil
import sys

if not shutil.which("nvidia-smi"):
    os.environ.setdefault("TRITON_INTERPRET", "1")

ROOT = pathlib.Path(__file__).resolve().parent.parent
for sub in ("smoke_tests", "overlay", "."):
    path = str(ROOT / sub)
    if path not in sys.path:
        sys.path.insert(0, path)

import pytest  # noqa: E402


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if any("gpu" in item.keywords for item in items) and not _cuda_available():
        skip = pytest.mark.skip(reason="needs an NVIDIA GPU; run it on the device (benchmarks/README)")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)
