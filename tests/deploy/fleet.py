"""Ansible test hosts on one machine: network namespaces, each with its own sshd and Docker daemon.

The rollout tests need several SSH-reachable nodes and no machine has them in CI, so each "node" is a
network namespace (`ip netns add`) with a veth into a bridge that lives in a controller namespace.
Addresses exist only inside those namespaces (nothing is routed to the outside), every node runs its
own `sshd` (key-only root login) and its own `dockerd` (`tests.infra.dockerd`, started inside the
node's namespace, so a `--network host` container listens on the node's address), and
`ansible-playbook` runs inside the controller namespace. The nodes share the filesystem and hostname,
so everything per node (docker socket, state dir, model dir, fake `nvidia-smi`) lives in its own
folder and is passed as inventory variables. A node's root has a home folder of its own (sshd's `SetEnv
HOME`), as a fresh host would: bash reads ~/.bashrc for every command sshd runs, and this machine's
/root/.bashrc (pyenv's init) costs about 0.1 s of CPU per command, the most of a fleet test's time. The
nodes' Python keeps the code it compiles from Ansible's module zips (tests/deploy/node_python says why and how),
shared by the fleet's nodes: the same modules run, without compiling module_utils anew for each. The
controller's bridge address, port REGISTRY_PORT, is
where the registry-mode tests run their registry: every node's daemon may pull from it over HTTP.

Everything started here is stopped by PID and every namespace deleted by `Fleet.stop()`, which also
runs when `start_fleet` fails half-way. Nothing here ships; it lives under tests/.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from tests.infra.dockerd import Dockerd, start_dockerd, unmount_below

SSHD = "/usr/sbin/sshd"
PRIVSEP_DIR = "/run/sshd"  # compiled into Debian's sshd
SSH_READY_TIMEOUT_S = 20.0
#: the nodes' sitecustomize (PYTHONPATH in their sshd's SetEnv): compiled AnsiballZ code kept between runs
NODE_PYTHON = Path(__file__).resolve().parent / "node_python"
REGISTRY_PORT = 5000  # the test registry's port on the controller's bridge address (registry-mode tests)
H100 = "NVIDIA H100 80GB HBM3, 9.0, 580.65.06"
H200 = "NVIDIA H200, 9.0, 580.159.04"  # what the project's H200 device printed (2026-11-30)
A100 = "NVIDIA A100-SXM4-80GB, 8.0, 580.65.06"
H100_OLD_DRIVER = "NVIDIA H100 80GB HBM3, 9.0, 575.51.03"


def run(*cmd: str, check: bool = True, **kw) -> subprocess.CompletedProcess:
    """Run a command, capture text output, raise with its stderr on failure."""
    proc = subprocess.run(list(cmd), capture_output=True, text=True, **kw)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


@dataclass
class Node:
    """One test host: its namespace, address, folders, sshd and Docker daemon."""

    name: str
    netns: str
    address: str
    root: Path
    sshd: subprocess.Popen | None = None
    dockerd: Dockerd | None = None

    @property
    def bin_dir(self) -> Path:
        return self.root / "bin"

    @property
    def model_dir(self) -> Path:
        return self.root / "models" / "target"

    @property
    def draft_dir(self) -> Path:
        return self.root / "models" / "draft"

    @property
    def state_dir(self) -> Path:
        return self.root / "state"

    def set_gpus(self, *lines: str) -> None:
        """Make the node's fake `nvidia-smi` print these `name, compute_cap, driver` lines."""
        script = self.bin_dir / "nvidia-smi"
        body = "\n".join(f"echo '{line}'" for line in lines)
        script.write_text(f"#!/bin/sh\n# fake nvidia-smi of test node {self.name} (tests/deploy)\n{body}\n")
        script.chmod(0o755)

    def break_nvidia_smi(self, message: str, rc: int = 9) -> None:
        """Make the node's fake `nvidia-smi` fail like it does without a loaded driver: `message`, exit `rc`."""
        script = self.bin_dir / "nvidia-smi"
        script.write_text(
            f"#!/bin/sh\n# fake nvidia-smi of test node {self.name} (tests/deploy)\n"
            f"echo {shlex.quote(message)}\nexit {rc}\n"
        )
        script.chmod(0o755)

    def inventory_vars(self) -> dict:
        return {
            "ansible_host": self.address,
            "sglang_docker_host": self.dockerd.host,
            "sglang_state_dir": str(self.state_dir),
            "sglang_image_stage_dir": str(self.root / "stage"),
            "sglang_nvidia_smi": str(self.bin_dir / "nvidia-smi"),
            "sglang_nvidia_ctk": str(self.bin_dir / "nvidia-ctk"),
            "sglang_model_path": str(self.model_dir),
            "sglang_draft_model_path": str(self.draft_dir),
        }

    def containers(self) -> dict[str, dict]:
        """name -> {id, image, running, started, labels} for every container on the node's daemon."""
        ids = self.dockerd.docker("ps", "-aq").stdout.split()
        if not ids:
            return {}
        out = {}
        for c in json.loads(self.dockerd.docker("inspect", *ids).stdout):
            out[c["Name"].lstrip("/")] = {
                "id": c["Id"],
                "image": c["Image"],
                "running": c["State"]["Running"],
                "started": c["State"]["StartedAt"],
                "labels": c["Config"]["Labels"] or {},
            }
        return out

    def start_sshd(self) -> None:
        """Start the node's sshd in its namespace (the config _make_node wrote); `stop_sshd` undoes it. sshd
        needs its privilege separation folder for every connection; it is shared by every sshd of the machine
        (other fleets' too), so it is made here when missing and never removed."""
        Path(PRIVSEP_DIR).mkdir(mode=0o755, exist_ok=True)
        log = open(self.root / "ssh" / "sshd.log", "ab")
        try:
            self.sshd = subprocess.Popen(
                [
                    "nsenter",
                    f"--net=/run/netns/{self.netns}",
                    "--",
                    SSHD,
                    "-D",
                    "-e",
                    "-f",
                    str(self.root / "ssh" / "sshd_config"),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        finally:
            log.close()

    def stop_sshd(self) -> None:
        """Stop the node's sshd by its PID, and the connections it serves (an SSH multiplexing master's
        among them): the node is unreachable over SSH until `start_sshd`, as a lost node is."""
        if self.sshd is not None:
            connections = descendants(self.sshd.pid)
            terminate(self.sshd)
            for pid in connections:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self.sshd = None

    def state(self, service: str) -> dict:
        path = self.state_dir / f"{service}.json"
        return json.loads(path.read_text()) if path.exists() else {}


@dataclass
class Fleet:
    """The controller namespace, the nodes and the SSH key; `stop()` undoes everything."""

    root: Path
    tag: str
    controller_ns: str
    controller_address: str
    nodes: list[Node] = field(default_factory=list)
    namespaces: list[str] = field(default_factory=list)

    @property
    def key(self) -> Path:
        return self.root / "id_ed25519"

    @property
    def code_cache(self) -> Path:
        """Where the nodes' Python keeps compiled AnsiballZ code (NODE_PYTHON)."""
        return self.root / "ansiballz-code"

    def netns_cmd(self, *cmd: str) -> list[str]:
        """`cmd` run inside the controller namespace (where ansible-playbook runs)."""
        return ["nsenter", f"--net=/run/netns/{self.controller_ns}", "--", *cmd]

    def wait_for_ssh(self, node: Node) -> None:
        """Return once `node` answers SSH (after `start_fleet`, or after `node.start_sshd()`)."""
        _wait_for_ssh(self, node)

    def stop(self) -> None:
        for node in self.nodes:
            if node.dockerd is not None:
                for cid in node.dockerd.docker("ps", "-aq", check=False).stdout.split():
                    node.dockerd.docker("rm", "-f", cid, check=False, timeout=60)
                node.dockerd.stop()
                node.dockerd = None
            node.stop_sshd()
        for ns in reversed(self.namespaces):
            run("ip", "netns", "delete", ns, check=False)
        self.namespaces.clear()
        # the nodes' Docker daemons can leave their data roots mounted after they stopped, and pytest's
        # clean-up of old session folders cannot remove a folder something is mounted on
        unmount_below(self.root)


def start_fleet(root: Path, count: int = 3) -> Fleet:
    """Create the controller namespace and `count` nodes, each with sshd and dockerd; wait until SSH answers."""
    tag = uuid.uuid4().hex[:6]
    subnet = f"10.{200 + int(tag[:2], 16) % 50}.{int(tag[2:4], 16)}"
    fleet = Fleet(root=Path(root), tag=tag, controller_ns=f"rso-{tag}-ctl", controller_address=f"{subnet}.1")
    fleet.root.mkdir(parents=True, exist_ok=True)
    fleet.code_cache.mkdir(exist_ok=True)
    try:
        _make_controller(fleet, f"{subnet}.1/24")
        run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(fleet.key))
        for i in range(1, count + 1):
            node = Node(
                name=f"node{i}", netns=f"rso-{tag}-n{i}", address=f"{subnet}.{10 + i}", root=fleet.root / f"node{i}"
            )
            fleet.nodes.append(node)
            _make_node(fleet, node, i)
        for node in fleet.nodes:
            _wait_for_ssh(fleet, node)
        return fleet
    except BaseException:
        fleet.stop()
        raise


def _make_controller(fleet: Fleet, cidr: str) -> None:
    ns = fleet.controller_ns
    run("ip", "netns", "add", ns)
    fleet.namespaces.append(ns)
    run("ip", "-n", ns, "link", "set", "lo", "up")
    run("ip", "-n", ns, "link", "add", "br0", "type", "bridge")
    run("ip", "-n", ns, "addr", "add", cidr, "dev", "br0")
    run("ip", "-n", ns, "link", "set", "br0", "up")


def _make_node(fleet: Fleet, node: Node, index: int) -> None:
    ns = node.netns
    run("ip", "netns", "add", ns)
    fleet.namespaces.append(ns)
    run("ip", "-n", ns, "link", "set", "lo", "up")
    run(
        "ip",
        "-n",
        fleet.controller_ns,
        "link",
        "add",
        f"veth{index}",
        "type",
        "veth",
        "peer",
        "name",
        "eth0",
        "netns",
        ns,
    )
    run("ip", "-n", fleet.controller_ns, "link", "set", f"veth{index}", "master", "br0", "up")
    run("ip", "-n", ns, "addr", "add", f"{node.address}/24", "dev", "eth0")
    run("ip", "-n", ns, "link", "set", "eth0", "up")

    for sub in ("bin", "models/target", "models/draft", "state", "ssh", "home"):
        (node.root / sub).mkdir(parents=True, exist_ok=True)
    node.set_gpus(*([H200, H200] if index == 2 else [H100, H100]))
    ctk = node.bin_dir / "nvidia-ctk"
    ctk.write_text("#!/bin/sh\necho 'NVIDIA Container Toolkit CLI version 1.17.8 (fake, tests/deploy)'\n")
    ctk.chmod(0o755)
    for folder in (node.model_dir, node.draft_dir):
        (folder / "config.json").write_text('{"architectures": ["Qwen3NextForCausalLM"]}\n')
        (folder / "model.safetensors").write_bytes(b"\0" * 64)

    ssh = node.root / "ssh"
    run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(ssh / "host_key"))
    shutil.copy(f"{fleet.key}.pub", ssh / "authorized_keys")
    conf = ssh / "sshd_config"
    conf.write_text(
        "\n".join(
            [
                "Port 22",
                f"ListenAddress {node.address}",
                f"HostKey {ssh / 'host_key'}",
                f"PidFile {ssh / 'sshd.pid'}",
                f"AuthorizedKeysFile {ssh / 'authorized_keys'}",
                "PermitRootLogin prohibit-password",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "UsePAM no",
                "StrictModes no",
                "UseDNS no",
                "Subsystem sftp /usr/lib/openssh/sftp-server",
                f"SetEnv HOME={node.root / 'home'} PYTHONPATH={NODE_PYTHON} ANSIBALLZ_CODE_CACHE={fleet.code_cache}",
                "",
            ]
        )
    )
    node.start_sshd()
    node.dockerd = start_dockerd(
        node.root / "docker", netns=ns, insecure_registries=(f"{fleet.controller_address}:{REGISTRY_PORT}",)
    )


