"""Finding the SGLang installation without importing it, and reading the version it declares."""

import os
import pathlib
import subprocess
import sys

import pytest

from replayssm_overlay.errors import OverlayError
from replayssm_overlay.patcher.target import declared_version, find_sglang_dir

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_default_target_is_found_without_importing_sglang():
    code = (
        "import sys; from replayssm_overlay.patcher.target import find_sglang_dir; "
        "print(find_sglang_dir()); print('sglang' in sys.modules)"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO / "overlay"))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    path, imported = done.stdout.split()
    assert imported == "False"
    assert (pathlib.Path(path) / "srt" / "mem_cache" / "kv_cache_configurator.py").is_file()


def test_installed_sglang_declares_0_5_19(installed_sglang_dir):
    assert declared_version(installed_sglang_dir) == "0.5.19"


def test_declared_version_falls_back_to_the_version_file(tmp_path):
    package = tmp_path / "sglang"
    package.mkdir()
    assert declared_version(package) is None
    (package / "_version.py").write_text("__version__ = version = '9.9.9'\n")
    assert declared_version(package) == "9.9.9"


def test_explicit_directory_must_exist(tmp_path):
    assert find_sglang_dir(tmp_path) == tmp_path.resolve()
    with pytest.raises(OverlayError, match="no such directory"):
        find_sglang_dir(tmp_path / "missing")
