"""The release table (patcher/releases.py) against each release's real wheel contents, and the refusals
for trees that are not exactly a supported release (fingerprint files changed, a nightly, files mixed
from two releases): each names the file that differs, says what --allow-unverified does, writes nothing.

The refusal tests run on a throw-away tree holding only a release's table files (copied from its real
tree), so nothing is written to an installed SGLang.
"""

import pathlib
import shutil

import pytest

from replayssm_overlay import patcher
from replayssm_overlay.cliutil import sha256_bytes
from replayssm_overlay.errors import OverlayError
from replayssm_overlay.patcher import store
from replayssm_overlay.patcher.releases import (
    DFLASH_WORKER,
    MAMBA_POOL,
    RELEASE_FILES,
    SPEC_UTILS,
    SUPPORTED_RELEASES,
    TARGET_FILES,
)


@pytest.mark.parametrize("release", SUPPORTED_RELEASES)
def test_table_holds_the_wheels_bytes(tree_of, release):
    tree = tree_of(release)
    assert {rel: sha256_bytes((tree / rel).read_bytes()) for rel in RELEASE_FILES[release]} == RELEASE_FILES[release]


@pytest.mark.parametrize("release", SUPPORTED_RELEASES)
def test_apply_identifies_the_release_and_finds_every_hook_point(tree_of, release):
    result = patcher.apply(tree_of(release), dry_run=True)
    assert result["release"] == release and not result["unverified"]
    assert [f["action"] for f in result["files"]] == ["would patch"] * len(TARGET_FILES)


def test_the_releases_are_told_apart_by_every_patched_file():
    for rel in TARGET_FILES:
        shas = [RELEASE_FILES[release][rel] for release in SUPPORTED_RELEASES]
        assert len(set(shas)) == len(shas), rel


def _mini_tree(tmp_path, tree, release, version=None) -> pathlib.Path:
    root = tmp_path / "site-packages" / "sglang"
    for rel in RELEASE_FILES[release]:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(tree / rel, root / rel)
    if version:
        (root / "_version.py").write_text(f'__version__ = "{version}"\n')
    return root


def _files(root: pathlib.Path) -> dict:
    return {p.relative_to(root): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _refused(root, **kwargs) -> str:
    before = _files(root)
    with pytest.raises(OverlayError) as caught:
        patcher.apply(root, **kwargs)
    assert _files(root) == before and not store.state_dir(root).exists()  # nothing written
    return str(caught.value)


@pytest.mark.parametrize("release", ("0.5.19", "0.5.23"))
def test_a_changed_fingerprint_file_is_refused_naming_it(tmp_path, tree_of, release):
    root = _mini_tree(tmp_path, tree_of(release), release)
    (root / SPEC_UTILS).write_bytes((root / SPEC_UTILS).read_bytes() + b"# local hotfix\n")
    message = _refused(root)
    assert SPEC_UTILS in message and RELEASE_FILES[release][SPEC_UTILS] in message
    assert "--allow-unverified" in message and f"sglang=={release}" in message


def test_allow_unverified_patches_it_and_records_the_mismatch(tmp_path, tree_of):
    root = _mini_tree(tmp_path, tree_of("0.5.23"), "0.5.23")
    (root / MAMBA_POOL).unlink()
    result = patcher.apply(root, allow_unverified=True)
    assert result["release"] == "0.5.23" and result["unverified"]
    manifest, _ = store.read_manifest(root)
    assert [m["relpath"] for m in manifest["fingerprint_mismatches"]] == [MAMBA_POOL]
    assert manifest["fingerprint_mismatches"][0]["found"] is None
    problems = patcher.verify(root)["problems"]
    assert any(MAMBA_POOL in p and "--allow-unverified" in p for p in problems)
    assert patcher.verify(root, allow_unverified=True)["ok"]
    assert patcher.status(root)["unverified"]


def test_a_nightly_is_refused_with_the_release_it_looks_like(tmp_path, tree_of):
    root = _mini_tree(tmp_path, tree_of("0.5.23"), "0.5.23", version="0.5.24.dev3")
    (root / DFLASH_WORKER).write_bytes((root / DFLASH_WORKER).read_bytes() + b"\n# nightly change\n")
    message = _refused(root)
    assert "declared version 0.5.24.dev3" in message and "looks most like SGLang 0.5.23" in message
    assert f"{DFLASH_WORKER}: sha256" in message and "--allow-unverified" in message


def test_files_mixed_from_two_releases_are_refused_naming_the_stranger(tmp_path, tree_of):
    root = _mini_tree(tmp_path, tree_of("0.5.21"), "0.5.21", version="0.5.21")
    shutil.copyfile(tree_of("0.5.22") / MAMBA_POOL, root / MAMBA_POOL)
    message = _refused(root)
    assert MAMBA_POOL in message and RELEASE_FILES["0.5.21"][MAMBA_POOL] in message
    assert RELEASE_FILES["0.5.22"][MAMBA_POOL] in message  # what was found


def test_the_image_lock_pins_exactly_the_supported_releases():
    """docker/base.lock's RELEASES (the images' list) is the patcher's SUPPORTED_RELEASES."""
    lock = pathlib.Path(__file__).resolve().parents[2] / "docker" / "base.lock"
    lines = [line for line in lock.read_text().splitlines() if line.startswith("RELEASES=")]
    assert len(lines) == 1 and tuple(lines[0].split("=", 1)[1].split(",")) == SUPPORTED_RELEASES
