#!/usr/bin/env python3
"""A test double of SGLang 0.5.19's HTTP API, for what cannot run here: the GPU server.

It never ships (it lives under tests/). The smoke suite's tests and the Ansible rollout's stand-in
container image run it in place of `python -m sglang.launch_server`. Standard library only, so it runs
with a bare `python3` (a minimal Debian container, no pip packages).

What is faithful to 0.5.19 (field names and shapes checked against the installed release):
  * POST /generate: `text` or `input_ids` (single or batch), `sampling_params.max_new_tokens`,
    `return_logprob`, `logprob_start_len`, `top_logprobs_num`, `return_prompt_token_ids`; the response
    `{"text", "output_ids", "meta_info"[, "prompt_token_ids"]}` with meta_info `id`, `finish_reason`,
    `prompt_tokens`, `completion_tokens`, `cached_tokens`, `e2e_latency`, the speculative fields
    (`spec_verify_ct`, `spec_accept_length`, `spec_accept_rate`, `spec_num_correct_drafts`,
    `spec_num_proposed_drafts`, aliases, `spec_correct_drafts_histogram`) and the logprob lists
    (`input_token_logprobs`, `input_top_logprobs`, `output_token_logprobs`, `output_top_logprobs`
    as `[logprob, token_id, null]` triples, position 0 of the input lists being null).
  * GET /health, /health_generate (200, or 503 with an empty body), /server_info and the deprecated
    /get_server_info (flat server arguments, `internal_states[0].avg_spec_accept_length`, `version`),
    /model_info and /get_model_info, /metrics (Prometheus text: `sglang:generation_tokens_total`,
    `sglang:spec_verify_calls_total`, `sglang:spec_accept_length`, `sglang:spec_accept_rate`, with the
    scheduler's labels; the labelled counters only from the first finished request on, as in SGLang), /v1/loads
    (`loads[]` per DP rank with `num_running_reqs`, `num_waiting_reqs`, ...) and the deprecated /get_load
    (`num_reqs` = running + waiting).
  * SIGTERM drains like `TokenizerManager.sigterm_watchdog`: from the signal on /health and /health_generate
    answer 503, new /generate requests are still served, and the process exits once no request is in
    flight, checked every `--drain-poll-seconds` (SGLang: 5 s); `SGL_FORCE_SHUTDOWN=1`, or a server
    already unhealthy, exits at once. SIGINT exits at once.

The "model" is a deterministic toy: a byte-level tokenizer (token id = UTF-8 byte, ids up to 511) and
logits that depend only on the last three tokens, with one clearly preferred next token, so greedy
decoding and greedy parity are well defined. Decoding is always greedy (temperature is ignored).

Like SGLang it speculates only when started with `--speculative-algorithm` and serves /metrics only with
`--enable-metrics`; it accepts (and ignores) the rest of SGLang's launch flags, so a container can run it
with the stock `python3 -m sglang.launch_server ...` command line. Knobs that make it misbehave on
purpose are listed in `--help` (also read from the environment variable SGLANG_DOUBLE_ARGS). Two of them act on
output position k
(0-based, counted in generated tokens) of every generation request:
  * --wrong-token-at k: the "speculative" path emits a token that is not the argmax (a lossy verify);
  * --tie-at k: the model has a near-tie at that position (top two logits 1e-5 apart) and the
    speculative path emits the runner-up, as tie-breaking in a different kernel would. The server
    remembers the contexts where it did so, so re-scoring them (teacher forcing) shows the near-tie.
Two make time pass: --request-seconds (every /generate takes at least that long, so a load always has
requests in flight) and --step-ms (per forward pass). --accept-length-file makes the draft go bad at run
time (outputs stay correct; only the accept length falls, as a draft that stopped matching its target);
--accept-length-for PREFIX=L gives prompts that start with PREFIX (a request class, a prompt family) their own
mean accept length, so a draft can be fine on the smoke prompts and collapse on the live traffic's class.

Streaming (`"stream": true`, what real clients send) answers like 0.5.19's /generate: `text/event-stream`, one
`data: {json}` event per forward pass (the text and output_ids so far, meta_info with `finish_reason` null until
the last event), then `data: [DONE]`. Request bodies may come with Content-Length or chunked (smg 1.x forwards
chunked). With --enable-metrics it also exports the request counters and the latency histograms SGLang does
(`sglang:num_requests_total`, `sglang:num_aborted_requests_total`, `sglang:time_to_first_token_seconds`,
`sglang:inter_token_latency_seconds`, `sglang:e2e_request_latency_seconds`, SGLang's default buckets), which a
canary bake reads. With --tokenizer-metrics-allowed-custom-labels (e.g. `class`) those series carry each allowed
label, valued from the request's `custom_labels` ("" where it gives none), as 0.5.19's tokenizer metrics do; a
label the server does not allow is dropped (SGLang 0.5.19 would fail that request's metrics).
"""

from __future__ import annotations

import argparse
import hashlib
import heapq
import json
import math
import os
import shlex
import signal
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

