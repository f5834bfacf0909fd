"""Start and stop a private Docker daemon for tests (image builds, Ansible test hosts).

CI machines have Debian's `dockerd` (20.10) installed but no daemon running and no registry reachable,
so every test that needs Docker starts its own daemon here: its own data root, its own short exec root
and socket, `overlay2` where the kernel allows it and `vfs` otherwise, no iptables, no bridge
(containers run with `--network none`), and its own containerd namespaces so that several daemons on one
machine (one per network namespace, say) never see each other's containers. Optionally it runs inside a
network namespace created with `ip netns add NS` (entered with `nsenter --net`).

API (used by `tests/docker/conftest.py` and the Ansible tests):

    d = start_dockerd(Path("/tmp/x"), netns=None, insecure_registries=())   # returns when /_ping answers
    d.host          # "unix:///tmp/dkr-xxxx/docker.sock", the DOCKER_HOST value
    d.pid           # the daemon's PID (stop it by this, never by name)
    d.kill(); d.start_again()   # a crash (SIGKILL) and the daemon coming back with the same data and socket
    d.restart()     # a graceful restart (SIGTERM: it stops its containers), then start_again()
    d.env()         # os.environ + DOCKER_HOST + DOCKER_BUILDKIT=0, for subprocess calls
    d.docker("images", "-q")   # run the docker client against this daemon, CompletedProcess (text)
    d.stop()        # SIGTERM (then SIGKILL), unmount leftovers, remove every directory it created

`Dockerd` is also a context manager. Nothing here is shipped; it lives under tests/.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from replayssm_overlay.cliutil import pid_alive

DOCKERD = os.environ.get("RSO_DOCKERD", "dockerd")
DOCKER_CLIENT = os.environ.get("RSO_DOCKER_CLIENT", "docker")
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
CONTAINERD_ATTEMPTS = 3  # dockerd starts after a SIGKILL (start_again): tries when its containerd is too slow
CONTAINERD_TIMEOUT = "timeout waiting for containerd to start"  # dockerd's message for that


class DockerdError(RuntimeError):
    """The daemon could not be started; the message carries the tail of its log."""


class DockerCommandError(subprocess.CalledProcessError):
    """A docker client command failed; unlike its base class, the message shows the client's stderr."""

    def __str__(self) -> str:
        return f"{super().__str__()}\n{(self.stderr or '').strip()[-3000:]}"


@dataclass
class Dockerd:
    """A running private daemon. `root` holds data and the log; `run_dir` holds the socket and exec root."""

    root: Path
    run_dir: Path
    pid: int
    netns: str | None = None
    storage_driver: str = "vfs"
    argv: list[str] = field(default_factory=list)
    _proc: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def socket_path(self) -> Path:
        return self.run_dir / "docker.sock"

    @property
    def host(self) -> str:
        return f"unix://{self.socket_path}"

    @property
    def log_path(self) -> Path:
        return self.root / "dockerd.log"

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """Environment for a docker client talking to this daemon (classic builder: BuildKit needs more)."""
        env = dict(os.environ if base is None else base)
        env["DOCKER_HOST"] = self.host
        env["DOCKER_BUILDKIT"] = "0"
        env.pop("DOCKER_CONTEXT", None)
        return env

    def docker(
        self, *args: str, check: bool = True, timeout: float | None = None, input: str | None = None
    ) -> subprocess.CompletedProcess:
        """Run `docker ARGS` against this daemon and capture text output; raise on failure if `check`."""
        proc = subprocess.run(
            [DOCKER_CLIENT, *args], env=self.env(), capture_output=True, text=True, timeout=timeout, input=input
        )
        if check and proc.returncode != 0:
            raise DockerCommandError(proc.returncode, proc.args, proc.stdout, proc.stderr)
        return proc

    def alive(self) -> bool:
        return pid_alive(self.pid)

    def kill(self) -> None:
        """SIGKILL the daemon (a crash: no shutdown of its containers), and reap it; `start_again` brings it back."""
        os.kill(self.pid, signal.SIGKILL)
        if self._proc is not None:
            self._proc.wait(timeout=STOP_TIMEOUT_S)

    def restart(self, timeout: float = READY_TIMEOUT_S) -> None:
        """Restart the daemon as `systemctl restart docker` does: SIGTERM by its PID (it stops its containers
        first), wait for it to exit, then `start_again` (restart policies start the containers again)."""
        _terminate(self.pid, self._proc)
        self.start_again(timeout)

    def start_again(self, timeout: float = READY_TIMEOUT_S, attempts: int = CONTAINERD_ATTEMPTS) -> None:
        """Start the daemon with its command line (same data, exec root, socket and containerd namespace)
        and return once it answers /_ping; raise DockerdError (daemon stopped, directories removed) otherwise.
        dockerd gives its containerd a fixed 15 s to start, which a loaded 2-core machine can miss after a
        SIGKILL: that exit alone is retried, after the containerd it left is stopped."""
        for attempt in range(1, attempts + 1):
            since = self.log_path.stat().st_size if self.log_path.exists() else 0  # this attempt's part of the log
            log = open(self.log_path, "ab")
            try:
                self._proc = subprocess.Popen(
                    self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
                )
            finally:
                log.close()
            self.pid = self._proc.pid
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and self._proc.poll() is None:
                if _ping(self.socket_path):
                    return
                time.sleep(0.2)
            if self._proc.poll() is None:
                break
            tail = _tail(self.log_path, since=since)
            if attempt < attempts and CONTAINERD_TIMEOUT in tail:
                self._stop_containerd()
                continue
            self.stop()
            raise DockerdError(f"dockerd exited with status {self._proc.returncode} during start-up:\n{tail}")
        tail = _tail(self.log_path)
        self.stop()
        raise DockerdError(f"dockerd did not answer /_ping within {timeout:.0f} s:\n{tail}")

    def stop(self) -> None:
        """Stop the daemon by its PID, then its managed containerd, and remove every directory it used."""
        _terminate(self.pid, self._proc)
        self._stop_containerd()
        for base in (self.run_dir, self.root):
            unmount_below(base)
            shutil.rmtree(base, ignore_errors=True)

    def _stop_containerd(self) -> None:
        containerd_pid = _read_pid(self.run_dir / "exec" / "containerd" / "containerd.pid")
        if containerd_pid is not None:
            _terminate(containerd_pid, None)

    def __enter__(self) -> Dockerd:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def start_dockerd(
    root: Path,
    netns: str | None = None,
    storage_driver: str | None = None,
    timeout: float = READY_TIMEOUT_S,
    insecure_registries: tuple[str, ...] = (),
) -> Dockerd:
    """Start a private dockerd with its data under `root` (created; removed again by `.stop()`).

    `storage_driver`: None picks `overlay2` when an overlay mount works under `root` (fast: layers are
    not copied) and `vfs` otherwise (works anywhere, copies every layer); `RSO_DOCKER_STORAGE_DRIVER`
    overrides the choice. `insecure_registries` (host:port) are spoken to over plain HTTP (a test
    registry on a namespace address; loopback ones need no entry). The socket lives in a short
    directory under /tmp (unix socket paths are limited to 107 bytes). Returns once the daemon answers
    `GET /_ping`; raises DockerdError with the log tail otherwise.
    """
    if shutil.which(DOCKERD) is None:
        raise DockerdError(f"`{DOCKERD}` not found; install Debian's docker.io (scripts/setup-system.sh)")
    root = Path(root).resolve()
    root.mkdir(parents=True, exist_ok=True)
    driver = (
        storage_driver
        or os.environ.get("RSO_DOCKER_STORAGE_DRIVER")
        or ("overlay2" if _overlay_mount_works(root) else "vfs")
    )
    run_dir = Path(tempfile.mkdtemp(prefix="dkr-", dir="/tmp"))
    tag = uuid.uuid4().hex[:10]
    cmd = [
        DOCKERD,
        "--data-root",
        str(root / "data"),
        "--exec-root",
        str(run_dir / "exec"),
        "--pidfile",
        str(run_dir / "docker.pid"),
        "-H",
        f"unix://{run_dir / 'docker.sock'}",
        "--storage-driver",
        driver,
        "--iptables=false",
        "--ip6tables=false",
        "--ip-masq=false",
        "--bridge=none",
        "--containerd-namespace",
        f"rso-{tag}",
        "--containerd-plugins-namespace",
        f"rso-{tag}-plugins",
        *(arg for registry in insecure_registries for arg in ("--insecure-registry", registry)),
    ]
    if netns:
        # nsenter enters only the network namespace (`ip netns exec` also remounts /sys, which hides the
        # cgroup v1 mounts dockerd needs) and execs, so the PID is dockerd's
        cmd = ["nsenter", f"--net=/run/netns/{netns}", "--", *cmd]
    daemon = Dockerd(root=root, run_dir=run_dir, pid=0, netns=netns, storage_driver=driver, argv=cmd)
    daemon.start_again(timeout)
    return daemon


