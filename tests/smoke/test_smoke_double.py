"""The stand-in server speaks the installed SGLang 0.5.19's API: every name it serves or accepts exists there.

Names are read from the real release's source with `ast` (string constants, dataclass fields, function
arguments), never copied. If the double drifts from the release, the smoke tests that use it stop
meaning anything; these tests catch that.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import pathlib
import urllib.error
import urllib.request

import pytest

spec = importlib.util.find_spec("sglang")
if spec is None or not spec.submodule_search_locations:
    pytest.skip("needs the real SGLang 0.5.19 installed in the venv", allow_module_level=True)
SGLANG = pathlib.Path(list(spec.submodule_search_locations)[0])
DOUBLE = pathlib.Path(__file__).resolve().parents[1] / "doubles" / "sglang_server.py"


def _tree(rel: str) -> ast.Module:
    return ast.parse((SGLANG / rel).read_text())


def _strings(rel: str) -> set[str]:
    return {n.value for n in ast.walk(_tree(rel)) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def _class_fields(rel: str, cls: str) -> set[str]:
    node = next(n for n in ast.walk(_tree(rel)) if isinstance(n, ast.ClassDef) and n.name == cls)
    return {s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}


def _get(url: str):
    with urllib.request.urlopen(url, timeout=10) as resp:
        body = resp.read()
    return json.loads(body) if body.startswith((b"{", b"[")) else body.decode()


def _post(url: str, payload: dict):
    req = urllib.request.Request(url, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def _load_double():
    spec_ = importlib.util.spec_from_file_location("sglang_double", DOUBLE)
    module = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(module)
    return module


def test_request_fields_exist_in_the_release():
    module = _load_double()
    assert module.REQUEST_FIELDS <= _class_fields("srt/managers/io_struct.py", "GenerateReqInput")
    assert module.SAMPLING_FIELDS <= _class_fields("srt/sampling/sampling_params.py", "SamplingParams")
    # what sglang-router adds to every /generate it forwards: the release's fields, and `model` (ignored)
    assert set(module.ROUTER_FIELDS) - {"model"} <= _class_fields("srt/managers/io_struct.py", "GenerateReqInput")


def test_generate_answer_uses_the_release_names(double):
    url = double()
    out = _post(
        url + "/generate",
        {
            "text": "def f(x):",
            "sampling_params": {"max_new_tokens": 8},
            "return_logprob": True,
            "logprob_start_len": 3,
            "top_logprobs_num": 2,
            "return_prompt_token_ids": True,
        },
    )
    names = _strings("srt/managers/tokenizer_manager.py")
    assert set(out) <= names
    assert set(out["meta_info"]) <= names
    assert {"spec_verify_ct", "spec_accept_length", "input_top_logprobs", "completion_tokens"} <= set(out["meta_info"])
    # logprob entries: [logprob, token id, text], position 0 of the input side null (logprob_result_processor.py)
    assert out["meta_info"]["input_top_logprobs"][0] is None
    assert out["meta_info"]["input_token_logprobs"][0][0] is None
    assert len(out["meta_info"]["input_token_logprobs"]) == len(out["prompt_token_ids"]) - 3


def test_info_endpoints_and_metrics_use_the_release_names(double):
    url = double()
    _post(url + "/generate", {"text": "x", "sampling_params": {"max_new_tokens": 8}})
    info = _get(url + "/server_info")
    extra = {"internal_states", "version", "startup_time", "kv_events"}  # http_server.server_info adds these
    assert set(info) - extra <= _class_fields("srt/server_args.py", "ServerArgs")
    assert extra <= _strings("srt/entrypoints/http_server.py")
    assert set(info["internal_states"][0]) <= _strings("srt/managers/scheduler.py")
    assert set(_get(url + "/model_info")) <= _strings("srt/entrypoints/http_server.py")
    text = _get(url + "/metrics")
    histograms = {
        line.split()[2] for line in text.splitlines() if line.startswith("# TYPE") and line.endswith(" histogram")
    }
    served = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if not line.startswith("#")}
    # a histogram's series are its name with _bucket, _sum and _count (Prometheus' exposition format)
    served = {
        next((h for h in histograms if name in (h + "_bucket", h + "_sum", h + "_count")), name) for name in served
    }
    assert {"sglang:time_to_first_token_seconds", "sglang:inter_token_latency_seconds"} <= histograms
    assert served <= _strings("srt/observability/metrics_collector.py")
    routes = _strings("srt/entrypoints/http_server.py")
    assert {
        "/health",
        "/health_generate",
        "/generate",
        "/server_info",
        "/get_server_info",
        "/model_info",
        "/get_model_info",
    } <= routes


def _labelled_counters(rel: str) -> set[str]:
    """Counters the release increments as `self.<name>.labels(...).inc(...)`: no sample before the first call."""
    return {
        n.func.value.func.value.attr
        for n in ast.walk(_tree(rel))
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr == "inc"
        and isinstance(n.func.value, ast.Call)
        and isinstance(n.func.value.func, ast.Attribute)
        and n.func.value.func.attr == "labels"
        and isinstance(n.func.value.func.value, ast.Attribute)
    }


def test_labelled_counters_appear_with_the_first_request_as_in_the_release(double):
    counters = {"prompt_tokens_total", "generation_tokens_total", "spec_verify_calls_total"}
    assert counters <= _labelled_counters("srt/observability/metrics_collector.py")
    url = double()
    served = {line.split("{")[0] for line in _get(url + "/metrics").splitlines() if line.startswith("sglang:")}
    assert served == {"sglang:spec_accept_length", "sglang:spec_accept_rate"}  # gauges only, before any request
    _post(url + "/generate", {"text": "x", "sampling_params": {"max_new_tokens": 8}})
    served = {line.split("{")[0] for line in _get(url + "/metrics").splitlines() if line.startswith("sglang:")}
    assert {f"sglang:{name}" for name in counters} <= served


def test_stock_sglang_command_line_is_accepted(double):
    url = double(
        "--tp-size", "8", "--mem-fraction-static", "0.8", "--speculative-draft-model-path", "/m/draft", spec=True
    )
    info = _get(url + "/server_info")
    assert info["speculative_algorithm"] == "DFLASH" and info["speculative_draft_model_path"] == "/m/draft"
    assert info["enable_linear_replayssm_spec"] is True


def test_unknown_request_field_is_refused(double):
    with pytest.raises(urllib.error.HTTPError) as exc:
        _post(double() + "/generate", {"text": "x", "top_logprob_num": 2})
    assert exc.value.code == 400


def test_the_fields_the_router_adds_are_accepted_at_its_values_only(double):
    url = double()
    routed = {
        "text": "x",
        "sampling_params": {"max_new_tokens": 2},
        "model": None,
        "log_metrics": True,
        "return_hidden_states": False,
        "background": False,
        "no_logs": False,
        "return_bytes": False,
        "return_entropy": False,
    }  # as sglang-router 0.3.2 forwards a plain /generate
    assert _post(url + "/generate", routed)["meta_info"]["completion_tokens"] == 2
    with pytest.raises(urllib.error.HTTPError) as exc:
        _post(url + "/generate", {**routed, "return_hidden_states": True})
    assert exc.value.code == 400


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_health_follows_the_health_file(double, tmp_path):
    flag = tmp_path / "unhealthy"
    url = double("--health-file", str(flag))
    assert _status(url + "/health") == 200
    flag.write_text("")
    assert _status(url + "/health") == 503 and _status(url + "/health_generate") == 503
    flag.unlink()
    assert _status(url + "/health_generate") == 200


def test_knobs_from_the_environment(monkeypatch):
    monkeypatch.setenv("SGLANG_DOUBLE_ARGS", "--unhealthy --tie-at 3")
    args = _load_double().parse_args(["--port", "0"])
    assert args.unhealthy and args.tie_at == 3


def test_load_endpoints_use_the_release_names(double):
    url = double()
    loads = _get(url + "/v1/loads")
    assert set(loads) <= _strings("srt/entrypoints/v1_loads.py")
    assert set(loads["loads"][0]) <= _class_fields("srt/managers/load_snapshot.py", "LoadSnapshot")
    assert set(_get(url + "/get_load")[0]) <= _strings("srt/entrypoints/http_server.py")
    assert {"/v1/loads", "/get_load"} <= _strings("srt/entrypoints/v1_loads.py") | _strings(
        "srt/entrypoints/http_server.py"
    )


def test_metric_labels_are_the_schedulers(double):
    url = double()
    _post(url + "/generate", {"text": "x", "sampling_params": {"max_new_tokens": 8}})
    line = next(ln for ln in _get(url + "/metrics").splitlines() if ln.startswith("sglang:spec_accept_length{"))
    labels = {pair.split("=")[0] for pair in line.split("{", 1)[1].split("}", 1)[0].split(",")}
    assert {"model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank"} <= labels
    assert labels <= _strings("srt/observability/metrics_collector.py")


def test_accept_length_file_makes_the_draft_go_bad_at_run_time(double, tmp_path):
    knob = tmp_path / "accept"
    url = double("--accept-length", "4", "--accept-length-file", str(knob))
    payload = {"text": "def f(x):", "sampling_params": {"max_new_tokens": 32}}
    good = _post(url + "/generate", payload)
    knob.write_text("1.0")
    bad = _post(url + "/generate", payload)
    assert good["output_ids"] == bad["output_ids"]  # outputs stay correct
    assert good["meta_info"]["spec_accept_length"] > 2.5 and bad["meta_info"]["spec_accept_length"] < 1.2
    gauge = next(ln for ln in _get(url + "/metrics").splitlines() if ln.startswith("sglang:spec_accept_length{"))
    assert float(gauge.rsplit(" ", 1)[1]) < 1.2


def _start(*flags: str, env: dict | None = None):
    """A double as its own process (the tests signal it); returns (process, base URL)."""
    import os
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, str(DOUBLE), "--port", "0", "--quiet", *flags],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    for line in proc.stderr:
        if "serving on" in line:
            return proc, line.split("serving on ", 1)[1].split()[0]
    raise AssertionError("the double did not start")


def _generate_in_background(url: str):
    import threading

    outcome = {}

    def run():
        try:
            outcome["answer"] = _post(url + "/generate", {"text": "x", "sampling_params": {"max_new_tokens": 4}})
        except Exception as err:  # noqa: BLE001 (the test asserts on it)
            outcome["error"] = err

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def _wait_in_flight(url: str, count: int) -> None:
    import time

    deadline = time.monotonic() + 10
    while _get(url + "/v1/loads")["loads"][0]["num_running_reqs"] != count:
        assert time.monotonic() < deadline, f"never {count} request(s) in flight"
        time.sleep(0.05)


def test_sigterm_drains_like_sglang():
    import signal

    proc, url = _start("--request-seconds", "2", "--drain-poll-seconds", "0.2")
    try:
        thread, outcome = _generate_in_background(url)
        _wait_in_flight(url, 1)
        assert _get(url + "/get_load")[0]["num_reqs"] == 1
        proc.send_signal(signal.SIGTERM)
        import time

        time.sleep(0.3)
        assert _status(url + "/health") == 503 and _status(url + "/health_generate") == 503
        assert proc.poll() is None  # still serving what is in flight
        thread.join(timeout=10)
        assert "answer" in outcome, outcome
        assert proc.wait(timeout=10) == 0
    finally:
        proc.kill()
        proc.wait()
        proc.stderr.close()


def test_forced_shutdown_cuts_requests_off():
    import signal

    proc, url = _start("--request-seconds", "5", env={"SGL_FORCE_SHUTDOWN": "1"})
    try:
        thread, outcome = _generate_in_background(url)
        _wait_in_flight(url, 1)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=5) == 0
        thread.join(timeout=10)
        assert "error" in outcome
    finally:
        proc.kill()
        proc.wait()
        proc.stderr.close()