VOCAB_SIZE = 512
PREFERRED_BOOST = 6.0  # logit margin of the model's preferred next token over the rest
TIE_GAP = 1e-5  # logit gap of an injected near-tie
VERSION = "0.5.19"
# The /generate request fields and sampling params it models. Unlike SGLang, it refuses any other key, so a
# misspelt field in a client fails loudly here; tests/smoke/test_smoke_double.py checks these names against the
# installed 0.5.19 (GenerateReqInput's and SamplingParams' dataclass fields).
REQUEST_FIELDS = frozenset(
    {
        "text",
        "input_ids",
        "sampling_params",
        "rid",
        "return_logprob",
        "logprob_start_len",
        "top_logprobs_num",
        "return_text_in_logprobs",
        "return_prompt_token_ids",
        "stream",
        "custom_labels",
    }
)
SAMPLING_FIELDS = frozenset({"max_new_tokens", "temperature", "top_p", "top_k", "ignore_eos", "stop", "stop_token_ids"})
# What sglang-router 0.3.2 writes into every /generate it forwards, with the values it writes (seen on the wire).
# SGLang accepts them (all but `model` are GenerateReqInput fields; its endpoint ignores `model`); the double
# accepts them at exactly these values, so a client that sets one still fails loudly. `model` may also name the
# served model, as smg 1.x may write it.
ROUTER_FIELDS = {
    "model": None,
    "log_metrics": True,
    "return_hidden_states": False,
    "background": False,
    "no_logs": False,
    "return_bytes": False,
    "return_entropy": False,
}


# SGLang 0.5.19's default buckets (observability/metrics_collector.py) for the latency histograms it exports.
TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
ITL_BUCKETS = (
    0.002,
    0.004,
    0.006,
    0.008,
    0.010,
    0.015,
    0.020,
    0.025,
    0.030,
    0.035,
    0.040,
    0.060,
    0.080,
    0.100,
    0.200,
    0.400,
    0.600,
    0.800,
    1.000,
    2.000,
    4.000,
)
E2E_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600, 1200, 1800, 2400)


class Histogram:
    """A Prometheus histogram: cumulative bucket counts, sum and count (not thread-safe; the caller locks)."""

    def __init__(self, buckets: tuple) -> None:
        self.buckets = buckets
        self.counts = [0] * len(buckets)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[i] += 1
        self.sum += value
        self.count += 1

    def lines(self, name: str, labels: str) -> list[str]:
        out = [f'{name}_bucket{{{labels},le="{float(b)}"}} {float(c)}' for b, c in zip(self.buckets, self.counts)]
        return out + [
            f'{name}_bucket{{{labels},le="+Inf"}} {float(self.count)}',
            f"{name}_sum{{{labels}}} {self.sum}",
            f"{name}_count{{{labels}}} {float(self.count)}",
        ]


#: the request counters SGLang's tokenizer exports: (name, counter, labelled is_streaming, help)
REQUEST_COUNTERS = (
    ("sglang:prompt_tokens_total", "prompt_tokens", True, "Number of prefill tokens processed."),
    ("sglang:generation_tokens_total", "generation_tokens", True, "Number of generation tokens processed."),
    ("sglang:num_requests_total", "requests", True, "Number of requests processed."),
    ("sglang:num_aborted_requests_total", "aborted", False, "Number of requests aborted."),
)
#: its latency histograms: (name, histogram, labelled is_streaming, help)
REQUEST_HISTOGRAMS = (
    ("sglang:time_to_first_token_seconds", "ttft", True, "Histogram of time to first token in seconds."),
    ("sglang:inter_token_latency_seconds", "itl", False, "Histogram of inter-token latency in seconds."),
    ("sglang:e2e_request_latency_seconds", "e2e", True, "Histogram of End-to-end request latency in seconds"),
)
STREAMING = 'is_streaming="false"'
#: what a label set counts
COUNTERS = ("prompt_tokens", "generation_tokens", "verify_calls", "accept_tokens", "requests", "aborted")


class Series:
    """What one label set of SGLang's request metrics has counted: the counters and the latency histograms."""

    def __init__(self) -> None:
        self.counters = dict.fromkeys(COUNTERS, 0)
        self.histograms = {
            "ttft": Histogram(TTFT_BUCKETS),
            "itl": Histogram(ITL_BUCKETS),
            "e2e": Histogram(E2E_BUCKETS),
        }

    def copy(self) -> Series:
        out = Series()
        out.counters = dict(self.counters)
        out.histograms = {key: _copy_histogram(hist) for key, hist in self.histograms.items()}
        return out


