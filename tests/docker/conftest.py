"""Session fixtures for the image tests: one private Docker daemon, one stand-in base, one built image.

The daemon is started by `tests.infra.dockerd` with its data under pytest's temporary directory, and
stopped by its PID (its directories removed) when the session ends. The stand-in base (Debian + the real
SGLang 0.5.19 wheel + the real NVRTC wheel, `tests/docker/standin.py`) is built once per session, and the
overlay image is built on it once, through the real `make -f docker/docker.mk build` with `KERNELS=build`
(the CUDA commit kernel, as the released image builds it), for every test that inspects it. A real local
registry (`tests.infra.registry`) serves the registry tests.
"""

from __future__ import annotations

import pytest

from tests.docker import standin
from tests.docker.helpers import REPO, BuiltImage, make
from tests.docker.helpers import overlay_version as read_overlay_version
from tests.infra.dockerd import Dockerd, start_dockerd
from tests.infra.registry import Registry, start_registry


@pytest.fixture(scope="session")
def dockerd(tmp_path_factory) -> Dockerd:
    """A running private daemon (`.host` is its DOCKER_HOST, `.docker(...)` runs the client against it)."""
    daemon = start_dockerd(tmp_path_factory.mktemp("dockerd"))
    try:
        yield daemon
    finally:
        daemon.stop()


@pytest.fixture(scope="session")
def standin_base(dockerd) -> str:
    """The stand-in base with the real SGLang 0.5.19 (tag `rso-standin-sglang:0.5.19`)."""
    standin.build_standin(dockerd, "0.5.19")
    return "rso-standin-sglang:0.5.19"


@pytest.fixture(scope="session")
def overlay_version() -> str:
    return read_overlay_version()


# An untracked module holding a token, present in the checkout while the image is built (an image must never
# carry one while its label names the clean commit); test_image.py checks that it is nowhere.
UNTRACKED_SECRET = REPO / "overlay" / "replayssm_overlay" / "_local_settings.py"


@pytest.fixture(scope="session")
def built_image(dockerd, standin_base, overlay_version, tmp_path_factory) -> BuiltImage:
    """The overlay image built by `make build` on the stand-in, its kernels compiled ahead of time, with an
    untracked secret in the checkout; ALLOW_DIRTY=1 so a checkout with uncommitted work builds too."""
    build_dir = tmp_path_factory.mktemp("docker-build")
    assert not UNTRACKED_SECRET.exists(), f"{UNTRACKED_SECRET} exists; the test would delete it"
    UNTRACKED_SECRET.write_text("API_TOKEN = 'rso-test-untracked-token'\n")
    try:
        proc = make(
            dockerd,
            "build",
            "BASE_STANDIN=true",
            f"BASE_IMAGE={standin_base}",
            "KERNELS=build",
            f"BUILD_DIR={build_dir}",
            "ALLOW_DIRTY=1",
        )
    finally:
        UNTRACKED_SECRET.unlink()
    assert proc.returncode == 0, proc.stdout[-6000:]
    ref = f"sglang-replayssm:0.5.19-{overlay_version}"
    ids = {r: dockerd.docker("image", "inspect", "--format", "{{.Id}}", r).stdout.strip() for r in (ref, standin_base)}
    return BuiltImage(ref=ref, id=ids[ref], base=standin_base, base_id=ids[standin_base], log=proc.stdout)


@pytest.fixture(scope="session")
def registry(tmp_path_factory) -> Registry:
    """A real registry (Debian's docker-registry) on a free loopback port; `.address` is host:port."""
    served = start_registry(tmp_path_factory.mktemp("registry"))
    try:
        yield served
    finally:
        served.stop()
