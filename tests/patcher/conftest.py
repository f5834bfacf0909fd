"""Fixtures for the patcher tests: the REAL pristine target files (from the installed SGLang 0.5.19, whose
bytes the release table pins) laid out in a throw-away `sglang` tree per test, and the same files from
the real SGLang 0.5.18 wheel (in <repo>/.cache/wheels, where `make setup` puts it; downloaded here only if it
is missing) as a release the patcher must refuse. Nothing here writes to the installed SGLang.
"""

import pathlib
import subprocess
import sys
import zipfile

import pytest

from replayssm_overlay.patcher.releases import FINGERPRINTS, TARGET_FILES
from replayssm_overlay.patcher.target import find_sglang_dir

REPO = pathlib.Path(__file__).resolve().parents[2]
WHEEL_DIR = REPO / ".cache" / "wheels"


@pytest.fixture(scope="session")
def installed_sglang_dir() -> pathlib.Path:
    return find_sglang_dir()


@pytest.fixture(scope="session")
def pristine_files(installed_sglang_dir) -> dict:
    """relpath -> the pristine 0.5.19 bytes of each target file."""
    return {rel: (installed_sglang_dir / rel).read_bytes() for rel in TARGET_FILES}


@pytest.fixture(scope="session")
def files_0518() -> dict:
    """relpath -> the bytes of each target file in the real SGLang 0.5.18 wheel from PyPI."""
    wheels = sorted(WHEEL_DIR.glob("sglang-0.5.18-*.whl"))
    if not wheels:
        WHEEL_DIR.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "sglang==0.5.18",
                "-d",
                str(WHEEL_DIR),
            ],
            check=True,
            timeout=600,
        )
        wheels = sorted(WHEEL_DIR.glob("sglang-0.5.18-*.whl"))
    with zipfile.ZipFile(wheels[0]) as wheel:
        return {rel: wheel.read(f"sglang/{rel}") for rel in TARGET_FILES}


@pytest.fixture(scope="session")
def fingerprint_files(installed_sglang_dir) -> dict:
    """relpath -> the pristine 0.5.19 bytes of each file the release table fingerprints."""
    return {rel: (installed_sglang_dir / rel).read_bytes() for rel in FINGERPRINTS["0.5.19"]}


@pytest.fixture
def sglang_tree(tmp_path, pristine_files, fingerprint_files) -> pathlib.Path:
    """A `sglang` package directory holding the three pristine target files and the pristine files
    whose behaviour the hooks rely on (the release's fingerprint), nothing else."""
    root = tmp_path / "site-packages" / "sglang"
    for rel, data in {**pristine_files, **fingerprint_files}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


def read_tree(sglang_dir: pathlib.Path) -> dict:
    """relpath -> bytes (None if absent) of the three target files."""
    return {rel: (sglang_dir / rel).read_bytes() if (sglang_dir / rel).exists() else None for rel in TARGET_FILES}


@pytest.fixture
def snapshot():
    """`snapshot(sglang_dir)`: relpath -> bytes (None if absent) of the three target files."""
    return read_tree