# ----------------------------------------------------------------------------------------- the toy model
def _unit(*parts: int) -> float:
    """A deterministic number in [0, 1) from integers."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2**64


class ToyModel:
    """Logits over VOCAB_SIZE that depend on the last three tokens of the context."""

    def __init__(self) -> None:
        self._tie_contexts: set[int] = set()
        self._lock = threading.Lock()

    @staticmethod
    def _window(context: list[int]) -> tuple[int, ...]:
        return tuple(context[-3:])

    def _base_logits(self, context: list[int]) -> list[float]:
        window = self._window(context)
        seed = int(_unit(*window) * 2**32)
        logits = [((seed * 2654435761 + v * 40503) % 65521) / 65521 * 4.0 for v in range(VOCAB_SIZE)]
        preferred = 256 + int(_unit(len(window), *window) * 256)
        logits[preferred] += PREFERRED_BOOST
        return logits

    def mark_tie(self, context: list[int]) -> None:
        with self._lock:
            self._tie_contexts.add(hash(tuple(context)))

    def logits(self, context: list[int]) -> list[float]:
        logits = self._base_logits(context)
        with self._lock:
            tied = hash(tuple(context)) in self._tie_contexts
        if tied:
            best, second = heapq.nlargest(2, range(VOCAB_SIZE), key=logits.__getitem__)
            logits[second] = logits[best] - TIE_GAP
        return logits

    def ranked(self, context: list[int], k: int = 3) -> list[int]:
        """The k most likely next tokens, best first."""
        return heapq.nlargest(k, range(VOCAB_SIZE), key=self.logits(context).__getitem__)

    def logprobs(self, context: list[int]) -> list[float]:
        logits = self.logits(context)
        top = max(logits)
        log_z = top + math.log(sum(math.exp(x - top) for x in logits))
        return [x - log_z for x in logits]


def tokenize(text: str) -> list[int]:
    return list(text.encode("utf-8"))


def detokenize(ids: list[int]) -> str:
    out = bytearray()
    for i in ids:
        out.append(i if i < 256 else 0x61 + (i - 256) % 26)
    return out.decode("utf-8", errors="replace")


# ----------------------------------------------------------------------------------------- the server
class ServerState:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.model = ToyModel()
        self.started = time.time()
        self.lock = threading.Lock()
        # one Series per label set: the custom labels SGLang allows (--tokenizer-metrics-allowed-custom-labels),
        # valued from each request's `custom_labels` ("" where it names none)
        self.allowed_labels = tuple(args.tokenizer_metrics_allowed_custom_labels or ())
        self.series: dict[tuple, Series] = {}
        self.last_window = {"accept_length": 0.0, "accept_rate": 0.0}
        self.in_flight = 0  # /generate requests being served (SGLang: len(rid_to_state))
        self.draining = False  # set by SIGTERM (SGLang: tokenizer_manager.gracefully_exit)

    @property
    def speculative(self) -> bool:
        return self.args.algorithm.upper() != "NONE"

    def healthy(self) -> bool:
        if self.draining or self.args.unhealthy:
            return False
        if self.args.health_file and os.path.exists(self.args.health_file):
            return False
        return time.time() - self.started >= self.args.start_delay

    # ---------------------------------------------------------------------------------- generation
    def accept_length(self) -> float:
        """The configured mean accept length; --accept-length-file, while it exists, overrides it."""
        path = self.args.accept_length_file
        if path:
            try:
                with open(path) as f:
                    return float(f.read().strip())
            except (OSError, ValueError):
                pass
        return self.args.accept_length

    def _class_accept_length(self, prompt_ids: list[int]) -> float:
        """The mean of the first --accept-length-for PREFIX=L whose PREFIX starts the prompt, else the default."""
        for prefix, value in self.args.accept_length_for:
            if prompt_ids[: len(prefix)] == prefix:
                return value
        return self.accept_length()

    def _accept_length_for(self, prompt_ids: list[int]) -> float:
        """The request's mean accept length: its class's mean, varied +-20% per prompt."""
        spread = 0.8 + 0.4 * _unit(*prompt_ids[:32], len(prompt_ids))
        return min(max(1.0, self._class_accept_length(prompt_ids) * spread), float(self.args.draft_tokens))

    def _decode(self, prompt_ids: list[int], max_new_tokens: int) -> list[int]:
        context = list(prompt_ids)
        out: list[int] = []
        for position in range(max_new_tokens):
            ranked = self.model.ranked(context)
            token = ranked[0]
            if self.speculative and position == self.args.tie_at:
                self.model.mark_tie(context)
                token = self.model.ranked(context, 2)[1]
            elif self.speculative and position == self.args.wrong_token_at:
                token = ranked[2]
            out.append(token)
            context.append(token)
        return out

    def _spec_fields(self, prompt_ids: list[int], completion: int) -> dict:
        if completion <= 1:
            return {}
        accept = self._accept_length_for(prompt_ids)
        verify_ct = max(1, math.ceil((completion - 1) / accept))
        correct = max(0, completion - 1 - verify_ct)
        proposed = verify_ct * (self.args.draft_tokens - 1)
        histogram = [0] * self.args.draft_tokens
        base, extra = divmod(correct, verify_ct)
        histogram[min(base, self.args.draft_tokens - 1)] += verify_ct - extra
        if extra:
            histogram[min(base + 1, self.args.draft_tokens - 1)] += extra
        return {
            "spec_accept_rate": correct / proposed if proposed else 0.0,
            "spec_accept_length": completion / verify_ct,
            "spec_num_correct_drafts": correct,
            "spec_num_proposed_drafts": proposed,
            "spec_verify_ct": verify_ct,
            "spec_accepted_drafts": correct,
            "spec_proposed_drafts": proposed,
            "spec_correct_drafts_histogram": histogram,
            "spec_accept_histogram": histogram,
        }

    def _logprob_fields(self, ids: list[int], out: list[int], start: int, top_n: int) -> dict:
        full = ids + out
        fields: dict = {}
        if start < 0 or start >= len(ids):
            in_positions: list[int] = []
        else:
            in_positions = list(range(start, len(ids)))
        in_tok, in_top = [], []
        for j, pos in enumerate(in_positions):
            if j == 0:
                in_tok.append([None, ids[pos], None])
                in_top.append(None)
                continue
            lps = self.model.logprobs(full[:pos])
            in_tok.append([lps[ids[pos]], ids[pos], None])
            in_top.append(_top(lps, top_n))
        out_tok, out_top = [], []
        for i, token in enumerate(out):
            lps = self.model.logprobs(full[: len(ids) + i])
            out_tok.append([lps[token], token, None])
            out_top.append(_top(lps, top_n))
        fields["input_token_logprobs"] = in_tok
        fields["output_token_logprobs"] = out_tok
        fields["output_token_logprobs_length"] = len(out_tok)
        if top_n > 0:
            fields["input_top_logprobs"] = in_top
            fields["output_top_logprobs"] = out_top
        return fields

    def generate(self, req: dict, batch: list[list[int]]) -> list[dict]:
        """Serve one /generate request (a prompt or a batch), taking at least --request-seconds."""
        tic = time.time()
        results = [self.generate_one(req, ids) for ids in batch]
        time.sleep(max(0.0, self.args.request_seconds - (time.time() - tic)))
        for result in results:
            self.observe(tic, result["meta_info"], tic + self.prefill_seconds(result), self.labels_of(req))
        return results

    def prefill_seconds(self, result: dict) -> float:
        """When the first token is out, counted from the request's start: what --request-seconds leaves over the
        forward passes, plus the first pass."""
        steps = self.steps(result["meta_info"])
        step = self.args.step_ms / 1000.0
        return max(0.0, self.args.request_seconds - steps * step) + step

    def steps(self, meta: dict) -> int:
        """Forward passes of one generation: one per verify (plus the prefill), or one per token."""
        return meta.get("spec_verify_ct", 0) + 1 if self.speculative else max(1, meta["completion_tokens"])

    def labels_of(self, req: dict) -> tuple:
        """The request's custom label set: (name, value) per allowed label, as SGLang's tokenizer metrics
        label it (labels the server does not allow are dropped here)."""
        given = req.get("custom_labels") or {}
        return tuple((name, str(given.get(name, ""))) for name in self.allowed_labels)

    def _series(self, key: tuple) -> Series:
        """The label set's Series, created on its first request (the caller locks)."""
        return self.series.setdefault(key, Series())

    def totals(self) -> dict:
        """The counters summed over the label sets."""
        with self.lock:
            return {name: sum(one.counters[name] for one in self.series.values()) for name in COUNTERS}

    def observe(self, tic: float, meta: dict, first_token_at: float, key: tuple, aborted: bool = False) -> None:
        """Count one finished (or aborted) request into the counters and latency histograms SGLang exports."""
        now = time.time()
        completion = meta["completion_tokens"]
        with self.lock:
            one = self._series(key)
            one.counters["requests"] += 1
            if aborted:
                one.counters["aborted"] += 1
                return
            one.histograms["ttft"].observe(first_token_at - tic)
            one.histograms["e2e"].observe(now - tic)
            if completion > 1:
                one.histograms["itl"].observe((now - first_token_at) / (completion - 1))

    def count_in_flight(self, delta: int) -> None:
        with self.lock:
            self.in_flight += delta

    def generate_one(self, req: dict, ids: list[int]) -> dict:
        tic = time.time()
        params = req.get("sampling_params") or {}
        max_new = int(params.get("max_new_tokens", 128))
        out = self._decode(ids, max_new)
        meta = {
            "id": req.get("rid") or uuid.uuid4().hex,
            "finish_reason": {"type": "length", "length": len(out)},
            "prompt_tokens": len(ids),
            "weight_version": "default",
            "num_retractions": 0,
            "reasoning_tokens": 0,
            "completion_tokens": len(out),
            "cached_tokens": 0,
        }
        if req.get("return_logprob"):
            start = req.get("logprob_start_len")
            meta.update(
                self._logprob_fields(
                    ids, out, -1 if start is None else int(start), int(req.get("top_logprobs_num") or 0)
                )
            )
        spec = self._spec_fields(ids, len(out)) if self.speculative else {}
        if not req.get("stream"):
            time.sleep(self.args.step_ms / 1000.0 * self.steps({**spec, "completion_tokens": len(out)}))
        meta["e2e_latency"] = time.time() - tic
        meta.update(spec)
        with self.lock:
            counters = self._series(self.labels_of(req)).counters
            counters["prompt_tokens"] += len(ids)
            counters["generation_tokens"] += len(out)
            if spec:
                counters["verify_calls"] += spec["spec_verify_ct"]
                counters["accept_tokens"] += len(out)
                self.last_window = {
                    "accept_length": spec["spec_accept_length"],
                    "accept_rate": spec["spec_accept_rate"],
                }
        result = {"text": detokenize(out), "output_ids": out, "meta_info": meta}
        if req.get("return_prompt_token_ids"):
            result["prompt_token_ids"] = list(ids)
        return result

    # ---------------------------------------------------------------------------------- info
    def server_info(self) -> dict:
        args = self.args
        internal: dict = {"last_gen_throughput": 0.0, "effective_max_running_requests_per_dp": 64}
        totals = self.totals()
        if self.speculative and totals["verify_calls"]:
            internal["avg_spec_accept_length"] = totals["accept_tokens"] / totals["verify_calls"]
        spec = self.speculative
        return {
            "model_path": args.model_path,
            "served_model_name": args.served_model_name or args.model_path,
            "tokenizer_path": args.model_path,
            "host": args.host,
            "port": args.port,
            "tp_size": 1,
            "dp_size": 1,
            "page_size": 1,
            "enable_metrics": args.enable_metrics,
            "speculative_algorithm": args.algorithm.upper() if spec else None,
            "speculative_draft_model_path": args.speculative_draft_model_path,
            "speculative_num_steps": args.draft_tokens - 1 if spec else None,
            "speculative_eagle_topk": 1 if spec else None,
            "speculative_num_draft_tokens": args.draft_tokens if spec else None,
            "enable_linear_replayssm_spec": args.enable_linear_replayssm_spec,
            "mamba_ssm_dtype": args.mamba_ssm_dtype,
            **{
                name: getattr(args, name)
                for name in (
                    "linear_attn_backend",
                    "linear_attn_decode_backend",
                    "linear_attn_prefill_backend",
                    "linear_attn_verify_backend",
                )
            },
            "startup_time": self.started,
            "internal_states": [internal],
            "version": args.sglang_version,
            "kv_events": None,
        }

    def model_info(self) -> dict:
        args = self.args
        return {
            "model_path": args.model_path,
            "served_model_name": args.served_model_name or args.model_path,
            "tokenizer_path": args.model_path,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
            "load_format": "auto",
            "reasoning_parser": None,
            "tool_call_parser": None,
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": "qwen3_next",
            "architectures": ["Qwen3NextForCausalLM"],
        }

    def loads(self) -> dict:
        """/v1/loads: one DP rank; a request in flight counts as running (the double has no queue)."""
        with self.lock:
            running = self.in_flight
        core = {
            "timestamp": time.time(),
            "dp_rank": 0,
            "num_running_reqs": running,
            "num_waiting_reqs": 0,
            "num_waiting_uncached_tokens": 0,
            "num_used_tokens": 0,
            "num_total_tokens": 0,
            "num_active_tokens": 0,
            "max_total_num_tokens": 65536,
            "max_running_requests": 64,
            "token_usage": 0.0,
            "gen_throughput": 0.0,
            "cache_hit_rate": 0.0,
            "utilization": 0.0,
        }
        return {
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
            "version": VERSION,
            "accelerator": None,
            "num_accelerators": 1,
            "loads": [core],
        }

    def legacy_load(self) -> list:
        """/get_load: the deprecated projection of /v1/loads."""
        core = self.loads()["loads"][0]
        return [
            {
                "dp_rank": 0,
                "num_reqs": core["num_running_reqs"] + core["num_waiting_reqs"],
                "num_waiting_reqs": core["num_waiting_reqs"],
                "num_tokens": 0,
                "num_pending_tokens": 0,
                "ts_tic": time.perf_counter(),
            }
        ]

    def metrics(self) -> str:
        name = self.args.served_model_name or self.args.model_path
        base = f'model_name="{name}",engine_type="unified",tp_rank="0",pp_rank="0",moe_ep_rank="0"'
        with self.lock:
            # labelled counters and histograms have no sample until the label set's first finished request
            # (SGLang 0.5.19 creates the label set then); the gauges are there from the start
            series = {key: one.copy() for key, one in self.series.items() if one.counters["requests"]}
            w = dict(self.last_window)

        def labels(key: tuple, streaming: bool) -> str:
            return ",".join([base, *(f'{n}="{v}"' for n, v in key), *([STREAMING] if streaming else [])])

        lines: list[str] = []
        for metric, counter, streaming, doc in REQUEST_COUNTERS if series else ():
            lines += [f"# HELP {metric} {doc}", f"# TYPE {metric} counter"]
            lines += [f"{metric}{{{labels(k, streaming)}}} {float(one.counters[counter])}" for k, one in series.items()]
        for metric, key, streaming, doc in REQUEST_HISTOGRAMS if series else ():
            lines += [f"# HELP {metric} {doc}", f"# TYPE {metric} histogram"]
            for k, one in series.items():
                lines += one.histograms[key].lines(metric, labels(k, streaming))
        verified = {k: one for k, one in series.items() if one.counters["verify_calls"]}
        if self.speculative and verified:
            lines += [
                "# HELP sglang:spec_verify_calls_total Number of speculative decoding verification calls.",
                "# TYPE sglang:spec_verify_calls_total counter",
                *(
                    f"sglang:spec_verify_calls_total{{{labels(k, False)}}} {float(one.counters['verify_calls'])}"
                    for k, one in verified.items()
                ),
            ]
        if self.speculative:
            lines += [
                "# HELP sglang:spec_accept_length Mean acceptance length of speculative decoding "
                "(accepted drafts + bonus token per forward).",
                "# TYPE sglang:spec_accept_length gauge",
                f"sglang:spec_accept_length{{{base}}} {w['accept_length']}",
                "# HELP sglang:spec_accept_rate Speculative acceptance rate "
                "(`accepted drafts / proposed drafts` in batch).",
                "# TYPE sglang:spec_accept_rate gauge",
                f"sglang:spec_accept_rate{{{base}}} {w['accept_rate']}",
            ]
        return "\n".join(lines) + "\n"


