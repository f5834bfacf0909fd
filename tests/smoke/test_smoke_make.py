"""`make smoke` (smoke_tests/smoke.mk) runs the CLI against a URL and writes the report where OUT says."""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def _make(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["make", "--no-print-directory", "-f", "smoke_tests/smoke.mk", *args, f"SMOKE_PY={sys.executable}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_make_smoke_writes_the_report(double, tmp_path):
    golden = tmp_path / "golden.json"
    rec = _make(
        "smoke-record",
        f"TARGET={double(spec=False)}",
        f"GOLDEN={golden}",
        "SMOKE_ARGS=--classes math --max-new-tokens 16 -q",
    )
    assert rec.returncode == 0, rec.stderr
    proc = _make(
        "smoke",
        f"TARGET={double()}",
        f"GOLDEN={golden}",
        f"OUT={tmp_path / 'out'}",
        "SMOKE_ARGS=--classes math --max-new-tokens 16 -q",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["passed"] is True and report["exactness"]["parity"]["against"] == "golden"


def test_make_smoke_without_target_is_a_usage_error():
    proc = _make("smoke")
    assert proc.returncode == 2 and "usage: make smoke TARGET=" in proc.stderr
