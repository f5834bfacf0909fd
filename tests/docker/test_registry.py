"""The registry path for real, against a local registry (Debian's docker-registry on loopback):
`make pin-base` resolving a base tag there (old and new digest printed; a tag pushed over with other
bytes shows as a new digest); `make build` pulling its base by digest (no stand-in flags: the release
path); `make push` and a pull back by the printed digest; a digest the registry lacks, a registry that
serves other bytes under the digest, and a registry that answers a push with an error: each refused
with one message, nothing built or pushed."""

from __future__ import annotations

import json
import re

import pytest

from tests.docker import standin
from tests.docker.helpers import make
from tests.infra.registry import start_registry

pytestmark = pytest.mark.slow

PLACEHOLDER = "sha256:UNPINNED-run-make-pin-base"


def _lock(tmp_path, repository, digest=PLACEHOLDER):
    lock = tmp_path / "base.lock"
    lock.write_text(
        f"# a lock in docker/base.lock's format, on the test registry\nSGLANG_RELEASE=0.5.19\n"
        f"BASE_REPOSITORY={repository}\nCUDA_LANE=cu130\nRELEASES=0.5.19\nLANES_0.5.19=cu130\n"
        f"BASE_TAG_0.5.19_cu130=v0.5.19-cu130\nBASE_DIGEST_0.5.19_cu130={digest}\n"
        "BASE_IMAGE_ID_0.5.19_cu130=\nDRIVER_FLOOR_cu130=580.65.06\n"
    )
    return lock


def _forget(dockerd, repository):
    """Drop every local reference into `repository` (tags and digests), so the next use must pull."""
    listed = dockerd.docker(
        "image", "ls", "--digests", "--format", "{{.Repository}} {{.Tag}} {{.Digest}}", repository
    ).stdout.split("\n")
    for line in filter(None, listed):
        repo, tag, digest = line.split()
        refs = [f"{repo}:{tag}"] if tag != "<none>" else []
        refs += [f"{repo}@{digest}"] if digest != "<none>" else []
        for ref in refs:
            dockerd.docker("image", "rm", ref, check=False)


def _pinned(lock) -> str:
    return re.search(r"^BASE_DIGEST_0\.5\.19_cu130=(\S+)$", lock.read_text(), re.M).group(1)


def test_base_pinned_and_pulled_by_digest_then_the_image_pushed_and_pulled_back(dockerd, registry, tmp_path):
    """One round trip (pushing a base is the slow part, so it happens once, with the small stand-in
    without the kernels toolchain): push the base, `make pin-base` (old and new printed), `make build`
    pulling the base by digest, `make push` of the image and a pull back by the printed digest, then
    other bytes pushed over the base's tag, which the next `pin-base` shows as a change."""
    base = standin.build_standin(dockerd, "0.5.19", tag="rso-standin-sglang:0.5.19-plain", toolchain=False)
    repository = f"{registry.address}/lmsysorg/sglang"
    tag = f"{repository}:v0.5.19-cu130"
    image, pushed_repository = "rso-test-from-registry:x", f"{registry.address}/ml/rso-test-from-registry"
    dockerd.docker("tag", base, tag)
    dockerd.docker("push", tag, timeout=600)
    lock = _lock(tmp_path, repository)
    try:
        proc = make(dockerd, "pin-base", f"BASE_LOCK={lock}")  # no buildx/crane here: pull + RepoDigests
        assert proc.returncode == 0, proc.stdout[-3000:]
        digest = _pinned(lock)
        assert re.fullmatch(r"sha256:[0-9a-f]{64}", digest)
        assert f"old {PLACEHOLDER}" in proc.stdout and f"new {digest}" in proc.stdout

        _forget(dockerd, repository)  # the build must pull the base, by the locked digest
        proc = make(
            dockerd, "build", f"BASE_LOCK={lock}", "KERNELS=skip", f"BUILD_DIR={tmp_path / 'b'}", f"IMAGE={image}"
        )
        assert proc.returncode == 0, proc.stdout[-4000:]
        assert f"pulling {tag}@{digest} by digest" in proc.stdout
        labels = json.loads(dockerd.docker("image", "inspect", "--format", "{{json .Config.Labels}}", image).stdout)
        assert labels["org.opencontainers.image.base.digest"] == digest
        assert labels["org.opencontainers.image.base.name"] == tag
        assert labels["org.replayssm.base.standin"] == "false"

        built = dockerd.docker("image", "inspect", "--format", "{{.Id}}", image).stdout.strip()
        proc = make(dockerd, "push", f"IMAGE={image}", f"REGISTRY={registry.address}/ml")
        assert proc.returncode == 0, proc.stdout[-3000:]
        pushed = re.search(r"deploy by digest: (\S+)", proc.stdout).group(1)
        assert re.fullmatch(re.escape(pushed_repository) + r"@sha256:[0-9a-f]{64}", pushed), pushed
        _forget(dockerd, pushed_repository)
        dockerd.docker("image", "rm", image)
        dockerd.docker("pull", pushed, timeout=300)
        assert dockerd.docker("image", "inspect", "--format", "{{.Id}}", pushed).stdout.strip() == built

        # other bytes pushed over the tag: the lock still names the old bytes; pin-base shows the move
        moved = standin.derive(dockerd, base, tag, {"/etc/rso-moved-tag": b"other bytes\n"})
        dockerd.docker("push", tag, timeout=300)
        proc = make(dockerd, "pin-base", f"BASE_LOCK={lock}")
        assert proc.returncode == 0, proc.stdout[-3000:]
        new = _pinned(lock)
        assert new != digest and f"old {digest}" in proc.stdout and f"new {new}" in proc.stdout
        assert "changed: review and commit" in proc.stdout
        assert dockerd.docker("image", "inspect", "--format", "{{.Id}}", f"{repository}@{new}").stdout.strip() == moved
    finally:
        _forget(dockerd, repository)
        _forget(dockerd, pushed_repository)
        dockerd.docker("image", "rm", image, check=False)