def _copy_histogram(hist: Histogram) -> Histogram:
    copy = Histogram(hist.buckets)
    copy.counts, copy.sum, copy.count = list(hist.counts), hist.sum, hist.count
    return copy


def _top(logprobs: list[float], n: int) -> list[list] | None:
    if n <= 0:
        return None
    order = heapq.nlargest(n, range(len(logprobs)), key=logprobs.__getitem__)
    return [[logprobs[v], v, None] for v in order]


class BadRequest(Exception):
    pass


def _router_value(key: str, value) -> bool:
    """Whether a field a router adds has a value it writes: `model` may name the served model (smg 1.x)."""
    if key == "model":
        return value is None or isinstance(value, str)
    return key in ROUTER_FIELDS and value == ROUTER_FIELDS[key]


def _check_fields(req: dict) -> None:
    unknown = sorted(k for k in set(req) - REQUEST_FIELDS if not _router_value(k, req[k]))
    params = req.get("sampling_params") or {}
    if not isinstance(params, dict):
        raise BadRequest("sampling_params must be an object")
    unknown += [f"sampling_params.{k}" for k in sorted(set(params) - SAMPLING_FIELDS)]
    if unknown:
        raise BadRequest(f"the test double does not model field(s) {unknown}")
    if req.get("stream") and (
        isinstance(req.get("text"), list) or (req.get("input_ids") and isinstance(req["input_ids"][0], list))
    ):
        raise BadRequest("the test double streams single prompts only, not batches")


