"""The entry point's default choice on a node whose prebuilt kernels match: `fold.chosen()` opens the
artifact folder, finds the commit kernel's binaries and says `overlay-prebuilt`, and a commit through
`fold_accepted_prefix` then runs exactly one launch of a prebuilt binary (no SGLang fallback).

Why this exists: the GPU integration run once found `fold._decide` asking the artifact set for a kernel
the one-launch commit had removed, so every prebuilt decision raised; no CPU test went through that
decision. CPU only: the node's GPU architecture (no GPU here) is given as sm_90, and the binary's launch
is recorded by a stand-in for Triton's CompiledKernel (conftest `recorded`); what the kernel
computes is checked on the GPU (benchmarks/gpu_commit.py).
"""

import json
import shutil
import sys

import pytest
import torch

from replayssm_overlay import fold, records
from replayssm_overlay.kernels import artifact_format, loader
from tests.aot.test_aot_loader import facts
from tests.aot.test_commit_prebuilt import _pool


@pytest.fixture
def fresh_choice(monkeypatch, built_overlay, compiled_modules, recorded, tmp_path):
    """The fold undecided, pointed at the build, with the compiled kernel modules the decision imports."""
    import replayssm_overlay.kernels as package

    compiled_fold, _conv = compiled_modules
    monkeypatch.setattr(package, "gdn_fold", compiled_fold)
    monkeypatch.setitem(sys.modules, "replayssm_overlay.kernels.gdn_fold", compiled_fold)
    monkeypatch.setattr(loader.NodeFacts, "current", classmethod(lambda cls, arch=None: facts()))
    monkeypatch.setenv(loader.ENV_DIR, str(built_overlay))
    monkeypatch.setenv(records.ENV_DIR, str(tmp_path / "state"))
    monkeypatch.delenv(fold.ENV_FOLD, raising=False)
    monkeypatch.setattr(fold, "_choice", None)
    monkeypatch.setattr(fold, "_plans", {})
    monkeypatch.setattr(fold, "_fallbacks", {})
    return recorded[1]  # the prebuilt launches, recorded


def test_the_default_choice_is_the_prebuilt_commit_and_one_launch_runs_it(fresh_choice, built_overlay):
    kind, reason, artifacts = fold.chosen()
    assert kind == "overlay-prebuilt", reason
    assert artifacts is not None and artifacts.folder == built_overlay
    pool = _pool(hv=32, h=16, window=16)
    slots = torch.tensor([2, -1, 5], dtype=torch.int32)
    lens = torch.tensor([16, 1, 7], dtype=torch.int32)
    fold.fold_accepted_prefix(spec_state=pool, state_batch_indices=slots, accept_lens=lens)
    assert len(fresh_choice) == 1, fresh_choice
    spec, grid, _args = fresh_choice[0]
    assert "track=False" in spec["label"] and grid == (128 // 16, 3, 32 * 3)
    assert fold.fallbacks() == [] and fold.describe()["fold"] == "overlay-prebuilt"


def test_a_folder_without_the_commit_kernel_is_not_chosen(fresh_choice, monkeypatch, tmp_path):
    """The decision asks the folder for the commit kernel itself: a build of another kernel only (here:
    an empty kernel list) is refused with the reason, and the default falls back to SGLang's commit."""
    other = tmp_path / "artifacts"
    shutil.copytree(loader.artifact_dir(), other)
    manifest = json.loads((other / "manifest.json").read_text())
    manifest["kernels"] = []
    (other / "manifest.json").write_text(json.dumps(manifest))
    monkeypatch.setenv(loader.ENV_DIR, str(other))
    kind, reason, artifacts = fold.chosen()
    assert kind == "sglang" and artifacts is None
    assert "no prebuilt binaries for kernel gdn_replayssm_fold_kernel" in reason


def test_the_build_holds_the_cuda_kernel_and_a_node_that_cannot_load_it_commits_with_triton(fresh_choice, caplog):
    """The default build compiles the CUDA commit kernel (NVRTC is in the test venv, as in the image). The
    decision tries it first; this machine has no GPU driver, so loading it fails for real, the reason is
    logged once, and the Triton kernel's binaries are chosen."""
    manifest = json.loads((loader.artifact_dir() / "manifest.json").read_text())
    assert manifest["cuda"]["file"] == "cuda/gdn_fold.cubin" and manifest["cuda"]["arch"] == "sm_90"
    assert manifest["cuda"]["file"] in manifest["files"]  # checksummed like every other binary
    used = sorted({e["registers"] for e in manifest["cuda"]["ptxas"].values()})  # 16 and 12 warps per SM
    summary = artifact_format.cuda_summary(manifest["cuda"])
    assert len(used) == 2 and f"{used[0]}-{used[1]} registers per thread" in summary, summary
    with caplog.at_level("WARNING", logger="replayssm_overlay.fold"):
        kind, reason, _ = fold.chosen()
    assert kind == "overlay-prebuilt", reason
    assert [r.message for r in caplog.records if "CUDA commit kernel is not used" in r.message], caplog.text


def test_rso_fold_triton_never_tries_the_cuda_kernel(fresh_choice, monkeypatch, caplog):
    monkeypatch.setenv(fold.ENV_FOLD, "triton")
    assert fold.describe()["fold"] == "overlay-prebuilt"  # undecided: what the settings point to
    with caplog.at_level("WARNING", logger="replayssm_overlay.fold"):
        kind, _, _ = fold.chosen()
    assert kind == "overlay-prebuilt" and "CUDA" not in caplog.text


@pytest.mark.parametrize("change", ["skipped", "other source"])
def test_a_folder_without_a_current_cuda_kernel_refuses_it_with_the_reason(fresh_choice, monkeypatch, tmp_path, change):
    other = tmp_path / "artifacts"
    shutil.copytree(loader.artifact_dir(), other)
    manifest = json.loads((other / "manifest.json").read_text())
    if change == "skipped":
        manifest["cuda"] = {"source_sha256": manifest["cuda"]["source_sha256"], "columns": 16,
                            "skipped": "no NVRTC library (libnvrtc.so) found"}
    else:
        manifest["cuda"]["source_sha256"] = "0" * 64
    (other / "manifest.json").write_text(json.dumps(manifest))
    artifacts = loader.ArtifactSet.open(other, facts())
    with pytest.raises(loader.ArtifactRefused, match="no NVRTC" if change == "skipped" else "another version"):
        artifacts.cuda_kernels()
    monkeypatch.setenv(loader.ENV_DIR, str(other))
    assert fold.describe()["fold"] == ("overlay-prebuilt" if change == "skipped" else "overlay-cuda")
    assert fold.chosen()[0] == "overlay-prebuilt"
