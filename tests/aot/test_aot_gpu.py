"""On a GPU node (sm_90): artifacts built by `kernels build` with this node's Triton run the fold with
zero Triton compilations, bitwise equal to the JIT, and mismatched copies are refused and fall back.
Skipped without CUDA (tests/conftest.py). The full proof with CPU-built artifacts is
benchmarks/gpu_aot_check.py; this test runs the same checks on a folder it builds itself, for
SGLang 0.5.19's fold and (once it is in the tree) the overlay's."""

import importlib.util
import subprocess
import sys

import pytest

from tests.aot.aot_helpers import PROVIDER, ROOT, build_args, child_env, cli


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["sglang", "overlay"])
def test_prebuilt_fold_compiles_nothing_and_matches_the_jit(tmp_path, kernel):
    import torch

    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the artifacts target sm_90 (H100/H200)")
    if kernel == "overlay" and importlib.util.find_spec("replayssm_overlay.kernels.gdn_fold") is None:
        pytest.skip("the overlay's fold kernel is not in this tree yet")
    args = build_args(tmp_path / "artifacts")
    if kernel == "overlay":
        args.remove("--provider")
        args.remove(PROVIDER)
    built = cli(*args)
    assert built.returncode == 0, built.stderr
    run = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_aot_check.py"), "--kernel", kernel,
         "--artifacts", str(tmp_path / "artifacts"), "--out", str(tmp_path / "out")],
        capture_output=True, text=True, env=child_env(), timeout=600,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
