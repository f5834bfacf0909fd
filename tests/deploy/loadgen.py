"""A bounded load generator for the rollout tests and the rollout benchmark: a fixed number of greedy
`/generate` requests at a fixed concurrency, against the test fleet only.

It stops by itself after `--requests` requests (or earlier on SIGTERM/SIGINT: it sends nothing new, lets
the requests in flight finish and reports), every request has a timeout, and it refuses any URL whose
host is not one of the `--allow` addresses (the tests pass the fleet's controller and node addresses).
It runs wherever the caller puts it; the tests start it inside the controller's namespace, where the
router and the nodes are reachable. Prints (or writes with --out) one JSON report: counts, failures by
reason, latency percentiles, and every request's start, end and outcome. Every second request streams (as real
clients do: server-sent events, which must end in `data: [DONE]`) unless --no-streams; --prefix starts every
prompt with a request class (the double's --accept-length-for matches it) and --request-class sends that class
as SGLang's custom label (`custom_labels`), which the servers count it under. Nothing here ships.

    python -m tests.deploy.loadgen --url http://10.201.7.1:30100 --allow 10.201.7.1 --requests 400 \\
        --concurrency 4 --out load.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REQUEST_TIMEOUT_S = 120.0
# What the rollout tests and the benchmark send: an upper bound of requests (each stops its load once its
# playbooks are done) at a steady concurrency.
LOAD_REQUESTS = 4000
LOAD_CONCURRENCY = 4


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (0-100) by nearest rank; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q / 100.0 * len(ordered))) - 1]


def _streamed(raw: bytes) -> dict:
    """The last answer of a server-sent event stream, or {"cut": True} when it does not end in `data: [DONE]`."""
    events = [block[len(b"data: ") :] for block in raw.split(b"\n\n") if block.startswith(b"data: ")]
    if len(events) < 2 or events[-1] != b"[DONE]":
        return {"cut": True}
    return json.loads(events[-2])


class Load:
    """Sends `requests` requests, `concurrency` at a time, to `url`/generate; `stop()` ends it early."""

    def __init__(
        self,
        url: str,
        requests: int,
        concurrency: int,
        max_new_tokens: int = 4,
        streams: bool = True,
        prefix: str = "",
        request_class: str = "",
    ):
        self.url = url.rstrip("/") + "/generate"
        self.requests, self.concurrency, self.max_new_tokens = requests, concurrency, max_new_tokens
        self.streams, self.prefix, self.request_class = streams, prefix, request_class
        self._stopping = threading.Event()
        self._next = 0
        self._lock = threading.Lock()
        self.records: list[dict] = []

    def stop(self) -> None:
        self._stopping.set()

    def _take(self) -> int | None:
        with self._lock:
            if self._stopping.is_set() or self._next >= self.requests:
                return None
            self._next += 1
            return self._next - 1

    def _one(self, index: int) -> dict:
        stream = self.streams and index % 2 == 1
        payload = {
            "text": f"{self.prefix}request {index}: the capital of France is",
            "stream": stream,
            "sampling_params": {"max_new_tokens": self.max_new_tokens, "temperature": 0},
        }
        if self.request_class:
            payload["custom_labels"] = {"class": self.request_class}
        body = json.dumps(payload).encode()
        req = urllib.request.Request(self.url, data=body, headers={"Content-Type": "application/json"})
        start = time.time()
        outcome = "ok"
        try:
            with urllib.request.urlopen(req, timeout=REQUEST_TIMEOUT_S) as reply:
                answer = _streamed(reply.read()) if stream else json.loads(reply.read())
            if not answer.get("output_ids"):
                outcome = "stream cut before [DONE]" if answer.get("cut") else "answer without output_ids"
        except urllib.error.HTTPError as exc:
            outcome = f"HTTP {exc.code}"
        except (OSError, ValueError) as exc:
            outcome = type(getattr(exc, "reason", exc)).__name__
        return {"index": index, "start": start, "end": time.time(), "outcome": outcome, "stream": stream}

    def _worker(self) -> None:
        while (index := self._take()) is not None:
            record = self._one(index)
            with self._lock:
                self.records.append(record)

    def run(self) -> dict:
        started = time.time()
        with ThreadPoolExecutor(self.concurrency) as pool:
            for _ in range(self.concurrency):
                pool.submit(self._worker)
        return self.report(started, time.time())

    def report(self, started: float, ended: float) -> dict:
        records = sorted(self.records, key=lambda r: r["index"])
        failures: dict[str, int] = {}
        for r in records:
            if r["outcome"] != "ok":
                failures[r["outcome"]] = failures.get(r["outcome"], 0) + 1
        latencies = [r["end"] - r["start"] for r in records if r["outcome"] == "ok"]
        return {
            "url": self.url,
            "requests": len(records),
            "failed": sum(failures.values()),
            "failures": failures,
            "concurrency": self.concurrency,
            "started": started,
            "wall_s": round(ended - started, 2),
            "latency_s": {
                "p50": percentile(latencies, 50),
                "p99": percentile(latencies, 99),
                "max": max(latencies, default=None),
            },
            "stopped_early": self._stopping.is_set() and len(records) < self.requests,
            "records": records,
        }


class Background:
    """The load generator as a child process inside the fleet's controller namespace (where the router and
    the nodes are reachable), aimed at `url`, allowed only the fleet's addresses. `result()` waits for it."""

    def __init__(
        self,
        fleet,
        url: str,
        requests: int,
        concurrency: int,
        out: Path,
        max_new_tokens: int = 4,
        prefix: str = "",
        request_class: str = "",
    ):
        self.out = out
        allow = [fleet.controller_address, *(node.address for node in fleet.nodes)]
        cmd = [
            sys.executable,
            "-m",
            "tests.deploy.loadgen",
            "--url",
            url,
            "--requests",
            str(requests),
            "--concurrency",
            str(concurrency),
            "--max-new-tokens",
            str(max_new_tokens),
            "--out",
            str(out),
            f"--prefix={prefix}",
            f"--request-class={request_class}",
            *(f"--allow={a}" for a in allow),
        ]
        self.proc = subprocess.Popen(
            fleet.netns_cmd(*cmd),
            cwd=Path(__file__).resolve().parents[2],
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )

    def result(self, stop: bool = True, timeout: float = 300.0) -> dict:
        """Stop it (unless `stop` is false: then it runs to its last request), wait, and return its report."""
        if stop and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
        if self.proc.wait(timeout=timeout) != 0:
            raise RuntimeError(f"the load generator exited with {self.proc.returncode}")
        return json.loads(self.out.read_text())

    def kill(self) -> None:
        """End it at once (a test that failed before reading its result)."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--url", required=True, help="the router's (or a node's) base URL")
    p.add_argument(
        "--allow",
        action="append",
        required=True,
        metavar="ADDRESS",
        help="an address the URL may name (repeat); anything else is refused",
    )
    p.add_argument("--requests", type=int, required=True, help="how many requests in all (it stops after them)")
    p.add_argument("--concurrency", type=int, default=4, help="requests in flight at a time (default 4)")
    p.add_argument("--max-new-tokens", type=int, default=4)
    p.add_argument("--out", type=Path, help="write the JSON report here (default: stdout)")
    p.add_argument("--no-streams", action="store_true", help="no streamed requests (default: every second one)")
    p.add_argument("--prefix", default="", help="what every prompt starts with (a request class)")
    p.add_argument("--request-class", default="", help="the request class sent as SGLang's custom label `class`")
    args = p.parse_args(argv)
    host = urllib.parse.urlsplit(args.url).hostname
    if host not in args.allow:
        p.error(f"{args.url} names {host}, which is not one of the allowed addresses {args.allow}")
    if args.requests < 1 or not 1 <= args.concurrency <= 64:
        p.error("--requests must be at least 1 and --concurrency 1 to 64")
    load = Load(
        args.url,
        args.requests,
        args.concurrency,
        args.max_new_tokens,
        not args.no_streams,
        args.prefix,
        args.request_class,
    )
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: load.stop())
    text = json.dumps(load.run(), indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    else:
        sys.stdout.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
