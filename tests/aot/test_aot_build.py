"""The ahead-of-time build on a machine without a GPU: what it writes, that it is idempotent, that a
failed or refused build leaves the old folder alone. Real NVRTC (this venv's), real kernel source."""

import json

from replayssm_overlay import __version__ as OVERLAY_VERSION
from replayssm_overlay.cliutil import sha256_file
from replayssm_overlay.kernels import artifact_format as af
from replayssm_overlay.kernels import cuda_fold, nvrtc
from tests.aot.aot_helpers import build_args, cli


def _manifest(folder):
    return json.loads((folder / af.MANIFEST_NAME).read_text())


def _snapshot(folder):
    return {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in folder.rglob("*") if p.is_file()}


def test_manifest_describes_the_build(built):
    manifest = _manifest(built)
    assert manifest["schema"] == af.SCHEMA and manifest["overlay_version"] == OVERLAY_VERSION
    cuda = manifest["cuda"]
    assert cuda["file"] == "cuda/gdn_fold.cubin" and cuda["arch"] == "sm_90" and cuda["nvrtc"] == nvrtc.version()
    assert cuda["source_sha256"] == sha256_file(nvrtc.SOURCE)
    assert set(cuda["ptxas"]) == set(cuda_fold.KERNELS.values())  # the four entry points, registers each
    assert (built / cuda["file"]).read_bytes()[:4] == b"\x7fELF"
    assert sorted(p.name for p in built.rglob("*") if p.is_file()) == ["gdn_fold.cubin", "manifest.json"]


def test_every_file_is_listed_with_its_sha256(built):
    manifest = _manifest(built)
    on_disk = {str(p.relative_to(built)) for p in built.rglob("*") if p.is_file()} - {af.MANIFEST_NAME}
    assert set(manifest["files"]) == on_disk
    for rel, digest in manifest["files"].items():
        assert sha256_file(built / rel) == digest


def test_rebuild_with_the_same_inputs_changes_nothing(artifacts):
    before = _snapshot(artifacts)
    run = cli(*build_args(artifacts), "--json")
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert result["up_to_date"] is True and result["ok"] is True and "NVRTC" in result["cuda"]
    assert _snapshot(artifacts) == before


def test_a_folder_of_another_source_or_an_older_schema_is_rebuilt(artifacts):
    path = artifacts / af.MANIFEST_NAME
    for change in (
        {"cuda": dict(_manifest(artifacts)["cuda"], source_sha256="0" * 64)},
        {"schema": "replayssm-overlay-kernels/1", "kernels": []},
    ):
        path.write_text(json.dumps({**_manifest(artifacts), **change}))
        run = cli(*build_args(artifacts), "--json")
        assert run.returncode == 0, run.stderr
        assert json.loads(run.stdout)["up_to_date"] is False
        assert _manifest(artifacts)["schema"] == af.SCHEMA
        assert _manifest(artifacts)["cuda"]["source_sha256"] == sha256_file(nvrtc.SOURCE)
    assert not [p for p in artifacts.parent.iterdir() if p.name.startswith(".")]  # no staging left


def test_without_nvrtc_nothing_is_written_and_the_fix_is_named(artifacts, tmp_path):
    """Also the failed build of a folder that was there: it stays as it was."""
    stale = artifacts / af.MANIFEST_NAME
    stale.write_text(json.dumps({**_manifest(artifacts), "overlay_version": "0.0.0"}))
    before = _snapshot(artifacts)
    for out in (artifacts, tmp_path / "new"):
        run = cli(*build_args(out), RSO_NVRTC=str(tmp_path / "no-libnvrtc.so"))
        assert run.returncode == 2 and "no NVRTC library" in run.stderr and "nvidia-cuda-nvrtc" in run.stderr
    assert _snapshot(artifacts) == before and not (tmp_path / "new").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_refuses_to_replace_a_folder_that_is_not_ours(tmp_path):
    out = tmp_path / "precious"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    run = cli(*build_args(out))
    assert run.returncode == 2 and "not a kernel artifact folder" in run.stderr
    assert [p.name for p in out.iterdir()] == ["notes.txt"] and (out / "notes.txt").read_text() == "keep me"
