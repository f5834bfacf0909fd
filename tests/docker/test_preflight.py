"""Bad input is refused by `make` with one clear message before any long step: an unknown CUDA lane, the
digest placeholder, an unknown base, no Docker daemon, a local base whose digest differs from the lock,
a base that is neither local nor reachable in a registry. Plus `pin-base` with an explicit digest."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from replayssm_overlay.patcher.releases import SUPPORTED_RELEASES
from tests.docker.helpers import REPO, make

PINNED = "sha256:" + "ab" * 32


def _lock(tmp_path, repository="lmsysorg/sglang", digest="sha256:UNPINNED-run-make-pin-base", image_id=""):
    """A one-release, one-lane lock in docker/base.lock's format."""
    lock = tmp_path / "base.lock"
    lock.write_text(
        f"# test lock\nSGLANG_RELEASE=0.5.19\nBASE_REPOSITORY={repository}\nCUDA_LANE=cu130\n"
        "RELEASES=0.5.19\nLANES_0.5.19=cu130\nBASE_TAG_0.5.19_cu130=v0.5.19-cu130\n"
        f"BASE_DIGEST_0.5.19_cu130={digest}\nBASE_IMAGE_ID_0.5.19_cu130={image_id}\n"
        "DRIVER_FLOOR_cu130=580.65.06\n"
    )
    return lock


def _refused(proc, *needles):
    assert proc.returncode == 2 or "Error 2" in proc.stdout, proc.stdout
    assert "error: " in proc.stdout and "fix: " in proc.stdout, proc.stdout
    for needle in needles:
        assert needle in proc.stdout, proc.stdout


NO_DAEMON = {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}


def test_unknown_lane_is_refused(tmp_path):
    _refused(
        make(None, "build", f"BASE_LOCK={_lock(tmp_path)}", "CUDA_LANE=cu128", env=NO_DAEMON),
        "unknown CUDA lane 'cu128' for SGLang 0.5.19",
        "pin-base SGLANG_RELEASE=0.5.19 CUDA_LANE=cu128",
    )


def test_placeholder_digest_is_refused(tmp_path):
    start = time.monotonic()
    _refused(
        make(None, "build", f"BASE_LOCK={_lock(tmp_path)}", env=NO_DAEMON),
        "no verified digest for SGLang 0.5.19 lane cu130",
        "make pin-base SGLANG_RELEASE=0.5.19 CUDA_LANE=cu130",
    )
    assert time.monotonic() - start < 30


def test_unknown_base_is_refused(tmp_path):
    _refused(
        make(None, "build", f"BASE_LOCK={_lock(tmp_path, digest=PINNED)}", "BASE_IMAGE=ubuntu:22.04", env=NO_DAEMON),
        "unknown base 'ubuntu:22.04'",
        "BASE_STANDIN=true",
    )


def test_missing_daemon_is_refused(tmp_path):
    _refused(
        make(None, "build", f"BASE_LOCK={_lock(tmp_path, digest=PINNED)}", env=NO_DAEMON),
        "no Docker daemon answers at unix:///nonexistent/docker.sock",
    )
    _refused(make(None, "save", "IMAGE=x:y", env=NO_DAEMON), "no Docker daemon")


def test_pin_base_writes_only_that_lane_and_refuses_a_malformed_digest(tmp_path):
    lock = _lock(tmp_path)
    before = lock.read_text()
    _refused(make(None, "pin-base", f"BASE_LOCK={lock}", "DIGEST=sha256:1234"), "is not a sha256 digest")
    assert lock.read_text() == before
    proc = make(None, "pin-base", f"BASE_LOCK={lock}", f"DIGEST={PINNED}", env=NO_DAEMON)
    assert proc.returncode == 0, proc.stdout
    assert "old sha256:UNPINNED-run-make-pin-base" in proc.stdout and f"new {PINNED}" in proc.stdout
    assert lock.read_text() == before.replace("sha256:UNPINNED-run-make-pin-base", PINNED)


def test_pin_base_refuses_an_unreachable_registry_quickly(tmp_path):
    lock = _lock(tmp_path, repository="127.0.0.1:9/lmsysorg/sglang")
    before = lock.read_text()
    start = time.monotonic()
    _refused(
        make(None, "pin-base", f"BASE_LOCK={lock}", env=NO_DAEMON), "registry 127.0.0.1:9 is not reachable", "make save"
    )
    assert time.monotonic() - start < 30 and lock.read_text() == before


@pytest.mark.slow
def test_local_base_is_accepted_by_locked_image_id_and_refused_otherwise(dockerd, standin_base, tmp_path):
    """A base loaded from a tarball has no registry digest: the locked image ID recognises it."""
    tag = "lmsysorg/sglang:v0.5.19-cu130"
    dockerd.docker("tag", standin_base, tag)
    local_id = dockerd.docker("image", "inspect", "--format", "{{.Id}}", tag).stdout.strip()
    try:
        _refused(
            make(dockerd, "build", f"BASE_LOCK={_lock(tmp_path, digest=PINNED)}"),
            "mismatched digest",
            f"pins {PINNED}",
            "BASE_IMAGE_ID_0.5.19_cu130",
        )
        ok = subprocess.run(
            [sys.executable, str(REPO / "docker" / "tools" / "preflight.py"), "--no-pull"],
            env={**dockerd.env(), "RSO_BASE_LOCK": str(_lock(tmp_path, digest=PINNED, image_id=local_id))},
            capture_output=True,
            text=True,
        )
        assert ok.returncode == 0, ok.stderr
        assert f"release base {tag} {PINNED}" in ok.stdout
        assert "matches the locked image ID" in ok.stderr
    finally:
        dockerd.docker("rmi", tag)


