"""The base check's [python] and [release] steps (docker/scripts/check_base.py, run inside the base during
the build), run here on this machine's Python: against stand-in wheels, it names the check and the fix
when the Python is older than the wheel's Requires-Python, and when the build context holds no single
wheel; against the real 0.5.20 files, it refuses a base whose files are not the release it is built as."""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import zipfile
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "docker" / "scripts" / "check_base.py"


@pytest.fixture(scope="module")
def check_base():
    spec = importlib.util.spec_from_file_location("check_base", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _wheel(folder: Path, requires: str) -> Path:
    folder.mkdir()
    with zipfile.ZipFile(folder / "sglang_replayssm_overlay-0.0.1-py3-none-any.whl", "w") as wheel:
        wheel.writestr(
            "sglang_replayssm_overlay-0.0.1.dist-info/METADATA",
            f"Metadata-Version: 2.1\nName: sglang-replayssm-overlay\nRequires-Python: {requires}\n",
        )
    return folder


def test_a_python_older_than_the_wheel_needs_fails_the_named_check(check_base, tmp_path):
    with pytest.raises(check_base.CheckFailed) as failed:
        check_base.check_python(str(_wheel(tmp_path / "wheels", ">=3.99")))
    message = str(failed.value)
    assert message.startswith(f"base-check failed [python]: the base's Python {platform.python_version()}")
    assert "older than the 3.99 the overlay needs" in message and "fix: " in message and "RSO_PYTHON" in message


def test_a_python_the_wheel_accepts_passes_and_is_reported(check_base, tmp_path):
    report = check_base.check_python(str(_wheel(tmp_path / "wheels", ">=3.8")))
    assert report["version"] == platform.python_version() and report["requires"] == ">=3.8"


def test_a_context_without_the_wheel_fails_the_named_check(check_base, tmp_path):
    with pytest.raises(check_base.CheckFailed, match=r"^base-check failed \[python\]: expected one overlay wheel"):
        check_base.check_python(str(tmp_path / "nowhere"))


def test_shell_advice_is_cut_from_the_overlays_refusal(check_base):
    refusal = (
        "refusing to patch /x; no file was changed:\n    - a.py: sha256 00 matches no known release (expected 11 "
        "for SGLang 0.5.19; the installation declares version 0.5.19). Reinstall the pristine file (pip install "
        "--force-reinstall --no-deps sglang==0.5.19), or, if you have checked that this content is compatible, "
        "rerun with --allow-unverified\n    - b.py: missing (/x/b.py). This is not an SGLang installation the "
        "overlay supports (0.5.19); pass --sglang-dir with the right `sglang` package directory, or reinstall SGLang"
    )
    cut = check_base.SHELL_ADVICE.sub("", refusal)
    assert "pip install" not in cut and "--allow-unverified" not in cut and "--sglang-dir" not in cut
    assert (
        "a.py: sha256 00 matches no known release (expected 11 for SGLang 0.5.19; the installation declares "
        "version 0.5.19)" in cut
    )
    assert cut.endswith("b.py: missing (/x/b.py). This is not an SGLang installation the overlay supports (0.5.19)")


def test_a_base_whose_files_are_another_release_than_its_metadata_fails_the_release_check(check_base, tmp_path):
    """0.5.20's files under metadata that says 0.5.19 (such a base must not build an image labelled 0.5.19).
    The [pristine] step's dry run identifies the release by the files' hashes; it must be SGLANG_RELEASE."""
    from replayssm_overlay.patcher.releases import RELEASE_FILES

    source = Path(__file__).resolve().parents[2] / ".venv" / "sglang-releases" / "0.5.20" / "sglang"
    tree = tmp_path / "site-packages" / "sglang"
    for relpath in RELEASE_FILES["0.5.20"]:
        (tree / relpath).parent.mkdir(parents=True, exist_ok=True)
        (tree / relpath).write_bytes((source / relpath).read_bytes())
    declared = {"distribution": "0.5.19", "source": "0.5.19"}
    report = tmp_path / "base-check.json"
    report.write_text(json.dumps({"sglang": {"package_dir": str(tree), "release": "0.5.19", "declared": declared}}))
    with pytest.raises(check_base.CheckFailed) as failed:
        check_base.pristine(argparse.Namespace(report=str(report)))
    message = str(failed.value)
    assert message.startswith("base-check failed [release]: the base's SGLang files are SGLang 0.5.20's")
    assert "this build is for SGLang 0.5.19 (SGLANG_RELEASE=0.5.19)" in message and "fix: " in message
