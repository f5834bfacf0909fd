"""The canary bake's measure -> judge steps (replayssm_smoke.bake) against stand-in servers: a canary whose
draft collapses on the live traffic's class fails on acceptance while the smoke prompts still pass, the same
canary with a good draft passes, one five times slower per token fails on ITL p99, too little traffic
gives no verdict, and bad settings are refused before anything is read. Bakes last about a second.
"""

from __future__ import annotations

import json
import math
import socket
import threading

import pytest

from replayssm_smoke import bake, bake_prometheus, bake_rows, promseries
from tests.smoke.test_smoke_double import _post

LIVE = "chat: "  # the live traffic's class (the double's --accept-length-for matches it)
MODEL = "Qwen/Qwen3-Next-80B-A3B-Instruct"  # the double's default model path; its profile has a baseline
QUICK = ("--step-ms", "20")


#: a mixed load: one live-class request in four, labelled `prose`; the rest code, labelled `code`
MIXED = ((LIVE, "prose"), ("def f", "code"), ("def g", "code"), ("def h", "code"))
CLASSES = ("--tokenizer-metrics-allowed-custom-labels", "class")


def _traffic(urls: list[str], requests: int, mix: tuple = ((LIVE, None),)) -> None:
    """`requests` greedy requests per node, four at a time, spread over the nodes as a router would; request i
    takes mix[i % len(mix)]: (its prompt's prefix, its request class, sent as SGLang's custom label, or None)."""

    def one(url, i):
        prefix, cls = mix[i % len(mix)]
        payload = {"text": f"{prefix}question {i}", "sampling_params": {"max_new_tokens": 16}}
        _post(url + "/generate", {**payload, "custom_labels": {"class": cls}} if cls else payload)

    threads = [threading.Thread(target=one, args=(url, i)) for i in range(requests) for url in urls]
    for start in range(0, len(threads), 4):
        batch = threads[start : start + 4]
        for t in batch:
            t.start()
        for t in batch:
            t.join()


def _bake(
    tmp_path,
    canary: str,
    old: list[str],
    requests: int,
    min_requests: int = 10,
    *judge_args: str,
    seconds: str = "1",
    measure_args: tuple[str, ...] = (),
    mix: tuple = ((LIVE, None),),
):
    """measure (traffic of `mix` sent while it waits, `measure_args` added), then judge: (exit code, the result)."""
    readings, out = tmp_path / "readings.json", tmp_path / "bake.json"
    sender = threading.Thread(target=_traffic, args=([canary, *old], requests, mix))
    argv = [
        "measure",
        "--canary",
        f"node1={canary}",
        *(f"--old=node{i + 2}={u}" for i, u in enumerate(old)),
        "--seconds",
        seconds,
        "--poll",
        "0.5",
        "--min-requests",
        str(min_requests),
        "--max-wait",
        "5",
        "--out",
        str(readings),
        *measure_args,
    ]
    sender.start()
    try:
        assert bake.main(argv) == 0
    finally:
        sender.join()
    rc = bake.main(
        [
            "judge",
            "--readings",
            str(readings),
            "--model",
            MODEL,
            "--algorithm",
            "DFLASH",
            "--out",
            str(out),
            *judge_args,
        ]
    )
    return rc, json.loads(out.read_text())


def _row(result: dict, metric: str) -> dict:
    return next(r for r in result["rows"] if r["metric"] == metric)


def test_a_draft_that_collapses_on_the_live_class_fails_on_acceptance(double, tmp_path):
    canary = double(*QUICK, "--accept-length-for", f"{LIVE}=1.0")
    old = [double(*QUICK), double(*QUICK)]
    smoke = _post(canary + "/generate", {"text": "def f(x):", "sampling_params": {"max_new_tokens": 32}})
    assert smoke["meta_info"]["spec_accept_length"] > 2  # what a smoke gate sees: fine
    rc, result = _bake(tmp_path, canary, old, requests=12)
    assert rc == 1 and result["verdict"] == "fail"
    assert "accept length" in result["failed_rows"]
    row = _row(result, "accept length")
    assert row["canary"] < 1.2 and row["old"] > 2.4 and row["baseline"] == 2.8
    assert "FAILED on accept length" in result["headline"]
    assert "accept length" in result["table"] and "FAIL" in result["table"]


