"""The loader: which folder, the node checks and their reasons, the kernel's source check. CPU only: loading
the cubin needs the GPU's driver (tests/kernels/test_cuda_fold.py, `gpu`)."""

import json
from pathlib import Path

import pytest

from replayssm_overlay.errors import NotCovered, OverlayError
from replayssm_overlay.kernels import artifact_format as af
from replayssm_overlay.kernels import loader


def refusal(folder, arch=90) -> str:
    with pytest.raises(NotCovered) as caught:
        loader.ArtifactSet.open(folder, arch)
    assert isinstance(caught.value, OverlayError) and "kernels build" in caught.value.fix
    assert "SGLang's fold commits" in caught.value.fix
    return caught.value.what


def _edit_manifest(folder, **change):
    path = folder / af.MANIFEST_NAME
    path.write_text(json.dumps({**json.loads(path.read_text()), **change}))


def test_folder_comes_from_argument_then_env_then_default(monkeypatch, tmp_path):
    monkeypatch.delenv(loader.ENV_DIR, raising=False)
    assert loader.artifact_dir() == Path("/opt/replayssm-overlay/kernels")
    monkeypatch.setenv(loader.ENV_DIR, str(tmp_path))
    assert loader.artifact_dir() == tmp_path
    assert loader.artifact_dir(tmp_path / "x") == tmp_path / "x"


def test_matching_node_opens_and_hands_out_the_cuda_kernel(built):
    artifacts = loader.ArtifactSet.open(built, 90)
    assert artifacts.folder == built and af.summary(artifacts.manifest)["cuda"].startswith("built with NVRTC")
    kernels = artifacts.cuda_kernels()  # loaded by the driver only when the fold is chosen (needs a GPU)
    assert kernels.kind == "overlay-cuda" and kernels.cubin == (built / "cuda/gdn_fold.cubin").read_bytes()


def test_refuses_another_arch_and_a_node_without_gpu(built):
    assert "built for sm_90, this GPU is sm_80" in refusal(built, arch=80)
    assert "no CUDA device is visible" in refusal(built, arch=None) or loader.gpu_arch() is not None


def test_refuses_a_changed_file(artifacts):
    cubin = artifacts / "cuda/gdn_fold.cubin"
    data = bytearray(cubin.read_bytes())
    data[100] ^= 1
    cubin.write_bytes(bytes(data))
    assert "file cuda/gdn_fold.cubin does not match its sha256" in refusal(artifacts)


def test_refuses_a_missing_file_folder_or_manifest(artifacts, tmp_path):
    (artifacts / "cuda/gdn_fold.cubin").unlink()
    assert "file cuda/gdn_fold.cubin is missing" in refusal(artifacts)
    assert "does not exist" in refusal(tmp_path / "nowhere")
    (artifacts / af.MANIFEST_NAME).unlink()
    assert "no manifest.json" in refusal(artifacts)


def test_refuses_a_folder_of_the_retired_triton_binaries(artifacts):
    """A folder built before the prebuilt Triton binaries were retired (schema 1) is rebuilt, not read."""
    _edit_manifest(artifacts, schema="replayssm-overlay-kernels/1")
    assert "schema 'replayssm-overlay-kernels/1', expected 'replayssm-overlay-kernels/2'" in refusal(artifacts)


def test_refuses_a_cuda_kernel_of_another_source_or_none(artifacts):
    manifest = json.loads((artifacts / af.MANIFEST_NAME).read_text())
    _edit_manifest(artifacts, cuda=dict(manifest["cuda"], source_sha256="0" * 64))
    assert "built from another version of gdn_fold.cu" in refusal(artifacts)
    _edit_manifest(artifacts, cuda={})
    assert f"no CUDA commit kernel in {artifacts}" in refusal(artifacts)


def test_the_cuda_kernels_summary_says_when_ptxas_reported_no_registers():
    """An NVRTC whose log has no ptxas lines leaves the registers unknown: the summary says so instead of
    "0 registers per thread" (which reads like a broken kernel)."""
    entry = {"file": "cuda/gdn_fold.cubin", "nvrtc": "13.0", "arch": "sm_90"}
    unknown = dict(entry, ptxas={"gdn_fold_conv2": {"registers": None, "spill_bytes": 0}})
    assert af.cuda_summary(unknown).endswith("registers per thread not reported by this NVRTC")
    assert af.cuda_summary(dict(entry, ptxas={})).endswith("not reported by this NVRTC")
    known = dict(entry, ptxas={"gdn_fold_conv2": {"registers": 128}, "gdn_fold_conv2_track": {"registers": 168}})
    assert af.cuda_summary(known).endswith(", 128-168 registers per thread")
