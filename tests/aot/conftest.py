"""Shared fixtures of the ahead-of-time kernel tests: one real build, made once per session.

The build compiles SGLang 0.5.19's own GDN fold kernel (loaded by file path from the installed wheel,
see benchmarks/aot_sglang_fold.py) for sm_90 with this venv's Triton, on this GPU-less machine, through
the real `kernels build` command: two specializations (with and without a track slot) for one head
shape and one window, about 5 s, in a child process without TRITON_INTERPRET (see aot_helpers). Tests
that change a folder work on a copy.
"""

import shutil
import sys

import pytest

from replayssm_overlay.kernels import commit_plan
from tests.aot.aot_helpers import ROOT, build_args, cli

OVERLAY_KERNELS = ROOT / "overlay/replayssm_overlay/kernels"


@pytest.fixture(scope="session")
def built(tmp_path_factory):
    """A pristine artifact folder; never modify it (use `artifacts` for a private copy)."""
    out = tmp_path_factory.mktemp("aot") / "artifacts"
    run = cli(*build_args(out))
    assert run.returncode == 0, run.stderr
    return out


@pytest.fixture
def artifacts(built, tmp_path):
    copy = tmp_path / "artifacts"
    shutil.copytree(built, copy)
    return copy


@pytest.fixture(scope="session")
def fold_module():
    from benchmarks.aot_sglang_fold import load_fold_module

    return load_fold_module()


@pytest.fixture(scope="session")
def built_overlay(tmp_path_factory):
    """The overlay's own commit kernel (kernels/gdn_fold.py, default provider): one shape, window 16 (9 binaries)."""
    out = tmp_path_factory.mktemp("aot-overlay") / "artifacts"
    args = build_args(out)
    del args[args.index("--provider") : args.index("--provider") + 2]
    run = cli(*args)
    assert run.returncode == 0, run.stderr
    return out


@pytest.fixture
def compiled_modules(monkeypatch):
    """The plan's kernel modules as compiled (not interpreted) copies: the CPU session may run Triton's
    interpreter, whose functions have no source key to match the binaries against."""
    import replayssm_overlay.kernels as package
    from benchmarks.aot_sglang_fold import load_compiled

    conv = load_compiled(OVERLAY_KERNELS / "conv_rollback.py", "rso_conv_rollback_compiled")
    monkeypatch.setattr(package, "conv_rollback", conv)  # what the fold's copy imports
    monkeypatch.setitem(sys.modules, "replayssm_overlay.kernels.conv_rollback", conv)
    fold = load_compiled(OVERLAY_KERNELS / "gdn_fold.py", "rso_gdn_fold_compiled")
    monkeypatch.setattr(commit_plan, "gdn_fold", fold)
    monkeypatch.setattr(commit_plan, "conv_rollback", conv)
    return fold, conv


@pytest.fixture
def recorded(built_overlay, compiled_modules, monkeypatch):
    """(prebuilt kernels of the build, calls): every launch of a prebuilt binary is recorded as
    (spec, grid, args) by a stand-in for Triton's CompiledKernel instead of running (no GPU here)."""
    from replayssm_overlay.kernels import launch, loader
    from tests.aot.test_aot_loader import facts

    calls = []

    class Recorder:
        def __init__(self, binary):
            self.binary = binary

        def __getitem__(self, grid):
            return lambda *args: calls.append((self.binary.spec, grid, args))

    monkeypatch.setattr(loader._Binary, "compiled", lambda binary: Recorder(binary))
    return launch.PrebuiltKernels(loader.ArtifactSet.open(built_overlay, facts())), calls