def test_a_draft_that_collapses_on_one_class_of_a_mixed_load_fails_on_that_class(double, tmp_path):
    """One request in four is of the class the draft lost (accept length 2 where the old nodes have 4): the
    overall accept length falls by a fifth, within a 0.3 tolerance; the class's own row fails. (Its requests
    take twice the steps, so the inter-token p99 doubles too: the latency tolerance is widened to leave
    acceptance the only row that fails.)"""
    canary = double(*QUICK, *CLASSES, "--accept-length", "4", "--accept-length-for", f"{LIVE}=2.0")
    old = [double(*QUICK, *CLASSES, "--accept-length", "4")]
    rc, result = _bake(
        tmp_path,
        canary,
        old,
        80,
        80,
        "--accept-tolerance",
        "0.3",
        "--latency-tolerance",
        "3",
        measure_args=("--max-wait", "60"),
        mix=MIXED,
    )
    assert rc == 1 and result["failed_rows"] == ["accept length, class prose"], result["table"]
    assert _row(result, "accept length")["verdict"] == "ok"
    code, prose = _row(result, "accept length, class code"), _row(result, "accept length, class prose")
    assert code["verdict"] == "ok" and code["baseline"] == 2.8
    assert prose["canary"] < 2.5 and prose["old"] > 3.2 and prose["baseline"] == 2.8
    assert "FAILED on accept length, class prose" in result["headline"]


def test_a_class_with_few_canary_requests_is_shown_not_judged():
    def served(requests: int, accept: float, classes: dict) -> dict:
        return {
            "requests": requests,
            "aborted": 0,
            "aborted_share": 0.0,
            "accept_length": accept,
            "classes": classes,
            **{label: 0.01 for label, _, _ in bake_rows.LATENCY_ROWS},
        }

    tol = bake_rows.Tolerances()
    few = tol.min_class_requests - 1
    canary = served(
        200, 3.0, {"code": {"requests": 190, "accept_length": 3.0}, "math": {"requests": few, "accept_length": 1.0}}
    )
    old = served(
        200, 3.0, {"code": {"requests": 180, "accept_length": 3.0}, "math": {"requests": 20, "accept_length": 3.0}}
    )
    result = bake_rows.compare(canary, old, {"code": 2.8, "math": 2.8}, tol)
    assert result["verdict"] == "promote"
    math_row = _row(result, "accept length, class math")
    assert math_row["verdict"] == "n/a" and f"judged from {tol.min_class_requests} requests" in math_row["tolerance"]
    # the same class with enough requests fails
    canary["classes"]["math"]["requests"] = tol.min_class_requests
    assert bake_rows.compare(canary, old, {"code": 2.8, "math": 2.8}, tol)["failed_rows"] == [
        "accept length, class math"
    ]


def test_the_same_canary_with_a_good_draft_is_promoted(double, tmp_path):
    canary, old = double(*QUICK), [double(*QUICK), double(*QUICK)]
    rc, result = _bake(tmp_path, canary, old, requests=12)
    assert (rc, result["verdict"], result["failed_rows"]) == (0, "promote", [])
    assert _row(result, "requests")["canary"] >= 10 and _row(result, "requests")["old"] >= 10
    assert _row(result, "ITL p99 (s)")["verdict"] == "ok"
    assert result["source"] == "the nodes' /metrics" and result["table"].endswith("\nnumbers from the nodes' /metrics")


def test_a_canary_five_times_slower_per_token_fails_on_itl(double, tmp_path):
    """Five times the step, not two: on a loaded machine the old node's 20 ms steps stretch too, and its p99
    can reach the bucket a doubled canary lands in (SGLang's ITL buckets are 20 ms wide there)."""
    canary, old = double("--step-ms", "100"), [double(*QUICK)]
    rc, result = _bake(tmp_path, canary, old, requests=12, measure_args=("--max-wait", "20"))
    assert rc == 1 and "ITL p99 (s)" in result["failed_rows"]
    assert _row(result, "accept length")["verdict"] == "ok"  # the draft is fine; only the speed is not


