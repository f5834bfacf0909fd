"""Start and stop real Prometheus-side daemons for tests: Prometheus and node_exporter (Debian's packages).

The monitoring tests check the rules, the dashboard's queries and the node job's files with the tools
operators run, never with a look-alike. Each daemon listens on an address the test owns (127.0.0.1 on a
free port, or an address inside a network namespace the test made, through `netns_cmd`), keeps its data
under the given folder, and is stopped by its PID.

    prom = Prometheus(root, config_dict, address="127.0.0.1")   # config: prometheus.yml as a dict
    prom.wait_ready(); prom.query("up"); prom.get("/api/v1/alerts"); prom.reload(); prom.stop()
    exporter = NodeExporter(root, textfile_dir, address="10.1.2.3", netns_cmd=[...]); exporter.stop()

Nothing here ships; it lives under tests/.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

READY_TIMEOUT_S = 60.0


def tool(name: str) -> str:
    """The path of a Prometheus tool, or a failure that says how to install it."""
    path = shutil.which(name)
    if path is None:
        raise RuntimeError(f"{name} is missing: run scripts/setup-system.sh (Debian's prometheus packages ship it)")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# `_http` run inside a network namespace: one short Python per request (the test itself stays outside)
_NETNS_HTTP = """\
import sys, urllib.error, urllib.request
request = urllib.request.Request(sys.argv[1], method=sys.argv[2])
try:
    with urllib.request.urlopen(request, timeout=10) as answer:
        status, body = answer.status, answer.read()
except urllib.error.HTTPError as err:
    status, body = err.code, err.read()
sys.stdout.buffer.write(b"%d\\n" % status + body)
"""


class _Daemon:
    """A process started with its output in `root/<name>.log`, stopped by PID (SIGTERM, then SIGKILL); its
    HTTP API is asked from inside `netns_cmd`'s namespace when the daemon listens there."""

    def __init__(self, root: Path, name: str, argv: list[str], netns_cmd: list[str] | None = None):
        root.mkdir(parents=True, exist_ok=True)
        self.root, self.name, self.netns_cmd = root, name, netns_cmd
        self.log_path = root / f"{name}.log"
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]

    def _http(self, url: str, method: str = "GET") -> tuple[int, bytes]:
        if self.netns_cmd:
            proc = subprocess.run(
                [*self.netns_cmd, sys.executable, "-c", _NETNS_HTTP, url, method], capture_output=True, timeout=30
            )
            if proc.returncode != 0:
                raise OSError(proc.stderr.decode(errors="replace")[-500:])
            status, _, body = proc.stdout.partition(b"\n")
            return int(status), body
        request = urllib.request.Request(url, method=method)
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                return answer.status, answer.read()
        except urllib.error.HTTPError as err:
            return err.code, err.read()

    def wait_ready(self, url: str, timeout: float = READY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited ({self.proc.returncode}): {self.log_tail()}")
            try:
                if self._http(url)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"{self.name} at {url} not ready within {timeout} s: {self.log_tail()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)


class Prometheus(_Daemon):
    """Prometheus with `config` (prometheus.yml as a dict) on `address` (127.0.0.1: a free port, else 9090),
    lifecycle API on (so a playbook can reload it), TSDB under `root/data`."""

    def __init__(self, root: Path, config: dict, address: str = "127.0.0.1", netns_cmd: list[str] | None = None):
        self.url = f"http://{address}:{free_port() if address == '127.0.0.1' else 9090}"
        root.mkdir(parents=True, exist_ok=True)
        (root / "prometheus.yml").write_text(json.dumps(config, indent=2))
        super().__init__(
            root,
            "prometheus",
            [
                *(netns_cmd or []),
                tool("prometheus"),
                f"--config.file={root / 'prometheus.yml'}",
                f"--storage.tsdb.path={root / 'data'}",
                f"--web.listen-address={self.url.split('//')[1]}",
                "--web.enable-lifecycle",
                "--log.level=warn",
            ],
            netns_cmd,
        )

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        super().wait_ready(self.url + "/-/ready", timeout)

    def get(self, path: str, **params) -> dict:
        """A GET of the HTTP API as JSON (an error answer too: its `status` is "error")."""
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        return json.loads(self._http(self.url + path + query)[1])

    def query(self, expr: str) -> dict:
        return self.get("/api/v1/query", query=expr)

    def reload(self) -> None:
        status, body = self._http(self.url + "/-/reload", method="POST")
        if status != 200:
            raise RuntimeError(f"prometheus reload answered {status}: {body[:500]!r}")


class NodeExporter(_Daemon):
    """node_exporter with only its textfile collector, reading `textfile_dir`, on `address`:9100
    (127.0.0.1: a free port)."""

    def __init__(self, root: Path, textfile_dir: Path, address: str = "127.0.0.1", netns_cmd: list[str] | None = None):
        self.url = f"http://{address}:{free_port() if address == '127.0.0.1' else 9100}"
        super().__init__(
            root,
            "node_exporter",
            [
                *(netns_cmd or []),
                tool("prometheus-node-exporter"),
                "--collector.disable-defaults",
                "--collector.textfile",
                f"--collector.textfile.directory={textfile_dir}",
                f"--web.listen-address={self.url.split('//')[1]}",
                "--log.level=warn",
            ],
            netns_cmd,
        )

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        super().wait_ready(self.url + "/metrics", timeout)
