"""Usage and environment errors: exit 2, a clear message, and a report that never reads as a pass."""

from __future__ import annotations

import json
import os
import pathlib
import socket
import subprocess
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _assert_env_error(code, doc, text, needle):
    assert code == 2, text
    assert needle in text
    assert doc["passed"] is False and doc["exit_code"] == 2 and needle in doc["error"]["what"] + doc["error"]["fix"]


def test_unreachable_server_exits_2_from_the_console_entry(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "smoke_tests"), str(ROOT / "overlay")]))
    url = f"http://127.0.0.1:{_free_port()}"
    proc = subprocess.run(
        [sys.executable, "-m", "replayssm_smoke.cli", "--target", url, "--out", str(tmp_path), "-q"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 2
    assert f"cannot reach {url}/health" in proc.stdout
    assert json.loads((tmp_path / "report.json").read_text())["passed"] is False


def test_non_speculative_server(double, smoke):
    _assert_env_error(*smoke("--target", double(spec=False)), "without speculative decoding")


def test_malformed_generate_response(double, smoke):
    _assert_env_error(*smoke("--target", double("--malformed")), "malformed /generate response")


def test_unhealthy_server(double, smoke):
    _assert_env_error(*smoke("--target", double("--unhealthy")), "answered 503: the server is not healthy")


def test_run_over_its_deadline(double, tmp_path, capsys):
    from replayssm_smoke import cli

    code = cli.main(
        ["--target", double("--step-ms", "40"), "--classes", "code", "--deadline", "0.5", "--out", str(tmp_path), "-q"]
    )
    assert code == 2
    assert "the run exceeded its deadline of 0.5 s" in capsys.readouterr().out
    assert json.loads((tmp_path / "report.json").read_text())["passed"] is False


@pytest.fixture
def not_sglang(tmp_path):
    (tmp_path / "health").write_text("ok")  # even a /health that answers 200 does not make it SGLang
    handler = lambda *a, **kw: SimpleHTTPRequestHandler(*a, directory=str(tmp_path), **kw)  # noqa: E731
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()
    thread.join()


def test_url_that_is_not_sglang(not_sglang, smoke):
    _assert_env_error(*smoke("--target", not_sglang), "not an SGLang server")


def test_bad_prompts_line_is_named(double, smoke, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": "a", "class": "code", "prompt": "x = 1"}\n\n{"id": "b", "class": "code"}\n')
    _assert_env_error(*smoke("--target", double(), "--prompts", str(prompts)), f"{prompts}:3: give exactly one of")


def test_prompts_line_that_is_not_json(double, smoke, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": "a", "class": "code", "prompt": "x = 1"}\n{"id": "b", \n')
    _assert_env_error(*smoke("--target", double(), "--add-prompts", str(prompts)), f"{prompts}:2: not valid JSON")


def test_thresholds_for_a_class_without_prompts(double, smoke, tmp_path):
    th = tmp_path / "th.yaml"
    th.write_text(
        "profiles:\n  - name: mine\n    match: ['*']\n    acceptance:\n"
        "      code: {min_mean_accept_length: 1.5}\n      sql: {min_mean_accept_length: 1.5}\n"
    )
    _assert_env_error(
        *smoke("--target", double(), "--classes", "code", "--thresholds", str(th)),
        "sets thresholds for class(es) ['sql'] but no prompt has that class",
    )


def test_bad_usage_is_exit_2(capsys):
    from replayssm_smoke import cli

    with pytest.raises(SystemExit) as exc:
        cli.main(["--target", "http://x:1", "--top-logprobs", "1"])
    assert exc.value.code == 2
    with pytest.raises(SystemExit) as exc:
        cli.main(["--target", "http://x:1", "--reference", "http://y:1", "--golden", "g.json"])
    assert exc.value.code == 2


def test_thresholds_file_that_is_not_yaml(double, smoke, tmp_path):
    th = tmp_path / "th.yaml"
    th.write_text("profiles: [\n")
    _assert_env_error(*smoke("--target", double(), "--thresholds", str(th)), "not valid YAML")


def test_no_profile_for_the_model(double, smoke, tmp_path):
    th = tmp_path / "th.yaml"
    th.write_text("profiles:\n  - match: ['*llama*']\n    acceptance: {code: {min_mean_accept_length: 1}}\n")
    _assert_env_error(
        *smoke("--target", double(), "--classes", "code", "--thresholds", str(th)), "no profile matches model"
    )
