"""Start and stop a real local image registry for tests (Debian's `docker-registry`, distribution 2.8).

No outside registry is reachable in CI, so the push/pull-by-digest paths (`make push`, a base pulled by
digest, the rollout's registry mode) run against this one: plain HTTP on a loopback address (Docker
treats 127.0.0.0/8 as insecure-allowed) or, inside a network namespace, on an address the test made
(the daemons that pull from it then need `--insecure-registry`). Optionally read-only, to test a
registry that answers a push with an error. Its storage lies under the given folder.

    r = start_registry(Path("/tmp/x"), host="127.0.0.1", netns=None, read_only=False)
    r.address     # "127.0.0.1:PORT", what image references and REGISTRY= use
    r.pid         # stop it by this, never by name
    r.stop()      # SIGTERM (then SIGKILL), folder removed

Nothing here ships; it lives under tests/.
"""

from __future__ import annotations

import http.client
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

REGISTRY_BINARY = os.environ.get("RSO_REGISTRY", "/usr/bin/docker-registry")
READY_TIMEOUT_S = 20.0

CONFIG = """\
version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: {data}
  maintenance:
    readonly:
      enabled: {read_only}
    uploadpurging:
      enabled: false
http:
  addr: {address}
"""


class RegistryError(RuntimeError):
    """The registry could not be started; the message carries the tail of its log."""


@dataclass
class Registry:
    root: Path
    address: str
    pid: int
    netns: str | None = None
    _proc: subprocess.Popen | None = field(default=None, repr=False)

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            os.kill(self.pid, signal.SIGTERM)
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self._proc.wait(timeout=10)
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Registry:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def start_registry(
    root: Path,
    host: str = "127.0.0.1",
    port: int | None = None,
    netns: str | None = None,
    read_only: bool = False,
    timeout: float = READY_TIMEOUT_S,
) -> Registry:
    """Start a registry serving `host:port` (a free loopback port by default), storage under `root`.
    With `netns`, it runs inside that network namespace (give `host` and `port` then). Returns when
    `GET /v2/` answers 200."""
    if not os.path.exists(REGISTRY_BINARY):
        raise RegistryError(f"{REGISTRY_BINARY} not found; install Debian's docker-registry (scripts/setup-system.sh)")
    root = Path(root).resolve()
    (root / "data").mkdir(parents=True, exist_ok=True)
    if port is None:
        if netns:
            raise ValueError("a registry inside a namespace needs an explicit port")
        port = free_port(host)
    address = f"{host}:{port}"
    config = root / "config.yml"
    config.write_text(CONFIG.format(data=root / "data", read_only="true" if read_only else "false", address=address))
    cmd = [REGISTRY_BINARY, "serve", str(config)]
    if netns:
        cmd = ["nsenter", f"--net=/run/netns/{netns}", "--", *cmd]
    log = open(root / "registry.log", "ab")
    try:
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
    finally:
        log.close()
    registry = Registry(root=root, address=address, pid=proc.pid, netns=netns, _proc=proc)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        if _answers(registry):
            return registry
        time.sleep(0.2)
    tail = (root / "registry.log").read_text(errors="replace")[-2000:]
    registry.stop()
    raise RegistryError(f"the registry on {address} did not answer GET /v2/ within {timeout:.0f} s:\n{tail}")


def _answers(registry: Registry) -> bool:
    if registry.netns:  # the address exists only inside the namespace: ask from there
        probe = subprocess.run(
            [
                "nsenter",
                f"--net=/run/netns/{registry.netns}",
                "--",
                "python3",
                "-c",
                "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)",
                f"http://{registry.address}/v2/",
            ],
            capture_output=True,
        )
        return probe.returncode == 0
    host, port = registry.address.rsplit(":", 1)
    try:
        conn = http.client.HTTPConnection(host, int(port), timeout=2)
        conn.request("GET", "/v2/")
        return conn.getresponse().status == 200
    except OSError:
        return False