def test_too_little_traffic_gives_no_verdict(double, tmp_path):
    canary, old = double(*QUICK), [double(*QUICK)]
    rc, result = _bake(tmp_path, canary, old, requests=2, min_requests=50)
    assert rc == 1 and result["verdict"] == "no-verdict"
    assert "NO VERDICT: the canary served 2 request(s), fewer than the 50 a verdict needs" in result["headline"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--seconds", "5", "--poll", "15"], "a bake of 5 s is shorter than one reading interval (15 s)"),
        (["--seconds", "30", "--accept-tolerance", "1.5"], "is not a fraction in [0, 1)"),
        (["--seconds", "30", "--latency-tolerance", "-0.1"], "is negative"),
    ],
)
def test_bad_settings_are_refused(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        bake.main(["check", "--model", MODEL, *argv])
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_a_prometheus_that_does_not_answer_is_refused(capsys):
    """tests/monitoring/test_bake_prometheus.py checks the rest of the Prometheus settings against a real one."""
    with socket.socket() as s:  # a port nothing listens on once closed
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    argv = ["check", "--model", MODEL, "--algorithm", "DFLASH", "--seconds", "30", "--prometheus", url]
    assert bake.main(argv) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"Prometheus at {url} does not answer: cannot reach {url}/api/v1/status/config" in err
    assert 'set sglang_bake_prometheus_url to "" to read the nodes\' /metrics' in err
    with pytest.raises(SystemExit) as exc:
        bake.main([*argv[:-1], "prometheus:9090"])
    assert exc.value.code == 2 and "is not an http:// or https:// URL" in capsys.readouterr().err


def test_prometheus_finds_a_node_by_the_host_and_port_the_router_reaches_it_at():
    assert bake_prometheus.instance("http://10.0.0.1:30000/") == "10.0.0.1:30000"
    assert bake_prometheus.instance("http://[fd00::1]:30000") == "[fd00::1]:30000"
    assert bake_prometheus.instance("https://gpu01") == "gpu01:443"
    assert bake_prometheus.duration_s("1m30s") == 90 and bake_prometheus.duration_s("15s") == 15


def test_a_model_without_a_baseline_is_refused(capsys):
    assert bake.main(["check", "--model", "/models/some-other-model", "--seconds", "30"]) == 2
    assert "has no baseline_accept_length: the bake compares the canary's acceptance with it" in capsys.readouterr().err
    assert bake.main(["check", "--model", MODEL, "--algorithm", "DFLASH", "--seconds", "30"]) == 0


def test_histogram_quantiles_interpolate_like_promql():
    counts = {0.1: 10.0, 0.2: 20.0, 0.4: 20.0, math.inf: 20.0}
    assert promseries.quantile(0.5, counts) == pytest.approx(0.1)
    assert promseries.quantile(0.75, counts) == pytest.approx(0.15)
    assert promseries.quantile(1.0, {0.1: 1.0, math.inf: 2.0}) == 0.1  # in +Inf: the highest finite bound
    assert promseries.quantile(0.5, {}) is None
    text = (
        'x_bucket{a="1",le="0.1"} 1\nx_bucket{a="2",le="0.1"} 2\nx_bucket{a="1",le="+Inf"} 3\n'
        'x_bucket{a="2",le="+Inf"} 4\n'
    )
    assert promseries.buckets(promseries.samples(text), "x") == {0.1: 3.0, math.inf: 7.0}


def test_overlay_facts_worse_on_the_canary_fail():
    facts = {"fold_in_use": ["replayssm"], "fallback_shapes": [], "selfcheck_outcomes": {"passed": 1}}
    worse = {"fold_in_use": ["sglang"], "fallback_shapes": ["(4, 16)"], "selfcheck_outcomes": {"failed": 1}}
    window = {
        "requests": 200,
        "aborted": 0,
        "aborted_share": 0.0,
        "accept_length": 3.0,
        **{label: 0.01 for label, _, _ in bake_rows.LATENCY_ROWS},
    }
    tol = bake_rows.Tolerances()
    assert bake_rows.compare(window, window, {"code": 2.8}, tol, (facts, facts))["verdict"] == "promote"
    result = bake_rows.compare(window, window, {"code": 2.8}, tol, (worse, facts))
    assert result["failed_rows"] == ["fold in use", "new fallback shapes", "self-check outcomes"]
