"""Shared test setup: import this tree's packages first, run Triton kernels under its interpreter where
no GPU is present, skip GPU tests there, and select the unit tier (`--tier unit`, `make test-fast`).

The unit tier is named here by folder (`UNIT_TIER`), not by a path list in the Makefile: a test file added
to one of these folders joins it. Its tests need no root, Docker, test hosts or network namespaces; `make
test-fast` adds the markers `not slow and not gpu and not probe` and runs it in random order
(pytest-randomly, off by default in pyproject.toml's addopts: each deploy test builds the fleet's state it
starts from where the fleet lacks it, and file order keeps those rebuilds few; notes/decisions.md).

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

TESTS = pathlib.Path(__file__).resolve().parent
#: the unit tier, relative to tests/: folders, and single files of folders that are otherwise heavy
UNIT_TIER = (
    "structure",
    "patcher",
    "hooks",
    "smoke",
    "kernels",
    "aot",
    "releases",
    "plan",
    "ci",
    "monitoring/test_overlay_metrics.py",
    "test_layout_imports.py",
    "test_make_entry_points.py",
    "test_benchmark_run.py",
)


def pytest_addoption(parser):
    parser.addoption(
        "--tier",
        choices=("unit", "all"),
        default="all",
        help="unit: only the unit tier (tests/conftest.py's UNIT_TIER; make test-fast); all: every test",
    )
    parser.addoption(
        "--router-kind",
        default="both",
        help="the router the rollout tests behind one run behind (tests/deploy/router.py's KINDS), or both "
        "(the default); `make test` runs each kind in a stream of its own (scripts/test_streams.py)",
    )


def pytest_configure(config):
    kind = config.getoption("--router-kind")
    if kind != "both":
        from tests.deploy.router import KINDS

        if kind not in KINDS:
            raise pytest.UsageError(f"--router-kind {kind}: not a router kind; use one of {', '.join(KINDS)} or both")


def in_unit_tier(path: pathlib.Path) -> bool:
    """Whether `path` (a file or folder under tests/) is collected for the unit tier: inside one of its
    entries, or a folder on the way to one."""
    try:
        relative = path.resolve().relative_to(TESTS)
    except ValueError:
        return True
    if relative == pathlib.Path("."):
        return True
    entries = [pathlib.Path(entry) for entry in UNIT_TIER]
    return any(relative == entry or entry in relative.parents or relative in entry.parents for entry in entries)


def pytest_ignore_collect(collection_path, config):
    if config.getoption("--tier") == "unit" and not in_unit_tier(collection_path):
        return True
    return None


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
