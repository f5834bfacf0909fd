"""Shared fixtures of the ahead-of-time kernel tests: one real build, made once per session.

The build compiles the CUDA commit kernel (kernels/gdn_fold.cu) for sm_90 with this venv's NVRTC (the test
venv has it, as the image has), on this GPU-less machine, through the real `kernels build` command in a
child process (a few seconds). Tests that change a folder work on a copy.
"""

import shutil

import pytest

from tests.aot.aot_helpers import build_args, cli


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
