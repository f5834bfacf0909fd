"""A real router in front of the test fleet, started in the controller's namespace: sglang-router 0.3.2 or
smg 1.13.0 (ROUTERS), both from PyPI.

The rollout's router mode talks to the operator's router; the tests run the real ones (the Rust gateway in
the `sglang-router` wheel, `python -m sglang_router.launch_router`, from .venv; Shepherd Model Gateway, the
`smg` wheel, `python -m smg.launch_router`, from .venv-smg, since both wheels install an `smg` script) on
the controller's bridge address with
the fleet's nodes as workers, short health-check intervals, and its retries turned off by default: with
retries (its default) a request cut by a stopped worker is re-run on another one, so a plain swap's cut
requests would show only as latency; without them every request a switch cuts or sends to a stopped node
counts as failed, which is what the tests assert on. Started and stopped by PID; its log is kept in the
fleet's folder. Nothing here ships; it lives under tests/.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.deploy.fleet import Fleet, terminate

# What the routed fleet's servers run with (the test double's knobs, through the container's environment):
# every /generate takes 0.5 s (so a load always has requests in flight), 20 ms per forward pass (so a long
# request can be made on purpose), /metrics on, its request series labelled by the requests' class (SGLang's
# custom label, as a fleet that labels its traffic runs it).
ROUTED_ENV = {
    "SGLANG_DOUBLE_ARGS": "--request-seconds 0.5 --step-ms 20 --enable-metrics "
    "--tokenizer-metrics-allowed-custom-labels class"
}
ROUTER_PORT = 30100  # on the controller's bridge address, a namespace of the test's own
REPO = Path(__file__).resolve().parents[2]
# kind (sglang_router_kind) -> (the Python that has it, its launcher module); scripts/setup-venv.sh builds both
ROUTERS = {
    "smg": (REPO / ".venv-smg" / "bin" / "python", "smg.launch_router"),
    "sglang-router": (Path(sys.executable), "sglang_router.launch_router"),
}
#: the routers the rollout tests run behind (tests/deploy/conftest.py's `router_kind`), the current line first
KINDS = tuple(ROUTERS)
#: ports apart between the routers of one fleet: a router's own port and its Prometheus port, then room to spare
PORTS_PER_ROUTER = 10


def kind_port(kind: str, module_offset: int = 0) -> int:
    """The port of this kind's router in a module whose routers start `module_offset` above ROUTER_PORT: the
    modules of a stream share its fleet, and each kind of each module gets ports of its own, so no router starts
    on a port another one has just left."""
    return ROUTER_PORT + module_offset + PORTS_PER_ROUTER * KINDS.index(kind)


DRAINING = "draining"  # smg: removed, settling before it leaves the list
# The router's own health checks (default: every 60 s, 3 failures to mark a worker unhealthy) are what a
# plain swap leans on; 5 s keeps the tests short and still leaves a stopped node routed for ~15 s.
HEALTH_INTERVAL_S = 5
READY_TIMEOUT_S = 60.0


@dataclass
class Router:
    """A running sglang-router: its URL (reachable from the controller namespace only) and process."""

    fleet: Fleet
    url: str
    proc: subprocess.Popen
    log: Path
    kind: str = "sglang-router"

    def _call(self, method: str, path: str, body: dict | None = None, timeout: float = 10.0):
        """One request from inside the controller namespace (curl there; this process is outside it)."""
        cmd = ["curl", "-sS", "-m", str(timeout), "-X", method, "-o", "-", "-w", "\n%{http_code}", self.url + path]
        if body is not None:
            cmd += ["-H", "Content-Type: application/json", "-d", json.dumps(body)]
        proc = subprocess.run(self.fleet.netns_cmd(*cmd), capture_output=True, text=True, timeout=timeout + 5)
        text, _, status = proc.stdout.rpartition("\n")
        return int(status or 0), (json.loads(text) if text.strip().startswith(("{", "[")) else text)

    def workers(self) -> dict[str, dict]:
        """worker URL -> {id, is_healthy, load} as GET /workers lists them."""
        status, body = self._call("GET", "/workers")
        if status != 200:
            raise ConnectionError(f"the router at {self.url} answered GET /workers with {status}: {body}")
        return {w["url"]: w for w in body["workers"]}

    def healthy_urls(self) -> set[str]:
        return {url for url, w in self.workers().items() if w["is_healthy"]}

    def remove(self, url: str) -> None:
        worker = self.workers().get(url)
        if worker is not None:
            self._call("DELETE", f"/workers/{worker['id']}")

    def add(self, url: str) -> None:
        self._call("POST", "/workers", {"url": url})

    def wait_for(self, urls: set[str], timeout: float = READY_TIMEOUT_S) -> None:
        """Wait until the router lists exactly `urls`, all healthy."""
        deadline = time.monotonic() + timeout
        seen: dict | str = {}
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the router exited ({self.proc.returncode}): {self.log.read_text()[-2000:]}")
            try:
                seen = self.workers()
            except ConnectionError as exc:  # still starting
                seen = str(exc)
            if isinstance(seen, dict) and set(seen) == urls and all(w["is_healthy"] for w in seen.values()):
                return
            time.sleep(0.3)
        raise AssertionError(f"the router lists {seen} after {timeout} s, not exactly {sorted(urls)} healthy")

    def reset(self, urls: set[str]) -> None:
        """Make the router list exactly `urls` (each must serve), all healthy; a worker smg still drains is let
        go first (it cannot be added back before)."""
        for url in set(self.workers()) - urls:
            self.remove(url)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while any(w.get("status") == DRAINING for w in self.workers().values()) and time.monotonic() < deadline:
            time.sleep(0.3)
        for url in urls - set(self.workers()):
            self.add(url)
        self.wait_for(urls)

    def stop(self) -> None:
        terminate(self.proc)


def router_command(
    kind: str,
    host: str,
    port: int,
    worker_urls: list[str],
    health_interval_s: float,
    prometheus_port: int,
    retries: bool = False,
) -> list[str]:
    """The command line that starts a router of this kind on host:port in front of these workers (round robin,
    health checks every health_interval_s, its metrics on prometheus_port); fails the test where the kind's
    environment is missing."""
    python, launcher = ROUTERS[kind]
    if not python.exists():
        pytest.fail(f"{python} is missing: scripts/setup-venv.sh (make setup) builds the {kind} environment")
    cmd = [
        str(python),
        "-m",
        launcher,
        "--host",
        host,
        "--port",
        str(port),
        "--policy",
        "round_robin",
        "--worker-urls",
        *worker_urls,
        "--health-check-interval-secs",
        str(health_interval_s),
        "--worker-startup-check-interval",
        "1",
        "--prometheus-host",
        host,
        "--prometheus-port",
        str(prometheus_port),
        "--log-level",
        "warn",
    ]
    return cmd if retries else [*cmd, "--disable-retries"]


def start_router(
    fleet: Fleet, worker_urls: list[str], retries: bool = False, port: int = ROUTER_PORT, kind: str = "sglang-router"
) -> Router:
    """Start the router of this kind on the controller's bridge address with these workers; wait until it lists
    them all healthy. Its Prometheus port is the next one."""
    url = f"http://{fleet.controller_address}:{port}"
    log = fleet.root / f"router-{port}.log"
    cmd = router_command(kind, fleet.controller_address, port, worker_urls, HEALTH_INTERVAL_S, port + 1, retries)
    with log.open("ab") as out:
        proc = subprocess.Popen(
            fleet.netns_cmd(*cmd),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    router = Router(fleet=fleet, url=url, proc=proc, log=log, kind=kind)
    try:
        router.wait_for(set(worker_urls))
    except BaseException:
        router.stop()
        raise
    return router
