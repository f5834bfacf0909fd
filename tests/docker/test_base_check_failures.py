"""The build refuses a wrong base in its base-check stage, with a message that says which check failed
and why: a base whose target file was edited (pristine sha256), and a base with another SGLang release
(the real 0.5.18 wheel), and a base without the Python named for the build. The bases are small images
derived from the session's stand-in material."""

from __future__ import annotations

import zipfile

import pytest

from tests.docker import standin
from tests.docker.helpers import make

pytestmark = pytest.mark.slow

CONFIGURATOR = "srt/mem_cache/kv_cache_configurator.py"


def _final_error(proc):
    """The message `make build` ends with (the build log is above it)."""
    return proc.stdout[proc.stdout.rindex("error: ") :]


def _build(dockerd, base, tmp_path, *extra):
    return make(
        dockerd,
        "build",
        "BASE_STANDIN=true",
        f"BASE_IMAGE={base}",
        "KERNELS=skip",
        f"BUILD_DIR={tmp_path}",
        "IMAGE=rso-test-must-not-exist:x",
        "ALLOW_DIRTY=1",
        *extra,
    )


def test_modified_target_file_fails_the_base_check(dockerd, standin_base, tmp_path):
    from replayssm_overlay.patcher.releases import RELEASES

    with zipfile.ZipFile(standin.sglang_wheel("0.5.19")) as wheel:
        pristine = wheel.read(f"sglang/{CONFIGURATOR}")
    edited = pristine + b"\n# a local edit the overlay must refuse\n"
    path = f"/{standin.SGLANG_PROJECT}/sglang/{CONFIGURATOR}"
    base = "rso-standin-sglang:0.5.19-edited"
    standin.derive(dockerd, standin_base, base, {path: edited})
    proc = _build(dockerd, base, tmp_path)
    assert proc.returncode != 0
    error = _final_error(proc)
    assert "base-check failed [pristine]" in error, proc.stdout[-4000:]
    assert CONFIGURATOR in error
    assert RELEASES["0.5.19"][CONFIGURATOR] in error  # the expected pristine sha256 is named
    # the fix is one for an image build (the base), not the overlay's advice for a shell
    assert "--allow-unverified" not in error and "pip install" not in error
    assert "use the unmodified release image pinned in docker/base.lock" in " ".join(error.split())
    assert dockerd.docker("image", "inspect", "rso-test-must-not-exist:x", check=False).returncode != 0


def test_other_sglang_release_fails_the_base_check(dockerd, standin_base, tmp_path):
    base_id = standin.build_standin(dockerd, "0.5.18", toolchain=False)  # fails before any kernel
    proc = _build(dockerd, base_id, tmp_path)
    assert proc.returncode != 0
    error = _final_error(proc)
    assert "base-check failed [version]" in error, proc.stdout[-4000:]
    assert "the base has SGLang 0.5.18" in error and "this build is for SGLang 0.5.19" in error
    assert dockerd.docker("image", "inspect", "rso-test-must-not-exist:x", check=False).returncode != 0


def test_base_without_the_python_fails_the_named_check(dockerd, standin_base, tmp_path):
    """The base has no `python3.9-rso` on PATH (as a base without python3 has no `python3`)."""
    proc = _build(dockerd, standin_base, tmp_path, "BASE_PYTHON=python3.9-rso")
    assert proc.returncode != 0
    error = _final_error(proc)
    assert "base-check failed [python]: no 'python3.9-rso' on the base's PATH" in error, proc.stdout[-4000:]
    assert "fix: use an official SGLang release image as the base" in error
    assert dockerd.docker("image", "inspect", "rso-test-must-not-exist:x", check=False).returncode != 0