def _wait_for_ssh(fleet: Fleet, node: Node) -> None:
    deadline = time.monotonic() + SSH_READY_TIMEOUT_S
    cmd = fleet.netns_cmd(
        "ssh",
        "-i",
        str(fleet.key),
        "-o",
        "BatchMode=yes",
        "-o",
        "StrictHostKeyChecking=no",
        "-o",
        "UserKnownHostsFile=/dev/null",
        "-o",
        "ConnectTimeout=2",
        "-o",
        "LogLevel=ERROR",
        f"root@{node.address}",
        "true",
    )
    last = ""
    while time.monotonic() < deadline:
        if node.sshd.poll() is not None:
            raise RuntimeError(f"sshd of {node.name} exited: {(node.root / 'ssh' / 'sshd.log').read_text()[-2000:]}")
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode == 0:
            return
        last = proc.stderr.strip()
        time.sleep(0.3)
    raise RuntimeError(f"ssh to {node.name} ({node.address}) did not answer within {SSH_READY_TIMEOUT_S} s: {last}")


def descendants(pid: int) -> list[int]:
    """The PIDs of every process below `pid` (children, their children, ...), from /proc."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                # the parent is the 2nd field after the command, which is in parentheses and may hold spaces
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, frontier = [], [pid]
    while frontier:
        children = [child for child, parent in parents.items() if parent in frontier]
        found += children
        frontier = children
    return found


def terminate(proc: subprocess.Popen) -> None:
    """SIGTERM by PID, wait, SIGKILL if needed, reap (a process these tests started)."""
    if proc.poll() is not None:
        return
    try:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    except ProcessLookupError:
        pass
