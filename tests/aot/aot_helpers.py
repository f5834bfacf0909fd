"""What the ahead-of-time tests share (a module, so tests can import it; conftest cannot be)."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def build_args(out) -> list:
    """`kernels build` arguments for a build into `out`."""
    return ["kernels", "build", "--out", str(out)]


def child_env(**extra) -> dict:
    """Environment for child processes: this tree first."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "overlay"), str(ROOT)]), **extra)


def cli(*argv, timeout=300, **env) -> subprocess.CompletedProcess:
    """`python -m replayssm_overlay ARGV` in a child process (`env`: extra variables)."""
    return subprocess.run(
        [sys.executable, "-m", "replayssm_overlay", *argv],
        capture_output=True,
        text=True,
        env=child_env(**env),
        timeout=timeout,
    )
