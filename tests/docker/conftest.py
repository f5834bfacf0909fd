"""Session fixtures for the image tests: one private Docker daemon per test session.

The daemon is started by `tests.infra.dockerd` with its data under pytest's temporary directory, and
stopped by its PID (its directories removed) when the session ends. Every image test shares it, so the
stand-in base is built once per session.
"""

from __future__ import annotations

import pytest

from tests.infra.dockerd import Dockerd, start_dockerd


@pytest.fixture(scope="session")
def dockerd(tmp_path_factory) -> Dockerd:
    """A running private daemon (`.host` is its DOCKER_HOST, `.docker(...)` runs the client against it)."""
    daemon = start_dockerd(tmp_path_factory.mktemp("dockerd"))
    try:
        yield daemon
    finally:
        daemon.stop()
