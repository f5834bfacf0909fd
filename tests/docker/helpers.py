"""Helpers for the image tests: run `make -f docker/docker.mk` against the session's daemon, run a
command in an image, snapshot an image's filesystem. Imported by the tests and by conftest.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.infra.dockerd import Dockerd

REPO = Path(__file__).resolve().parents[2]
SNAPSHOT_SCRIPT = (Path(__file__).parent / "fs_snapshot.py").read_text()


def make(
    daemon: Dockerd | None, *args: str, env: dict | None = None, timeout: float = 900
) -> subprocess.CompletedProcess:
    """`make -f docker/docker.mk ARGS` from the repository root; stdout and stderr merged, text."""
    full_env = {**(daemon.env() if daemon is not None else os.environ), **(env or {})}
    return subprocess.run(
        ["make", "--no-print-directory", "-f", "docker/docker.mk", *args, f"WHEEL_PYTHON={sys.executable}"],
        cwd=REPO,
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
    )


def run_in(
    daemon: Dockerd, image: str, entrypoint: str, *args: str, input: str | None = None, check: bool = True
) -> subprocess.CompletedProcess:
    """`docker run --rm --network none --entrypoint E IMAGE ARGS` on the session daemon."""
    return daemon.docker(
        "run",
        "--rm",
        "-i",
        "--network",
        "none",
        "--entrypoint",
        entrypoint,
        image,
        *args,
        input=input,
        check=check,
        timeout=300,
    )


def fs_snapshot(daemon: Dockerd, image: str) -> dict[str, str]:
    return json.loads(run_in(daemon, image, "python3", "-", input=SNAPSHOT_SCRIPT).stdout)


def overlay_version() -> str:
    """`version = "..."` from pyproject.toml (what the image tag and labels carry)."""
    return re.search(r'^version\s*=\s*"([^"]+)"', (REPO / "pyproject.toml").read_text(), re.M).group(1)


@dataclass
class BuiltImage:
    ref: str
    id: str
    base: str
    base_id: str
    log: str
