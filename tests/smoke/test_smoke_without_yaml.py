"""`replayssm-smoke` where PyYAML is not importable: `--help` works, a run is a clear
exit 2 that says what to install, never a ModuleNotFoundError traceback. PyYAML is made unimportable in
the subprocess (`sys.modules["yaml"] = None`), as in a Python that lacks it."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
WITHOUT_YAML = (
    "import sys; sys.modules['yaml'] = None; from replayssm_smoke.cli import main; sys.exit(main(sys.argv[1:]))"
)


def _smoke(*argv: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(str(ROOT / sub) for sub in ("smoke_tests", "overlay")))
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_YAML, *argv], capture_output=True, text=True, env=env, timeout=60
    )


def test_help_works_without_pyyaml():
    done = _smoke("--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: replayssm-smoke") and "--thresholds" in done.stdout


def test_a_run_without_pyyaml_says_what_to_install(tmp_path):
    done = _smoke("--target", "http://127.0.0.1:9", "--out", str(tmp_path / "out"), "--json", "-q")
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "PyYAML is not installed" in done.stderr and "pip install 'PyYAML>=5.1'" in done.stderr
