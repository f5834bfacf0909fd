"""The stand-in server as the routers and live clients use it: streamed answers (server-sent events ending in
`data: [DONE]`, like 0.5.19's /generate with `"stream": true`), chunked request bodies (smg 1.x forwards them),
smg's `model` field, a per-class acceptance knob, and the request counters and latency histograms a canary
bake reads from /metrics.
"""

from __future__ import annotations

import http.client
import json
import re
import time
import urllib.parse

from tests.smoke.test_smoke_double import _get, _post


def _stream(url: str, payload: dict, chunked: bool = False) -> tuple[str, list[bytes]]:
    """POST /generate and read the answer as server-sent events: (content type, the data of each event)."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    body = json.dumps(payload).encode()
    if chunked:
        conn.putrequest("POST", "/generate")
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Transfer-Encoding", "chunked")
        conn.endheaders()
        for piece in (body[:7], body[7:]):
            conn.send(b"%x\r\n%s\r\n" % (len(piece), piece))
        conn.send(b"0\r\n\r\n")
    else:
        conn.request("POST", "/generate", body, {"Content-Type": "application/json"})
    reply = conn.getresponse()
    text = reply.read().decode()
    conn.close()
    events = [block for block in text.split("\n\n") if block]
    assert all(e.startswith("data: ") for e in events), text
    return reply.getheader("Content-Type"), [e[len("data: ") :].encode() for e in events]


def _metric(text: str, name: str) -> float:
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name + "{") or line.startswith(name + " ")
    )


def test_a_stream_sends_one_event_per_forward_pass_then_done(double):
    url = double("--step-ms", "1")
    ctype, events = _stream(url, {"text": "stream me", "sampling_params": {"max_new_tokens": 12}, "stream": True})
    assert ctype == "text/event-stream"
    assert events[-1] == b"[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert len(chunks) >= 2
    whole = _post(url + "/generate", {"text": "stream me", "sampling_params": {"max_new_tokens": 12}})
    assert chunks[-1]["output_ids"] == whole["output_ids"] and chunks[-1]["text"] == whole["text"]
    assert [c["meta_info"]["finish_reason"] for c in chunks[:-1]] == [None] * (len(chunks) - 1)
    assert chunks[-1]["meta_info"]["finish_reason"] == {"type": "length", "length": 12}
    lengths = [len(c["output_ids"]) for c in chunks]
    assert lengths == sorted(lengths) and len(set(lengths)) == len(lengths)


def test_a_chunked_body_with_smg_model_field_is_read(double):
    url = double()
    _, events = _stream(
        url,
        {
            "text": "x",
            "model": "Qwen/Qwen3-Next-80B-A3B-Instruct",
            "sampling_params": {"max_new_tokens": 3},
            "stream": True,
        },
        chunked=True,
    )
    assert json.loads(events[-2])["meta_info"]["completion_tokens"] == 3
    assert _post(url + "/generate", {"text": "x", "model": "m", "sampling_params": {"max_new_tokens": 2}})


def test_the_class_knob_sets_acceptance_for_matching_prompts_only(double):
    url = double("--accept-length", "4", "--accept-length-for", "chat:=1.0")
    live = _post(url + "/generate", {"text": "chat: hello", "sampling_params": {"max_new_tokens": 32}})
    smoke = _post(url + "/generate", {"text": "def f(x):", "sampling_params": {"max_new_tokens": 32}})
    assert live["meta_info"]["spec_accept_length"] < 1.2  # collapsed: one token per verify, plus rounding
    assert smoke["meta_info"]["spec_accept_length"] > 2.5
    assert (
        live["output_ids"]
        == _post(url + "/generate", {"text": "chat: hello", "sampling_params": {"max_new_tokens": 32}})["output_ids"]
    )  # outputs stay what the model says


def test_requests_and_latency_histograms_count_each_request(double):
    url = double("--step-ms", "2")
    for stream in (False, True):
        payload = {"text": "y", "sampling_params": {"max_new_tokens": 6}, "stream": stream}
        if stream:
            _stream(url, payload)
        else:
            _post(url + "/generate", payload)
    text = _get(url + "/metrics")
    assert _metric(text, "sglang:num_requests_total") == 2
    assert _metric(text, "sglang:num_aborted_requests_total") == 0
    assert _metric(text, "sglang:time_to_first_token_seconds_count") == 2
    assert _metric(text, "sglang:inter_token_latency_seconds_count") == 2
    buckets = [line for line in text.splitlines() if line.startswith("sglang:time_to_first_token_seconds_bucket")]
    assert buckets[-1].split("}")[0].endswith('le="+Inf"') and buckets[-1].endswith(" 2.0")


def _by_class(text: str, name: str) -> dict[str, float]:
    """`name`'s samples summed per `class` label (None where a sample has none)."""
    out: dict = {}
    for line in text.splitlines():
        if line.startswith(name + "{"):
            labels, value = line.rsplit(" ", 1)
            match = re.search(r'class="([^"]*)"', labels)
            key = match[1] if match else None
            out[key] = out.get(key, 0.0) + float(value)
    return out


def test_allowed_custom_labels_split_the_request_series_by_class(double):
    """As 0.5.19's tokenizer metrics: each allowed label on the request counters and histograms, "" for a request
    that names none; a label the server does not allow is not a label."""
    url = double(
        "--enable-metrics",
        "--tokenizer-metrics-allowed-custom-labels",
        "class",
        "--accept-length-for",
        "chat:=1.0",
        "--accept-length",
        "4",
    )
    for text, labels in (("chat: a", {"class": "chat"}), ("chat: b", {"class": "chat", "team": "x"}), ("def f", None)):
        payload = {"text": text, "sampling_params": {"max_new_tokens": 16}}
        _post(url + "/generate", {**payload, "custom_labels": labels} if labels else payload)
    _stream(
        url,
        {"text": "code", "sampling_params": {"max_new_tokens": 16}, "stream": True, "custom_labels": {"class": "code"}},
    )
    text = _get(url + "/metrics")
    assert _by_class(text, "sglang:num_requests_total") == {"chat": 2, "": 1, "code": 1}
    assert _by_class(text, "sglang:time_to_first_token_seconds_count") == {"chat": 2, "": 1, "code": 1}
    assert "team=" not in text
    tokens = _by_class(text, "sglang:generation_tokens_total")
    calls = _by_class(text, "sglang:spec_verify_calls_total")
    assert tokens == {"chat": 32, "": 16, "code": 16}
    assert tokens["chat"] / calls["chat"] < 1.2 < 2.5 < tokens[""] / calls[""]  # the class knob, per class
    # without the flag the same requests carry no class label
    plain = double("--enable-metrics")
    _post(
        plain + "/generate",
        {"text": "chat: a", "sampling_params": {"max_new_tokens": 4}, "custom_labels": {"class": "chat"}},
    )
    assert _by_class(_get(plain + "/metrics"), "sglang:num_requests_total") == {None: 1}


def test_a_client_that_leaves_mid_stream_counts_as_aborted(double):
    url = double("--step-ms", "200")
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    conn.request(
        "POST",
        "/generate",
        json.dumps({"text": "z", "sampling_params": {"max_new_tokens": 40}, "stream": True}),
        {"Content-Type": "application/json"},
    )
    reply = conn.getresponse()
    reply.fp.readline()  # the first event's chunk size: the stream has begun
    conn.sock.close()
    conn.close()
    deadline = time.monotonic() + 20
    while _metric(_get(url + "/metrics"), "sglang:num_aborted_requests_total") < 1:
        assert time.monotonic() < deadline, "the abort was never counted"
        time.sleep(0.2)
