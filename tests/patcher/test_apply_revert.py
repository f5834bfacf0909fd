"""apply / verify / revert / diff / status on a tree made of the real pristine 0.5.19 files."""

import json

import pytest

from replayssm_overlay import patcher
from replayssm_overlay.cliutil import sha256_bytes
from replayssm_overlay.errors import OverlayError
from replayssm_overlay.patcher import store
from replayssm_overlay.patcher.edits import is_marked
from replayssm_overlay.patcher.releases import CONFIGURATOR, DFLASH_WORKER, DSPARK_WORKER, RELEASES, TARGET_FILES


def sha_of(tree) -> dict:
    return {rel: sha256_bytes((tree / rel).read_bytes()) for rel in TARGET_FILES}


def test_installed_sglang_is_the_pinned_0_5_19(pristine_files):
    assert {rel: sha256_bytes(data) for rel, data in pristine_files.items()} == RELEASES["0.5.19"]


def test_apply_verify_diff_revert_round_trip(sglang_tree):
    before = patcher.status(sglang_tree)
    assert before["state"] == "pristine" and before["release"] == "0.5.19" and before["manifest"] is None
    assert not patcher.verify(sglang_tree)["ok"]

    kernels = {"fold": "sglang", "reason": "recorded as the caller gave it", "decided": False}
    result = patcher.apply(sglang_tree, kernels=kernels)
    assert result["changed"] and result["release"] == "0.5.19" and not result["unverified"]
    after = patcher.status(sglang_tree)
    assert after["state"] == "patched" and [f["state"] for f in after["files"]] == ["patched"] * 3
    for rel in TARGET_FILES:
        compile((sglang_tree / rel).read_bytes(), rel, "exec", dont_inherit=True)

    verdict = patcher.verify(sglang_tree)
    assert verdict["ok"], verdict["problems"]

    manifest = json.loads(store.manifest_path(sglang_tree).read_text())
    assert manifest["release"] == "0.5.19" and manifest["unverified"] is False
    assert manifest["overlay_version"] and manifest["kernels"] == kernels
    for rel, entry in manifest["files"].items():
        assert entry["sha256_before"] == RELEASES["0.5.19"][rel]
        assert entry["sha256_after"] == sha256_bytes((sglang_tree / rel).read_bytes())
        assert sha256_bytes(store.read_pristine_copy(sglang_tree, rel)) == RELEASES["0.5.19"][rel]

    text = patcher.diff(sglang_tree)
    changed = [line for line in text.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    # 3 module prologues of 5 lines; configurator guard 2 + two pool checks 2 each; two commits 2 each
    assert len(changed) == 3 * 5 + 2 + 2 * 2 + 2 * 2
    assert all(line.startswith("+") and is_marked(line.encode()) for line in changed)
    assert [line for line in text.splitlines() if line.startswith("+++")] == [
        f"+++ b/sglang/{rel}" for rel in TARGET_FILES
    ]

    reverted = patcher.revert(sglang_tree)
    assert reverted["changed"] and reverted["removed_state_dir"]
    assert sha_of(sglang_tree) == RELEASES["0.5.19"]
    assert not store.state_dir(sglang_tree).exists()
    assert patcher.status(sglang_tree)["state"] == "pristine"
    assert patcher.diff(sglang_tree) == ""


def test_apply_and_revert_are_idempotent(sglang_tree, snapshot):
    patcher.apply(sglang_tree)
    patched = snapshot(sglang_tree)
    manifest = store.manifest_path(sglang_tree).read_bytes()
    again = patcher.apply(sglang_tree)
    assert not again["changed"] and "already patched" in again["message"]
    assert snapshot(sglang_tree) == patched and store.manifest_path(sglang_tree).read_bytes() == manifest

    patcher.revert(sglang_tree)
    again = patcher.revert(sglang_tree)
    assert not again["changed"] and again["message"] == "nothing to revert"
    assert sha_of(sglang_tree) == RELEASES["0.5.19"]


def test_dry_run_checks_and_writes_nothing(sglang_tree, snapshot):
    before = snapshot(sglang_tree)
    result = patcher.apply(sglang_tree, dry_run=True)
    assert result["dry_run"] and not result["changed"]
    assert [f["action"] for f in result["files"]] == ["would patch"] * 3
    assert snapshot(sglang_tree) == before and not store.state_dir(sglang_tree).exists()


def test_apply_finishes_a_half_patched_tree_and_rewrites_a_lost_record(sglang_tree, pristine_files, snapshot):
    patcher.apply(sglang_tree)
    patched = snapshot(sglang_tree)
    store.remove_state_dir(sglang_tree)
    (sglang_tree / DSPARK_WORKER).write_bytes(pristine_files[DSPARK_WORKER])
    status = patcher.status(sglang_tree)
    assert status["state"] == "mixed" and status["manifest"] is None  # known from the bytes alone
    result = patcher.apply(sglang_tree)
    assert [f["action"] for f in result["files"]] == ["already patched", "already patched", "patched"]
    assert snapshot(sglang_tree) == patched
    assert patcher.verify(sglang_tree)["ok"]


def _tamper(tree, rel):
    path = tree / rel
    path.write_bytes(b"# a local change\n" + path.read_bytes())


@pytest.mark.parametrize("rel", TARGET_FILES)
@pytest.mark.parametrize("damage", ["tampered", "0.5.18", "missing"])
def test_refusal_leaves_all_three_files_byte_identical(sglang_tree, rel, damage, files_0518, snapshot):
    if damage == "tampered":
        _tamper(sglang_tree, rel)
    elif damage == "0.5.18":
        (sglang_tree / rel).write_bytes(files_0518[rel])
    else:
        (sglang_tree / rel).unlink()
    before = snapshot(sglang_tree)
    with pytest.raises(OverlayError) as refusal:
        patcher.apply(sglang_tree)
    message = str(refusal.value)
    assert rel in message and "no file was changed" in message
    if damage != "missing":
        assert sha256_bytes((sglang_tree / rel).read_bytes()) in message
        assert f"{RELEASES['0.5.19'][rel]} for SGLang 0.5.19" in message
        assert "--allow-unverified" in message
    assert snapshot(sglang_tree) == before
    assert not store.state_dir(sglang_tree).exists()
    assert patcher.status(sglang_tree)["state"] == "unknown"


def test_allow_unverified_patches_a_structurally_fine_file_and_records_it(sglang_tree):
    _tamper(sglang_tree, DFLASH_WORKER)
    tampered = (sglang_tree / DFLASH_WORKER).read_bytes()
    result = patcher.apply(sglang_tree, allow_unverified=True)
    assert result["changed"] and result["unverified"] and result["release"] == "0.5.19"
    manifest = json.loads(store.manifest_path(sglang_tree).read_text())
    assert manifest["unverified"] is True
    assert manifest["files"][DFLASH_WORKER]["unverified"] is True
    assert manifest["files"][DFLASH_WORKER]["sha256_before"] == sha256_bytes(tampered)
    assert manifest["files"][CONFIGURATOR]["unverified"] is False

    status = patcher.status(sglang_tree)
    assert status["unverified"] and status["state"] == "patched"
    assert not patcher.verify(sglang_tree)["ok"]
    assert patcher.verify(sglang_tree, allow_unverified=True)["ok"]
    assert not patcher.apply(sglang_tree, allow_unverified=True)["changed"]

    patcher.revert(sglang_tree)
    assert (sglang_tree / DFLASH_WORKER).read_bytes() == tampered
    assert sha256_bytes((sglang_tree / CONFIGURATOR).read_bytes()) == RELEASES["0.5.19"][CONFIGURATOR]


def test_allow_unverified_still_refuses_a_file_without_its_hook_point(sglang_tree, snapshot):
    path = sglang_tree / DSPARK_WORKER
    path.write_bytes(path.read_bytes().replace(b"class DSparkWorkerV2(", b"class Renamed("))
    before = snapshot(sglang_tree)
    with pytest.raises(OverlayError, match=f"{DSPARK_WORKER}: no hook point: expected one top-level class"):
        patcher.apply(sglang_tree, allow_unverified=True)
    assert snapshot(sglang_tree) == before and not store.state_dir(sglang_tree).exists()


def test_a_failed_write_restores_the_files_written_before_it(sglang_tree, monkeypatch):
    """Fault injection: a disk that fails on the third file cannot be produced on demand here, so the
    module writer is made to fail for that one path."""
    real_write = store.write_module

    def failing_write(path, data):
        if path == sglang_tree / DSPARK_WORKER:
            raise OSError(28, "No space left on device")
        real_write(path, data)

    monkeypatch.setattr(store, "write_module", failing_write)
    with pytest.raises(OverlayError, match="restored srt/speculative/dflash_worker_v2.py"):
        patcher.apply(sglang_tree)
    assert sha_of(sglang_tree) == RELEASES["0.5.19"]
    assert not store.state_dir(sglang_tree).exists()


def test_revert_refuses_a_patched_file_that_changed_afterwards(sglang_tree, snapshot):
    patcher.apply(sglang_tree)
    path = sglang_tree / CONFIGURATOR
    path.write_bytes(path.read_bytes() + b"# edited after patching\n")
    before = snapshot(sglang_tree)
    with pytest.raises(OverlayError, match=f"{CONFIGURATOR}: carries replayssm-overlay lines"):
        patcher.revert(sglang_tree)
    assert snapshot(sglang_tree) == before and store.manifest_path(sglang_tree).exists()
    problems = patcher.verify(sglang_tree)["problems"]
    assert any(problem.startswith(f"{CONFIGURATOR}: unknown") for problem in problems)


def test_verify_notices_a_damaged_record(sglang_tree):
    patcher.apply(sglang_tree)
    store.pristine_copy_path(sglang_tree, DFLASH_WORKER).write_bytes(b"not the pristine file\n")
    problems = patcher.verify(sglang_tree)["problems"]
    assert problems == [f"{DFLASH_WORKER}: the saved pristine copy is missing or differs from the pristine base"]
    store.manifest_path(sglang_tree).write_text("{")
    assert "is unreadable" in patcher.verify(sglang_tree)["problems"][0]
    # revert does not trust a bad copy: it rebuilds the pristine bytes and checks them against the table
    patcher.revert(sglang_tree)
    assert sha_of(sglang_tree) == RELEASES["0.5.19"]


def test_writes_keep_permissions_and_drop_stale_bytecode(sglang_tree):
    path = sglang_tree / DFLASH_WORKER
    path.chmod(0o640)
    cached = path.parent / "__pycache__" / f"{path.stem}.cpython-311.pyc"
    cached.parent.mkdir()
    cached.write_bytes(b"bytecode of the pristine module")
    patcher.apply(sglang_tree)
    assert path.stat().st_mode & 0o777 == 0o640 and not cached.exists()
    cached.write_bytes(b"bytecode of the patched module")
    (cached.parent / f"{path.stem}.cpython-312.pyc").write_bytes(b"bytecode of the patched module, another Python")
    patcher.revert(sglang_tree)
    assert path.stat().st_mode & 0o777 == 0o640 and sorted(cached.parent.iterdir()) == [cached]
    assert cached.read_bytes() == b"bytecode of the pristine module"


def _files(tree) -> dict:
    """relpath -> bytes of every file under `tree`, and the three target files' modification times."""
    return {
        **{str(p.relative_to(tree)): p.read_bytes() for p in sorted(tree.rglob("*")) if p.is_file()},
        **{f"{rel} mtime": (tree / rel).stat().st_mtime_ns for rel in TARGET_FILES},
    }


def test_revert_gives_the_tree_back_byte_for_byte_with_valid_bytecode(sglang_tree):
    """Pristine modules compiled as pip compiles them, then apply, Python compiling the patched modules at
    import, and revert: every file's bytes, and the modules' modification times, are as before, and each restored
    bytecode file still names its source's time and size (so Python keeps using it)."""
    import py_compile

    for rel in TARGET_FILES:
        py_compile.compile(str(sglang_tree / rel), doraise=True)
    before = _files(sglang_tree)
    patcher.apply(sglang_tree)
    for rel in TARGET_FILES:
        py_compile.compile(str(sglang_tree / rel), doraise=True)
    assert _files(sglang_tree) != before
    patcher.revert(sglang_tree)
    assert _files(sglang_tree) == before and not store.state_dir(sglang_tree).exists()
    for rel in TARGET_FILES:
        source = sglang_tree / rel
        (cached,) = store.cached_bytecode(source)
        header = cached.read_bytes()[8:16]
        assert header == (int(source.stat().st_mtime) & 0xFFFFFFFF).to_bytes(4, "little") + (
            source.stat().st_size & 0xFFFFFFFF
        ).to_bytes(4, "little")


def test_lines_from_another_overlay_version_are_reverted_not_overwritten(sglang_tree, snapshot):
    """A file whose marked lines differ from what this version writes (an older overlay's hook call) is
    refused by apply, and revert restores its pristine bytes because only marked lines differ."""
    patcher.apply(sglang_tree)
    path = sglang_tree / DFLASH_WORKER
    path.write_bytes(path.read_bytes().replace(b"_rso_hooks.dflash_commit(", b"_rso_hooks.old_dflash_commit("))
    assert patcher.status(sglang_tree)["files"][1]["state"] == "unknown"
    before = snapshot(sglang_tree)
    with pytest.raises(OverlayError, match="Run `replayssm-overlay revert` first"):
        patcher.apply(sglang_tree)
    assert snapshot(sglang_tree) == before
    patcher.revert(sglang_tree)
    assert sha_of(sglang_tree) == RELEASES["0.5.19"]


def test_an_apply_that_fails_midway_gives_the_tree_back_byte_for_byte(sglang_tree, monkeypatch):
    """The manifest's write fails after both commit modules were written: the rollback puts back their
    bytes, modification times and the cached bytecode their writes deleted."""
    import py_compile

    for rel in TARGET_FILES:
        py_compile.compile(str(sglang_tree / rel), doraise=True)
    before = _files(sglang_tree)
    write_record_file = store.write_record_file

    def failing(path, data):
        if path == store.manifest_path(sglang_tree):
            raise OSError(28, "No space left on device", str(path))
        write_record_file(path, data)

    monkeypatch.setattr(store, "write_record_file", failing)
    with pytest.raises(OverlayError, match="every file is as it was before the run"):
        patcher.apply(sglang_tree)
    assert _files(sglang_tree) == before and not store.state_dir(sglang_tree).exists()
