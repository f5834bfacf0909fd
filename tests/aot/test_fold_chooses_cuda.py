"""The entry point's default choice on a node with a built folder: `fold.chosen()` opens it, checks it and
tries the CUDA commit kernel; where the driver does not load it, SGLang's fold commits (the chain has no
other step), said once. `RSO_FOLD=triton` never tries the CUDA kernel.

Why this exists: the decision is the one place a node's folder, its GPU and the fold meet; the GPU
integration run once found it raising on every prebuilt decision, which no CPU test went through. CPU only:
the node's GPU architecture is given as sm_90, and this machine has no GPU driver, so loading the cubin
fails for real; the kernel's loading and results are checked on the GPU (tests/kernels/test_cuda_fold.py).
"""

import json
import shutil

import pytest

from replayssm_overlay import fold, records
from replayssm_overlay.kernels import loader


@pytest.fixture
def fresh_choice(monkeypatch, built, tmp_path):
    """The fold undecided, pointed at the build, on an sm_90 node."""
    monkeypatch.setattr(loader, "gpu_arch", lambda: 90)
    monkeypatch.setenv(loader.ENV_DIR, str(built))
    monkeypatch.setenv(records.ENV_DIR, str(tmp_path / "state"))
    monkeypatch.delenv(fold.ENV_FOLD, raising=False)
    monkeypatch.setattr(fold, "_choice", None)
    monkeypatch.setattr(fold, "_plans", {})
    monkeypatch.setattr(fold, "_fallbacks", {})


def test_the_default_tries_the_cuda_kernel_and_a_node_that_cannot_load_it_commits_with_sglangs_fold(
    fresh_choice, built, caplog
):
    assert fold.describe()["fold"] == "overlay-cuda"  # undecided: what the folder points to
    with caplog.at_level("WARNING", logger="replayssm_overlay.fold"):
        kind, reason, kernels = fold.chosen()
    assert kind == "sglang" and kernels is None and "it did not load" in reason, reason
    (warning,) = [r.getMessage() for r in caplog.records if "CUDA commit kernel is not used" in r.getMessage()]
    assert "SGLang's fold commits" in warning
    assert fold.describe()["fold"] == "sglang" and fold.describe()["decided"] is True


def test_a_loaded_cuda_kernel_is_the_choice(fresh_choice, built, monkeypatch):
    from replayssm_overlay.kernels import cuda_fold

    monkeypatch.setattr(cuda_fold.CudaKernels, "loaded", lambda self, device: None)  # a driver that loads it
    monkeypatch.setattr(fold, "_cuda_kernels", lambda artifacts: (artifacts.cuda_kernels(), ""))  # no torch.cuda here
    kind, reason, kernels = fold.chosen()
    assert kind == "overlay-cuda" and str(built) in reason and fold.kernel_source(kernels) is kernels


def test_rso_fold_triton_never_tries_the_cuda_kernel(fresh_choice, monkeypatch, caplog):
    monkeypatch.setenv(fold.ENV_FOLD, "triton")
    assert fold.describe()["fold"] == "overlay-triton"
    with caplog.at_level("WARNING", logger="replayssm_overlay.fold"):
        kind, _, kernels = fold.chosen()
    assert kind == "overlay-triton" and kernels is None and "CUDA" not in caplog.text


def test_a_refused_folder_is_sglangs_fold_with_the_reason(fresh_choice, monkeypatch, built, tmp_path):
    other = tmp_path / "artifacts"
    shutil.copytree(built, other)
    manifest = json.loads((other / "manifest.json").read_text())
    manifest["cuda"]["source_sha256"] = "0" * 64
    (other / "manifest.json").write_text(json.dumps(manifest))
    monkeypatch.setenv(loader.ENV_DIR, str(other))
    kind, reason, _ = fold.chosen()
    assert kind == "sglang" and "another version of gdn_fold.cu" in reason


def test_the_retired_overlay_choice_is_refused_with_what_replaced_it(fresh_choice, monkeypatch):
    monkeypatch.setenv(fold.ENV_FOLD, "overlay")
    described = fold.describe()
    assert described["fold"] == "invalid" and "RSO_FOLD=triton" in described["reason"]
