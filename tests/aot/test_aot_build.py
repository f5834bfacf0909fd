"""The ahead-of-time build on a machine without a GPU: what it writes, that it is idempotent, that a
failed or refused build leaves the old folder alone. Real Triton (this venv's), real gcc, real kernel.
(Triton is imported inside tests, never at collection: tests/kernels switches Triton's interpreter on in
its conftest, which only works if Triton was not imported before.)"""

import json
import os
import subprocess
import sys

import pytest

from replayssm_overlay.errors import OverlayError
from replayssm_overlay.aot import build as aot
from replayssm_overlay.cliutil import sha256_file
from replayssm_overlay.kernels import artifact_format as af
from tests.aot.aot_helpers import build_args, child_env, cli


def _manifest(folder):
    return json.loads((folder / af.MANIFEST_NAME).read_text())


def _snapshot(folder):
    return {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in folder.rglob("*") if p.is_file()}


def test_manifest_describes_the_build(built):
    import triton

    manifest = _manifest(built)
    assert manifest["schema"] == af.SCHEMA
    assert manifest["builder"]["triton"] == triton.__version__
    assert manifest["builder"]["python"] == af.python_tag()
    assert manifest["target"] == {"backend": "cuda", "arch": 90, "warp_size": 32}
    (kernel,) = manifest["kernels"]
    assert set(kernel) == {"name", "module", "source_key", "arg_names", "specializations"}  # artifact_format's doc
    assert kernel["name"] == "gdn_replayssm_exact_fold_kernel"
    assert len(kernel["source_key"]) == 64 and kernel["arg_names"][0] == "h0"
    specs = kernel["specializations"]
    assert sorted(s["constexprs"]["HAS_TRACK"] for s in specs) == [False, True]
    for spec in specs:
        assert spec["constexprs"]["HV"] == 32 and spec["constexprs"]["MAX_CACHE_LEN"] == 16
        assert spec["signature"]["h0"] == "*fp32" and spec["signature"]["HV"] == "constexpr"
        assert spec["attrs"]["h0"] == [["tt.divisibility", 16]]
        assert spec["options"] == {"num_warps": 1, "num_stages": 3}
        meta = json.loads((built / spec["files"]["json"]).read_text())
        assert meta["target"]["arch"] == 90 and meta["num_warps"] == 1
        assert (built / spec["files"]["cubin"]).read_bytes()[:4] == b"\x7fELF"


def test_every_file_is_listed_with_its_sha256(built):
    manifest = _manifest(built)
    on_disk = {str(p.relative_to(built)) for p in built.rglob("*") if p.is_file()} - {af.MANIFEST_NAME}
    assert set(manifest["files"]) == on_disk
    for rel, digest in manifest["files"].items():
        assert sha256_file(built / rel) == digest


def test_launcher_modules_are_built_for_this_python_and_keep_libcuda(built):
    modules = {m["name"]: m for m in _manifest(built)["modules"]}
    assert "cuda_utils" in modules
    for module in modules.values():
        path = built / module["file"]
        assert path.parent.name == module["key"] and path.name.startswith(module["name"] + ".cpython-")
        data = path.read_bytes()
        assert data[:4] == b"\x7fELF"
        assert b"libcuda.so.1" in data  # NEEDED entry kept (--no-as-needed), or it would not import on a GPU node


def test_rebuild_with_the_same_inputs_changes_nothing(artifacts):
    before = _snapshot(artifacts)
    run = cli(*build_args(artifacts), "--json")
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert result["up_to_date"] is True and result["compiled"] == 0
    assert _snapshot(artifacts) == before


def test_changed_inputs_rebuild_only_what_changed(artifacts):
    old_ids = {s["id"] for s in _manifest(artifacts)["kernels"][0]["specializations"]}
    args = build_args(artifacts)
    args[args.index("--window") + 1 :] = ["8", "16"]
    run = cli(*args, "--json")
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert (result["compiled"], result["reused"]) == (2, 2)
    specs = _manifest(artifacts)["kernels"][0]["specializations"]
    assert old_ids < {s["id"] for s in specs} and len(specs) == 4
    assert sorted({s["constexprs"]["MAX_CACHE_LEN"] for s in specs}) == [8, 16]
    assert not [p for p in artifacts.parent.iterdir() if p.name.startswith(".")]  # no staging left


BROKEN_PROVIDER = """
from benchmarks.aot_sglang_fold import aot_specializations as proof


def aot_specializations(hv, h, k, v, window):
    good = proof(hv, h, k, v, window)
    broken = dict(good[0], constexprs=dict(good[0]["constexprs"], BK=96), label="broken")  # arange of 96: error
    return good + [broken]
"""


def test_a_failed_compile_leaves_the_old_folder_intact(artifacts, tmp_path):
    before = _snapshot(artifacts)
    (tmp_path / "broken_provider.py").write_text(BROKEN_PROVIDER)
    args = build_args(artifacts)
    args[args.index("--provider") + 1] = "broken_provider:aot_specializations"
    env = child_env()
    env["PYTHONPATH"] += os.pathsep + str(tmp_path)
    run = subprocess.run([sys.executable, "-m", "replayssm_overlay", *args], capture_output=True,
                         text=True, env=env, timeout=300)
    assert run.returncode != 0 and "[3/3] compile" in run.stdout
    assert _snapshot(artifacts) == before
    assert not [p for p in artifacts.parent.iterdir() if p.name.startswith(".")]


def test_refuses_to_build_under_triton_s_interpreter(tmp_path):
    run = subprocess.run([sys.executable, "-m", "replayssm_overlay", *build_args(tmp_path / "out")],
                         capture_output=True, text=True, env=dict(child_env(), TRITON_INTERPRET="1"), timeout=300)
    assert run.returncode == 2 and "unset TRITON_INTERPRET" in run.stderr
    assert not (tmp_path / "out").exists()


def test_refuses_to_replace_a_folder_that_is_not_ours(tmp_path):
    out = tmp_path / "precious"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    run = cli(*build_args(out))
    assert run.returncode == 2 and "not a kernel artifact folder" in run.stderr
    assert [p.name for p in out.iterdir()] == ["notes.txt"] and (out / "notes.txt").read_text() == "keep me"


def test_tp_sizes_must_divide_the_heads():
    shapes = aot.shapes_for(aot.PRESETS["qwen3-next-80b-a3b"], [1, 2, 4, 8])
    assert [(s.hv, s.h) for s in shapes] == [(32, 16), (16, 8), (8, 4), (4, 2)]
    with pytest.raises(OverlayError, match="does not divide"):
        aot.shapes_for(aot.PRESETS["qwen3.5-35b-a3b"], [3])


def test_incomplete_provider_entries_are_refused(fold_module):
    kernel = fold_module.gdn_replayssm_exact_fold_kernel
    with pytest.raises(OverlayError, match="neither a type nor a constexpr"):
        aot.normalize({"kernel": kernel, "signature": {}, "constexprs": {}}, "empty")
    with pytest.raises(OverlayError, match="no @triton.jit"):
        aot.normalize({"signature": {}}, "no kernel")