def test_a_digest_the_registry_lacks_stops_the_build_before_anything_is_built(dockerd, registry, tmp_path):
    missing = "sha256:" + "7" * 64
    lock = _lock(tmp_path, f"{registry.address}/lmsysorg/sglang", digest=missing)
    proc = make(
        dockerd,
        "build",
        f"BASE_LOCK={lock}",
        "KERNELS=skip",
        f"BUILD_DIR={tmp_path / 'b'}",
        "IMAGE=rso-test-must-not-exist:x",
    )
    assert proc.returncode != 0
    error = proc.stdout[proc.stdout.rindex("error: ") :]
    assert f"the registry has no image with the pinned digest {missing}" in error, proc.stdout[-3000:]
    assert "make pin-base SGLANG_RELEASE=0.5.19 CUDA_LANE=cu130" in error
    assert "[2/4]" not in proc.stdout  # refused in the preflight: no wheel, no build
    assert dockerd.docker("image", "inspect", "rso-test-must-not-exist:x", check=False).returncode != 0


def test_a_registry_that_refuses_the_push_gives_one_message_and_leaves_no_tag(dockerd, built_image, tmp_path):
    with start_registry(tmp_path / "ro", read_only=True) as read_only:
        proc = make(dockerd, "push", f"IMAGE={built_image.ref}", f"REGISTRY={read_only.address}/ml")
    assert proc.returncode != 0
    error = proc.stdout[proc.stdout.rindex("error: ") :]
    assert f"registry {read_only.address}/ml refused the push" in error and "fix: " in error, proc.stdout[-3000:]
    target = f"{read_only.address}/ml/{built_image.ref}"
    assert dockerd.docker("image", "inspect", target, check=False).returncode != 0


def test_a_registry_that_serves_other_bytes_under_the_digest_is_refused(dockerd, registry, tmp_path):
    """The registry's stored manifest is altered on disk (what a broken or hostile mirror does): the pull
    by digest fails the daemon's content check, and the build stops with one message."""
    base = standin.build_standin(dockerd, "0.5.19", tag="rso-standin-sglang:0.5.19-plain", toolchain=False)
    repository = f"{registry.address}/tampered/sglang"
    tag = f"{repository}:v0.5.19-cu130"
    dockerd.docker("tag", base, tag)
    dockerd.docker("push", tag, timeout=600)
    digest = next(
        d.split("@")[1]
        for d in json.loads(dockerd.docker("image", "inspect", "--format", "{{json .RepoDigests}}", tag).stdout)
        if d.startswith(repository + "@")
    )
    blob = registry.root / "data/docker/registry/v2/blobs/sha256" / digest[7:9] / digest[7:] / "data"
    blob.write_bytes(blob.read_bytes() + b"\n")  # still valid JSON, no longer these bytes
    _forget(dockerd, repository)
    try:
        proc = make(
            dockerd,
            "build",
            f"BASE_LOCK={_lock(tmp_path, repository, digest=digest)}",
            "KERNELS=skip",
            f"BUILD_DIR={tmp_path / 'b'}",
            "IMAGE=rso-test-must-not-exist:x",
        )
        assert proc.returncode != 0
        error = proc.stdout[proc.stdout.rindex("error: ") :]
        assert f"the registry served bytes that do not match the pinned digest {digest}" in error, proc.stdout[-3000:]
        assert "[2/4]" not in proc.stdout
        assert dockerd.docker("image", "inspect", f"{repository}@{digest}", check=False).returncode != 0
    finally:
        _forget(dockerd, repository)
