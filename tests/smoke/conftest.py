"""Fixtures for the smoke suite's tests: the stand-in SGLang server (tests/doubles/sglang_server.py)
started as a subprocess on 127.0.0.1 and a free port, stopped by PID; and a runner for the CLI."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

DOUBLE = pathlib.Path(__file__).resolve().parents[1] / "doubles" / "sglang_server.py"


SPECULATIVE = ("--speculative-algorithm", "DFLASH", "--enable-linear-replayssm-spec")


@pytest.fixture
def double():
    """double(*flags, spec=True, metrics=True) -> base URL of a fresh stand-in server.

    spec=False is a server without speculation (a reference); every server is stopped at teardown.
    """
    procs: list[subprocess.Popen] = []

    def start(*flags: str, spec: bool = True, metrics: bool = True) -> str:
        argv = [*(SPECULATIVE if spec else ()), *(("--enable-metrics",) if metrics else ()), *flags]
        proc = subprocess.Popen(
            [sys.executable, str(DOUBLE), "--host", "127.0.0.1", "--port", "0", "--quiet", *argv],
            stderr=subprocess.PIPE,
            text=True,
        )
        procs.append(proc)
        seen = []
        for line in proc.stderr:  # up to "double: serving on http://127.0.0.1:PORT pid N"
            seen.append(line)
            if "serving on" in line:
                return line.split("serving on ", 1)[1].split()[0]
        raise AssertionError(f"the double did not start: {''.join(seen)!r}")

    yield start
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stderr.close()


@pytest.fixture
def smoke(tmp_path, capsys):
    """smoke(*argv) -> (exit code, report.json content or None, stdout + stderr), run in-process (32 tokens a
    prompt unless argv says otherwise), into an --out folder that exists (a run stopped by an environment
    error writes its report only there)."""
    from replayssm_smoke import cli

    def run(*argv: str):
        out = tmp_path / "out"
        out.mkdir(exist_ok=True)
        defaults = ["--max-new-tokens", "32", "--timeout", "10", "--deadline", "60"]  # argv may override
        code = cli.main([*defaults, *argv, "--out", str(out), "--quiet"])
        captured = capsys.readouterr()
        path = out / "report.json"
        doc = json.loads(path.read_text()) if path.exists() else None
        return code, doc, captured.out + captured.err

    return run
