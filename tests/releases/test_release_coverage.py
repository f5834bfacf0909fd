"""A release in the table (`patcher/releases.py`) is everywhere it must appear: each
place that holds a fact per release, in RELEASING.md's order, is checked here against every release of
the table, so a release added to the table alone fails here, naming the place. What derives from the table
(setup-venv's later releases, the harness's release trees and parametrized tests, the help texts) needs no
entry of its own; the table's bytes and hook points are `test_release_table.py`'s, the release ranges the
prose states are `tests/structure/test_release_prose.py`'s, the real code of each release (configurator
rule, commit cycle) is `test_release_cycle.py`'s (minutes).

Static: the release trees are read, nothing of them is imported (the venv imports 0.5.19 only).
"""

import ast
import pathlib
import re

import pytest

from harness import cpu_redirects, gdn_kernels
from harness.release_trees import INSTALLED_RELEASE, OTHER_RELEASES
from replayssm_overlay import protocol, selfcheck
from replayssm_overlay.patcher.releases import CONV_SCATTER, RING_RELEASES, SPEC_UTILS, SUPPORTED_RELEASES

ROOT = pathlib.Path(__file__).resolve().parents[2]
RELEASING = ROOT / "RELEASING.md"


def _lock() -> dict:
    lines = (ROOT / "docker" / "base.lock").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


def _function(path: pathlib.Path, name: str):
    """The top-level function `name` of the file at `path` (its ast node), or None."""
    tree = ast.parse(path.read_text(), str(path))
    return next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name), None)


def _module_file(tree: pathlib.Path, dotted: str) -> pathlib.Path:
    """`sglang.a.b` -> <tree>/a/b.py (the tree is the `sglang` package directory)."""
    return tree.joinpath(*dotted.split(".")[1:]).with_suffix(".py")


@pytest.mark.parametrize("release", SUPPORTED_RELEASES)
def test_the_image_lock_pins_a_base_for_every_lane_of_the_release(release):
    lock = _lock()
    assert release in lock["RELEASES"].split(","), "docker/base.lock: add the release to RELEASES"
    lanes = lock.get(f"LANES_{release}", "").split(",")
    assert lanes != [""], f"docker/base.lock: no LANES_{release}"
    for lane in lanes:
        for key in (f"BASE_TAG_{release}_{lane}", f"BASE_DIGEST_{release}_{lane}", f"BASE_IMAGE_ID_{release}_{lane}"):
            assert key in lock, f"docker/base.lock: no {key}"
        assert lock[f"DRIVER_FLOOR_{lane}"], f"docker/base.lock: no driver floor for lane {lane}"


@pytest.mark.parametrize("release", SUPPORTED_RELEASES)
def test_the_protocol_reads_the_releases_kernel_package(tree_of, release):
    """`protocol.KERNEL_PACKAGES` holds the release's GDN kernel package (a release that moves its kernels
    again needs it there), and the protocol it reads is the table's (ring: the table holds the ring module)."""
    expected = protocol.RING if release in RING_RELEASES else protocol.FOLD
    assert protocol.of_tree(tree_of(release)) == expected


@pytest.mark.parametrize("release", SUPPORTED_RELEASES)
def test_the_self_check_and_the_harness_find_the_releases_recurrence(tree_of, release):
    tree = tree_of(release)
    assert any(_module_file(tree, name).is_file() for name in selfcheck.RECURRENCE_MODULES)
    harness_names = tuple(f"{package}.fused_sigmoid_gating_recurrent" for package in gdn_kernels.KERNEL_PACKAGES)
    assert harness_names == protocol.kernel_module_names("fused_sigmoid_gating_recurrent"), (
        "harness/gdn_kernels.py names other kernel packages than replayssm_overlay/protocol.py"
    )


@pytest.mark.parametrize("release", RING_RELEASES)
def test_a_ring_release_has_the_mtp_commit_the_ring_commit_calls(tree_of, release):
    module, _, function = protocol.MTP_COMMIT.rpartition(".")
    assert SPEC_UTILS.endswith(f"/{module}.py")
    assert _function(tree_of(release) / SPEC_UTILS, function) is not None, (
        f"{release}'s {SPEC_UTILS} has no {function}: hooks/ring_commit.py calls it"
    )


@pytest.mark.parametrize("release", SUPPORTED_RELEASES)
def test_the_harness_relaxes_the_releases_conv_scatter_check(tree_of, release):
    path = tree_of(release) / CONV_SCATTER
    function = _function(path, cpu_redirects.CONV_SCATTER_NAME)
    assert function is not None, f"{release}'s {CONV_SCATTER} has no {cpu_redirects.CONV_SCATTER_NAME}"
    cpu_redirects.relaxed_conv_scatter(ast.get_source_segment(path.read_text(), function))


def test_setup_installs_the_venvs_release_and_the_tables_others():
    script = (ROOT / "scripts" / "setup-venv.sh").read_text()
    assert re.findall(r"--no-deps sglang==([\d.]+)", script) == [INSTALLED_RELEASE]
    # setup-venv.sh installs SUPPORTED_RELEASES[1:] (the table, read by Python) beside the venv's own
    assert SUPPORTED_RELEASES[0] == INSTALLED_RELEASE and OTHER_RELEASES == SUPPORTED_RELEASES[1:]
    assert "SUPPORTED_RELEASES as r; print(' '.join(r[1:]))" in script


#: the files a new release may have to touch, each named in RELEASING.md (the places this test checks)
PLACES = (
    "overlay/replayssm_overlay/patcher/releases.py",
    "docker/base.lock",
    "overlay/replayssm_overlay/protocol.py",
    "harness/gdn_kernels.py",
    "harness/cpu_redirects.py",
    "harness/configurator_probe.py",
    "overlay/replayssm_overlay/patcher/hookpoints.py",
    "scripts/setup-venv.sh",
)


def test_releasing_md_names_every_place_a_release_touches():
    text = RELEASING.read_text()
    assert [place for place in PLACES if place not in text] == []
    assert all((ROOT / place).is_file() for place in PLACES)