def _inputs(req: dict) -> tuple[list[list[int]], bool]:
    """The request's prompts as token id lists, and whether it was a batch."""
    if req.get("text") is not None:
        text = req["text"]
        if isinstance(text, list):
            return [tokenize(t) for t in text], True
        if isinstance(text, str):
            return [tokenize(text)], False
        raise BadRequest("text must be a string or a list of strings")
    ids = req.get("input_ids")
    if ids is None:
        raise BadRequest("Either text, input_ids or input_embeds should be provided.")
    if ids and isinstance(ids[0], list):
        batch, is_batch = ids, True
    else:
        batch, is_batch = [ids], False
    for one in batch:
        if not all(isinstance(t, int) and 0 <= t < VOCAB_SIZE for t in one):
            raise BadRequest(f"input_ids must be token ids in [0, {VOCAB_SIZE})")
        if not one:
            raise BadRequest("The input_ids is empty.")
    return batch, is_batch


def make_handler(state: ServerState):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "uvicorn"
        sys_version = ""

        def log_message(self, fmt, *args):  # one short line per request, on stderr
            if not state.args.quiet:
                sys.stderr.write(f"double: {self.address_string()} {fmt % args}\n")

        def _send(self, status: int, body: bytes = b"", ctype: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _json(self, status: int, obj) -> None:
            self._send(status, json.dumps(obj).encode())

        def do_GET(self):  # noqa: N802 (http.server's naming)
            path = self.path.split("?", 1)[0]
            if path in ("/health", "/health_generate"):
                self._send(200 if state.healthy() else 503)
            elif path in ("/server_info", "/get_server_info"):
                self._json(200, state.server_info())
            elif path in ("/model_info", "/get_model_info"):
                self._json(200, state.model_info())
            elif path in ("/metrics", "/metrics/") and state.args.enable_metrics:
                self._send(200, state.metrics().encode(), "text/plain; version=0.0.4; charset=utf-8")
            elif path == "/v1/loads":
                self._json(200, state.loads())
            elif path == "/get_load":
                self._json(200, state.legacy_load())
            else:
                self._json(404, {"detail": "Not Found"})

        def do_POST(self):  # noqa: N802
            path = self.path.split("?", 1)[0]
            raw = self._body()
            if path != "/generate":
                self._json(404, {"detail": "Not Found"})
                return
            state.count_in_flight(1)  # until the answer is written: a drain never cuts one off
            try:
                self._generate(raw)
            finally:
                state.count_in_flight(-1)

        def _body(self) -> bytes:
            """The request body, sent with Content-Length or chunked (Transfer-Encoding: chunked)."""
            if self.headers.get("Transfer-Encoding", "").lower() != "chunked":
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))
            raw = b""
            while (size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)) > 0:
                raw += self.rfile.read(size)
                self.rfile.readline()
            while self.rfile.readline().strip():  # trailers, up to the blank line
                pass
            return raw

        def _stream(self, req: dict, ids: list[int]) -> None:
            """SGLang's streaming /generate: one event per forward pass, then [DONE]; a client that goes away
            mid-stream counts as an aborted request."""
            tic = time.time()
            result = state.generate_one(req, ids)
            meta, out = result["meta_info"], result["output_ids"]
            steps = state.steps(meta)
            per_step = max(1, math.ceil(len(out) / steps))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            time.sleep(max(0.0, state.prefill_seconds(result)))
            first_token_at = time.time()
            try:
                for sent in range(per_step, len(out) + per_step, per_step):
                    if sent > per_step:
                        time.sleep(state.args.step_ms / 1000.0)
                    done = sent >= len(out)
                    chunk = {
                        "text": detokenize(out[:sent]),
                        "output_ids": out[:sent],
                        "meta_info": {
                            **meta,
                            "completion_tokens": min(sent, len(out)),
                            "finish_reason": meta["finish_reason"] if done else None,
                        },
                    }
                    self._event(json.dumps(chunk).encode())
            except OSError:
                state.observe(tic, meta, first_token_at, state.labels_of(req), aborted=True)
                self.close_connection = True
                return
            # counted once its last tokens are out, before [DONE], as SGLang counts a request when it finishes:
            # a client that reads /metrics right after its stream ended finds it there
            state.observe(tic, meta, first_token_at, state.labels_of(req))
            try:
                self._event(b"[DONE]")
                self.wfile.write(b"0\r\n\r\n")
            except OSError:
                self.close_connection = True

        def _event(self, data: bytes) -> None:
            event = b"data: " + data + b"\n\n"
            self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
            self.wfile.flush()

        def _generate(self, raw: bytes) -> None:
            try:
                req = json.loads(raw or b"{}")
                if not isinstance(req, dict):
                    raise BadRequest("request body must be a JSON object")
                _check_fields(req)
                batch, is_batch = _inputs(req)
            except (ValueError, BadRequest) as exc:
                self._json(400, {"error": {"message": str(exc)}})
                return
            if state.args.malformed:
                self._json(200, {"text": "ok"})
                return
            if req.get("stream"):
                self._stream(req, batch[0])
                return
            results = state.generate(req, batch)
            self._json(200, results if is_batch else results[0])

        do_PUT = do_POST

    return Handler


