"""The wheel a bare-metal user builds has the name the README and the patched files' fallback message tell
them to install (`sglang_replayssm_overlay-*.whl`, never a
name no build makes). Builds the real wheel from the project's files with pip, as the README says."""

import fnmatch
import pathlib
import re
import shutil
import subprocess
import sys

import replayssm_overlay
from replayssm_overlay.patcher.hookpoints import UNAVAILABLE_MESSAGE

REPO = pathlib.Path(__file__).resolve().parents[2]
PROJECT = ("pyproject.toml", "README.md", "overlay", "smoke_tests")


def test_the_built_wheel_is_named_as_the_docs_and_the_messages_say(tmp_path):
    source = tmp_path / "src"  # a copy, so the build's egg-info and build/ stay out of the checkout
    source.mkdir()
    for name in PROJECT:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(REPO / name, source / name)
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "--disable-pip-version-check",
            "-w",
            str(tmp_path / "dist"),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    wheels = [p.name for p in (tmp_path / "dist").glob("*.whl")]
    distribution = replayssm_overlay.DISTRIBUTION.replace("-", "_")
    assert wheels == [f"{distribution}-{replayssm_overlay.__version__}-py3-none-any.whl"]
    assert fnmatch.fnmatch(wheels[0], replayssm_overlay.WHEEL_PATTERN)

    pyproject = (REPO / "pyproject.toml").read_text()
    assert re.search(r'^name = "([^"]+)"', pyproject, re.M).group(1) == replayssm_overlay.DISTRIBUTION
    assert re.search(r'^version = "([^"]+)"', pyproject, re.M).group(1) == replayssm_overlay.__version__
    assert replayssm_overlay.WHEEL_PATTERN.encode() in UNAVAILABLE_MESSAGE
    readme = (REPO / "README.md").read_text()
    bare_metal = readme.split("## Install on bare metal", 1)[1].split("\n## ", 1)[0]
    assert f"pip install --no-deps dist/{replayssm_overlay.WHEEL_PATTERN}" in bare_metal
    assert "replayssm_overlay-*.whl" not in readme.replace(replayssm_overlay.WHEEL_PATTERN, "")
