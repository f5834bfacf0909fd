"""What the ahead-of-time tests share (a module, so tests can import it; conftest cannot be)."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent

PROVIDER = "benchmarks.aot_sglang_fold:aot_specializations"
SHAPE_ARGS = ["--hv", "32", "--h", "16", "--k", "128", "--v", "128", "--tp", "1", "--window", "16"]


def build_args(out) -> list:
    """`kernels build` arguments for the two-specialization proof build into `out`."""
    return ["kernels", "build", "--out", str(out), "--provider", PROVIDER, *SHAPE_ARGS]


def child_env() -> dict:
    """Environment for child processes: this tree first, and without TRITON_INTERPRET (other test
    folders switch the interpreter on for the whole session; a build must compile for real)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "overlay"), str(ROOT)])
    return env


def cli(*argv, timeout=300) -> subprocess.CompletedProcess:
    """`python -m replayssm_overlay ARGV` in a child process."""
    return subprocess.run([sys.executable, "-m", "replayssm_overlay", *argv], capture_output=True,
                          text=True, env=child_env(), timeout=timeout)
