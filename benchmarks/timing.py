"""What the GPU benchmark scripts (gpu_commit.py, gpu_run.py, gpu_ring.py, gpu_sweep.py) share: CUDA-graph
replay, eager and event medians, the copy ceiling, the SM clock, and a results folder written as a run goes.
One copy, so that a number called "graph us", "eager us" or "copy ceiling" is measured the same way in every
script's table."""

from __future__ import annotations

import functools
import json
import statistics
import time
from pathlib import Path

import torch


class Run:
    """A script's results folder: `log` prints a line and appends it to the log file, `save` writes the
    results dict as JSON (after each row, so a run cut short keeps what it measured). `start` names them."""

    def __init__(self, results: dict):
        self.results = results
        self.out: Path | None = None
        self.log_name = self.json_name = ""

    def start(self, out: Path, log_name: str, json_name: str) -> None:
        out.mkdir(parents=True, exist_ok=True)
        self.out, self.log_name, self.json_name = out, log_name, json_name

    def log(self, *parts) -> None:
        line = " ".join(str(p) for p in parts)
        print(line, flush=True)
        with open(self.out / self.log_name, "a") as f:
            f.write(line + "\n")

    def save(self) -> None:
        (self.out / self.json_name).write_text(json.dumps(self.results, indent=1))


def graph_us(fn, sets: int, reps: int) -> float:
    """Median microseconds of one CUDA-graph replay of `fn(i)`: warmed up (and JIT-compiled) on a side stream
    after the work already queued, captured once per input set i < sets, replayed once each, then timed
    `reps` times rotating over the sets."""
    torch.cuda.synchronize()  # the inputs were written on the default stream
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for i in range(sets):
            fn(i)
    torch.cuda.synchronize()
    graphs = []
    for i in range(sets):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn(i)
        graphs.append(g)
    for g in graphs:
        g.replay()
    torch.cuda.synchronize()
    times = []
    for r in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graphs[r % sets].replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    del graphs
    return statistics.median(times)


def eager_us(fn, sets: int, calls: int) -> tuple[float, float]:
    """(wall, host) medians in microseconds of `calls` eager calls rotating over the sets, the way a server
    calls: wall from the call (GPU idle before it) to the GPU done, host from the call to its return."""
    for i in range(max(3, sets)):
        fn(i % sets)
    torch.cuda.synchronize()
    walls, hosts = [], []
    for c in range(calls):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn(c % sets)
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        walls.append(t2 - t0)
        hosts.append(t1 - t0)
    return statistics.median(walls) * 1e6, statistics.median(hosts) * 1e6


def host_us_interleaved(fns: dict, sets: int, calls: int, gpu_wait_us: float = 0) -> dict:
    """{name: median host microseconds} of `calls` eager calls of each of `fns` (name -> fn(i)), taken in
    turn (one call of each, then the next round), so that a host that is slower for a while slows every
    subject alike; the GPU idle before each call, or, with `gpu_wait_us`, the host having waited that long for
    it (a sleep kernel, then a synchronize), as a server waits for the accept lengths before it commits."""
    for fn in fns.values():
        for i in range(max(3, sets)):
            fn(i % sets)
    torch.cuda.synchronize()
    cycles = round(gpu_wait_us * sm_cycles_per_us()) if gpu_wait_us else 0
    hosts = {name: [] for name in fns}
    for c in range(calls):
        for name, fn in fns.items():
            if cycles:
                torch.cuda._sleep(cycles)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn(c % sets)
            hosts[name].append(time.perf_counter() - t0)
    torch.cuda.synchronize()
    return {name: statistics.median(times) * 1e6 for name, times in hosts.items()}


@functools.cache
def sm_cycles_per_us() -> float:
    """GPU clock cycles of `torch.cuda._sleep` per microsecond, measured once (median of 5 sleeps of ~1 ms)."""
    cycles = 2_000_000
    return cycles / event_us(lambda: torch.cuda._sleep(cycles), reps=5, warmup=1)


def event_us(fn, reps: int = 30, warmup: int = 5) -> float:
    """Median microseconds of `fn()` between two CUDA events on the current stream, after `warmup` calls (GPU
    time, launch included; no graph)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def copy_ceiling() -> float:
    """Device-to-device copy bandwidth (bytes read + written per second) on 4 GiB: what in-place state
    traffic is compared with."""
    src = torch.empty(2**30, dtype=torch.float32, device="cuda").uniform_()
    dst = torch.empty_like(src)
    us = event_us(lambda: dst.copy_(src), reps=10, warmup=2)
    del src, dst
    return 2 * 4 * 2**30 / (us / 1e6)
