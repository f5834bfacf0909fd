"""Fixtures for the smoke suite's tests: the stand-in SGLang server (tests/doubles/sglang_server.py)
started as a subprocess on 127.0.0.1 and a free port, stopped by PID; and a runner for the CLI."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

DOUBLE = pathlib.Path(__file__).resolve().parents[1] / "doubles" / "sglang_server.py"


@pytest.fixture
def double():
    """double(*flags) -> base URL of a fresh stand-in server; every one is stopped at teardown."""
    procs: list[subprocess.Popen] = []

    def start(*flags: str) -> str:
        proc = subprocess.Popen([sys.executable, str(DOUBLE), "--host", "127.0.0.1", "--port", "0", "--quiet", *flags],
                                stderr=subprocess.PIPE, text=True)
        procs.append(proc)
        first = proc.stderr.readline()  # "double: serving on http://127.0.0.1:PORT pid N"
        assert "serving on" in first, f"the double did not start: {first!r}"
        return first.split("serving on ", 1)[1].split()[0]

    yield start
    for proc in procs:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stderr.close()


@pytest.fixture
def smoke(tmp_path, capsys):
    """smoke(*argv) -> (exit code, report.json content or None, stdout + stderr), run in-process."""
    from replayssm_smoke import cli

    def run(*argv: str):
        out = tmp_path / "out"
        code = cli.main([*argv, "--out", str(out), "--quiet", "--timeout", "10", "--deadline", "60"])
        captured = capsys.readouterr()
        path = out / "report.json"
        doc = json.loads(path.read_text()) if path.exists() else None
        return code, doc, captured.out + captured.err

    return run