def _overlay_mount_works(root: Path) -> bool:
    """True when the kernel can mount overlayfs with its upper dir on `root`'s filesystem (overlay2)."""
    probe = Path(tempfile.mkdtemp(prefix=".overlay-probe-", dir=root))
    dirs = {name: probe / name for name in ("lower", "upper", "work", "merged")}
    for path in dirs.values():
        path.mkdir()
    opts = f"lowerdir={dirs['lower']},upperdir={dirs['upper']},workdir={dirs['work']}"
    try:
        mounted = (
            subprocess.run(
                ["mount", "-t", "overlay", "overlay", "-o", opts, str(dirs["merged"])], capture_output=True
            ).returncode
            == 0
        )
        if mounted:
            subprocess.run(["umount", str(dirs["merged"])], capture_output=True)
        return mounted
    finally:
        shutil.rmtree(probe, ignore_errors=True)


def _ping(sock_path: Path) -> bool:
    """True when the daemon's API answers `GET /_ping` with OK."""
    if not sock_path.exists():
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(2.0)
            s.connect(str(sock_path))
            s.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            reply = b""
            while chunk := s.recv(4096):
                reply += chunk
    except OSError:
        return False
    return reply.startswith(b"HTTP/1.") and b" 200 " in reply.split(b"\r\n", 1)[0] and reply.endswith(b"OK")


def _terminate(pid: int, proc: subprocess.Popen | None) -> None:
    """SIGTERM, wait up to STOP_TIMEOUT_S, then SIGKILL; reap our own child so no zombie is left."""
    if not pid_alive(pid):
        if proc is not None:
            proc.poll()
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return
        if proc is None and not pid_alive(pid):
            return
        time.sleep(0.1)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    if proc is not None:
        proc.wait(timeout=10)


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def unmount_below(base: Path) -> None:
    """Lazily unmount anything the daemon left mounted under `base` (deepest first), so rmtree works."""
    prefix = str(base.resolve()) + "/"
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return
    targets = []
    for line in lines:
        parts = line.split()
        if len(parts) > 1:
            target = parts[1].replace("\\040", " ")
            if target.startswith(prefix):
                targets.append(target)
    for target in sorted(targets, key=len, reverse=True):
        subprocess.run(["umount", "-l", target], capture_output=True)


def _tail(path: Path, lines: int = 30, since: int = 0) -> str:
    """The last `lines` lines of what the log holds from byte `since` on."""
    try:
        with open(path, "rb") as f:
            f.seek(since)
            text = f.read().decode(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])
