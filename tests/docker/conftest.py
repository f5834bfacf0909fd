"""Session fixtures for the image tests: one private Docker daemon, one stand-in base, one built image.

The daemon is started by `tests.infra.dockerd` with its data under pytest's temporary directory, and
stopped by its PID (its directories removed) when the session ends. The stand-in base (Debian + the real
SGLang 0.5.19 wheel, `tests/docker/standin.py`) is built once per session, and the overlay image is built
on it once, through the real `make -f docker/docker.mk build`, for every test that inspects it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.docker import standin
from tests.infra.dockerd import Dockerd, start_dockerd

REPO = Path(__file__).resolve().parents[2]
SNAPSHOT_SCRIPT = (Path(__file__).parent / "fs_snapshot.py").read_text()


def make(daemon: Dockerd | None, *args: str, env: dict | None = None, timeout: float = 900) -> subprocess.CompletedProcess:
    """`make -f docker/docker.mk ARGS` from the repository root; stdout and stderr merged, text."""
    full_env = {**(daemon.env() if daemon is not None else os.environ), **(env or {})}
    return subprocess.run(["make", "--no-print-directory", "-f", "docker/docker.mk", *args,
                           f"WHEEL_PYTHON={sys.executable}"],
                          cwd=REPO, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout)


def run_in(daemon: Dockerd, image: str, entrypoint: str, *args: str, input: str | None = None,
           check: bool = True) -> subprocess.CompletedProcess:
    """`docker run --rm --network none --entrypoint E IMAGE ARGS` on the session daemon."""
    return daemon.docker("run", "--rm", "-i", "--network", "none", "--entrypoint", entrypoint, image, *args,
                         input=input, check=check, timeout=300)


def fs_snapshot(daemon: Dockerd, image: str) -> dict[str, str]:
    return json.loads(run_in(daemon, image, "python3", "-", input=SNAPSHOT_SCRIPT).stdout)


@dataclass
class BuiltImage:
    ref: str
    id: str
    base: str
    base_id: str
    log: str


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
    sys.path.insert(0, str(REPO / "docker" / "tools"))
    from common import overlay_version as read_version

    return read_version()


@pytest.fixture(scope="session")
def built_image(dockerd, standin_base, overlay_version, tmp_path_factory) -> BuiltImage:
    """The overlay image built by `make build` on the stand-in (kernels skipped: no Triton there)."""
    build_dir = tmp_path_factory.mktemp("docker-build")
    proc = make(dockerd, "build", "BASE_STANDIN=true", f"BASE_IMAGE={standin_base}", "KERNELS=skip",
                f"BUILD_DIR={build_dir}")
    assert proc.returncode == 0, proc.stdout[-6000:]
    ref = f"sglang-replayssm:0.5.19-{overlay_version}"
    ids = {r: dockerd.docker("image", "inspect", "--format", "{{.Id}}", r).stdout.strip()
           for r in (ref, standin_base)}
    return BuiltImage(ref=ref, id=ids[ref], base=standin_base, base_id=ids[standin_base], log=proc.stdout)