SGLANG_FLAGS_HELP = """\
SGLang launch flags it understands (so `python3 -m sglang.launch_server ...` command lines work unchanged):
  --model-path, --served-model-name, --host, --port, --speculative-algorithm, --speculative-num-draft-tokens,
  --speculative-draft-model-path, --enable-linear-replayssm-spec, --enable-metrics.
Any other SGLang flag (--tp-size, --mem-fraction-static, ...) is accepted and ignored, with a note on stderr.
Extra arguments can also come from the environment variable SGLANG_DOUBLE_ARGS (appended to the command line),
so a container started with SGLang's own command line can still be told to misbehave.
"""


def _class_knob(value: str) -> tuple[list[int], float]:
    prefix, sep, length = value.rpartition("=")
    try:
        if not (sep and prefix) or float(length) < 1.0:
            raise ValueError
        return tokenize(prefix), float(length)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not PREFIX=L with an accept length L >= 1") from None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="sglang_server.py",
        description="Test double of SGLang 0.5.19's HTTP API (a deterministic toy model; never ships). "
        "Like SGLang, it speculates only with --speculative-algorithm and serves /metrics only with "
        "--enable-metrics. The misbehaviour knobs are off by default.",
        epilog=SGLANG_FLAGS_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sg = p.add_argument_group("SGLang flags")
    sg.add_argument("--host", default="127.0.0.1")
    sg.add_argument("--port", type=int, default=30000, help="0 picks a free port (printed on stderr)")
    sg.add_argument(
        "--model-path",
        default="Qwen/Qwen3-Next-80B-A3B-Instruct",
        help="reported as model_path (the smoke thresholds match on it)",
    )
    sg.add_argument("--served-model-name", default=None)
    sg.add_argument(
        "--speculative-algorithm",
        "--algorithm",
        dest="algorithm",
        default="NONE",
        help="e.g. DFLASH, DSPARK; NONE (the default) serves without speculation",
    )
    sg.add_argument(
        "--speculative-num-draft-tokens",
        "--draft-tokens",
        dest="draft_tokens",
        type=int,
        default=16,
        help="verify window (default 16)",
    )
    sg.add_argument("--speculative-draft-model-path", default=None)
    sg.add_argument("--enable-linear-replayssm-spec", action="store_true")
    sg.add_argument("--enable-metrics", action="store_true", help="serve /metrics (Prometheus text)")
    sg.add_argument(
        "--tokenizer-metrics-allowed-custom-labels",
        nargs="+",
        default=None,
        metavar="LABEL",
        help="label the request counters and histograms by these keys of each request's custom_labels",
    )
    sg.add_argument("--mamba-ssm-dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    for flag in (
        "--linear-attn-backend",
        "--linear-attn-decode-backend",
        "--linear-attn-prefill-backend",
        "--linear-attn-verify-backend",
    ):
        sg.add_argument(flag, default="triton" if flag == "--linear-attn-backend" else None)
    kn = p.add_argument_group("test-double knobs")
    kn.add_argument("--sglang-version", default=VERSION, help=f"the version /server_info reports (default {VERSION})")
    kn.add_argument(
        "--accept-length",
        type=float,
        default=3.0,
        help="mean accept length per verify (bonus token included); each prompt varies it +-20%%",
    )
    kn.add_argument(
        "--wrong-token-at",
        type=int,
        default=None,
        metavar="K",
        help="emit a non-argmax token at output position K (0-based) of every request (lossy verify)",
    )
    kn.add_argument(
        "--tie-at",
        type=int,
        default=None,
        metavar="K",
        help="make output position K a near-tie (1e-5) and emit the runner-up there",
    )
    kn.add_argument("--unhealthy", action="store_true", help="/health and /health_generate always answer 503")
    kn.add_argument(
        "--health-file",
        default=None,
        metavar="PATH",
        help="/health answers 503 while PATH exists (flip health at run time)",
    )
    kn.add_argument(
        "--start-delay",
        type=float,
        default=0.0,
        metavar="S",
        help="/health answers 503 for the first S seconds (a slow start)",
    )
    kn.add_argument("--malformed", action="store_true", help="/generate answers 200 without output_ids/meta_info")
    kn.add_argument(
        "--step-ms",
        type=float,
        default=0.0,
        help="sleep per forward pass (one per verify, or per token without speculation)",
    )
    kn.add_argument(
        "--request-seconds",
        type=float,
        default=0.0,
        metavar="S",
        help="every /generate request takes at least S seconds (something is always in flight)",
    )
    kn.add_argument(
        "--accept-length-file",
        default=None,
        metavar="PATH",
        help="while PATH exists, the number in it replaces --accept-length (a draft gone bad at "
        "run time: outputs stay correct, only acceptance falls)",
    )
    kn.add_argument(
        "--accept-length-for",
        action="append",
        default=[],
        metavar="PREFIX=L",
        type=_class_knob,
        help="prompts that start with PREFIX get mean accept length L (repeat; the first match wins): "
        "a draft that collapses on one request class only",
    )
    kn.add_argument(
        "--drain-poll-seconds",
        type=float,
        default=5.0,
        metavar="S",
        help="after SIGTERM, how often the drain checks for requests in flight (SGLang: 5)",
    )
    kn.add_argument("--quiet", action="store_true", help="no per-request log lines")
    argv = list(sys.argv[1:] if argv is None else argv) + shlex.split(os.environ.get("SGLANG_DOUBLE_ARGS", ""))
    args, ignored = p.parse_known_args(argv)
    if ignored:
        sys.stderr.write(f"double: ignoring SGLang arguments it does not model: {' '.join(ignored)}\n")
    if args.draft_tokens < 2:
        p.error("--speculative-num-draft-tokens must be at least 2")
    return args