@pytest.mark.slow
def test_base_neither_local_nor_in_a_reachable_registry_is_refused(dockerd, tmp_path):
    lock = _lock(tmp_path, repository="127.0.0.1:9/lmsysorg/sglang", digest=PINNED)
    start = time.monotonic()
    _refused(make(dockerd, "build", f"BASE_LOCK={lock}"), "registry 127.0.0.1:9 is not reachable", "Air-gapped sites")
    assert time.monotonic() - start < 60


def test_malformed_lock_is_refused(tmp_path):
    lock = _lock(tmp_path)
    lock.write_text(lock.read_text().replace("CUDA_LANE=cu130", "CUDA_LANE=cu130  # default"))
    _refused(make(None, "build", f"BASE_LOCK={lock}", env=NO_DAEMON), "no inline comment")
    lock.write_text(_lock(tmp_path).read_text().replace("SGLANG_RELEASE=0.5.19\n", ""))
    _refused(make(None, "build", f"BASE_LOCK={lock}", env=NO_DAEMON), "lacks SGLANG_RELEASE")


def _real_lock() -> dict[str, str]:
    sys.path.insert(0, str(REPO / "docker" / "tools"))
    try:
        from common import read_lock
    finally:
        sys.path.pop(0)
    return read_lock(REPO / "docker" / "base.lock")


REAL_LOCK = _real_lock()
PINS = [
    (release, lane) for release in REAL_LOCK["RELEASES"].split(",") for lane in REAL_LOCK[f"LANES_{release}"].split(",")
]
#: the digests known from public Dockerfiles and Docker Hub's tag API
KNOWN_DIGESTS = {
    ("0.5.19", "cu130"): "sha256:d6e7288627be8b02be88e4bba38e73f6d50e2826869f753c13a4c4385ab3eda9",
    ("0.5.19", "cu129"): "sha256:1173f6a57ac63209b1bfb054e6a7366896fd3df5539c809bbd6d332694e91d15",
}


def test_lock_pins_every_supported_release_and_only_the_verified_digests():
    assert tuple(REAL_LOCK["RELEASES"].split(",")) == SUPPORTED_RELEASES
    assert REAL_LOCK["LANES_0.5.19"] == "cu130,cu129"  # the last release with a CUDA 12 lane
    assert all(REAL_LOCK[f"LANES_{r}"] == "cu130" for r in SUPPORTED_RELEASES[1:])
    digests = {pin: REAL_LOCK[f"BASE_DIGEST_{pin[0]}_{pin[1]}"] for pin in PINS}
    assert {pin: d for pin, d in digests.items() if not d.endswith("UNPINNED-run-make-pin-base")} == KNOWN_DIGESTS
    for release, lane in PINS:
        assert REAL_LOCK[f"BASE_TAG_{release}_{lane}"] == f"v{release}-{lane}"
        assert REAL_LOCK[f"DRIVER_FLOOR_{lane}"]


@pytest.mark.parametrize("release,lane", PINS)
def test_every_release_and_lane_builds_from_the_lock_or_names_the_pin_base_command(release, lane):
    """The real lock: a verified pin gets past every static check (to the daemon, absent here); an
    unverified one is refused before anything else with the exact `make pin-base` command to run."""
    proc = make(None, "build", f"SGLANG_RELEASE={release}", f"CUDA_LANE={lane}", env=NO_DAEMON)
    if (release, lane) in KNOWN_DIGESTS:
        _refused(proc, "no Docker daemon answers")
    else:
        _refused(
            proc,
            f"no verified digest for SGLang {release} lane {lane}",
            f"`make pin-base SGLANG_RELEASE={release} CUDA_LANE={lane}`",
        )


@pytest.mark.parametrize(
    "release,message",
    [
        ("0.5.18", "unknown SGLang release '0.5.18'"),
        ("0.5.24", "unknown SGLang release '0.5.24'"),
        ("0.5.20rc1", "unknown SGLang release '0.5.20rc1'"),
    ],
)
def test_release_the_lock_does_not_list_is_refused(release, message):
    _refused(make(None, "build", f"SGLANG_RELEASE={release}", env=NO_DAEMON), message, "SGLANG_RELEASE=0.5.19 or")
    _refused(make(None, "pin-base", f"SGLANG_RELEASE={release}", "DIGEST=" + PINNED, env=NO_DAEMON), message)


def test_later_releases_have_no_cuda12_lane():
    _refused(
        make(None, "build", "SGLANG_RELEASE=0.5.23", "CUDA_LANE=cu129", env=NO_DAEMON),
        "unknown CUDA lane 'cu129' for SGLang 0.5.23",
        "LANES_0.5.23",
    )