def serve(args: argparse.Namespace) -> ThreadingHTTPServer:
    """Bind and return the server (the caller runs serve_forever); port 0 picks a free port."""
    state = ServerState(args)
    httpd = ThreadingHTTPServer((args.host, args.port), make_handler(state))
    httpd.daemon_threads = True
    httpd.state = state  # for main's signal handlers
    args.port = httpd.server_address[1]
    return httpd


def drain_then_stop(httpd: ThreadingHTTPServer, state: ServerState) -> None:
    """SGLang's SIGTERM path: unhealthy from now on; exit once nothing is in flight (at once where
    SGL_FORCE_SHUTDOWN=1 or the server was already unhealthy)."""
    already_unhealthy = not state.healthy()
    state.draining = True
    force = os.environ.get("SGL_FORCE_SHUTDOWN", "").lower() in ("1", "true", "yes")
    while not (force or already_unhealthy):
        with state.lock:
            remaining = state.in_flight
        sys.stderr.write(f"double: gracefully exiting, {remaining} request(s) in flight\n")
        if remaining == 0:
            break
        time.sleep(state.args.drain_poll_seconds)
    httpd.shutdown()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    httpd = serve(args)
    state = httpd.state

    def drain(_signum, _frame):
        if not state.draining:
            threading.Thread(target=drain_then_stop, args=(httpd, state), daemon=True).start()

    def stop(_signum, _frame):
        threading.Thread(target=httpd.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, drain)
    signal.signal(signal.SIGINT, stop)
    sys.stderr.write(f"double: serving on http://{args.host}:{args.port} pid {os.getpid()}\n")
    sys.stderr.write("The server is fired up and ready to roll!\n")
    sys.stderr.flush()
    httpd.serve_forever(poll_interval=0.05)
    httpd.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
