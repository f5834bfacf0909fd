"""Runs the deploy playbooks for the tests: inventories written from a Fleet, ansible-playbook inside
the controller namespace, the recap parsed per host.

Nothing here ships; it lives under tests/.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.deploy.fleet import Fleet

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
BIN = Path(sys.executable).parent
RECAP = re.compile(
    r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)\s+skipped=(\d+)"
    r"\s+rescued=(\d+)\s+ignored=(\d+)",
    re.M,
)

# What every test inventory shares: tarball mode, no GPU request (no GPU here), short health waits,
# the minimal /generate gate.
COMMON_VARS = {
    "ansible_user": "root",
    "ansible_python_interpreter": "/usr/bin/python3",
    "sglang_image_source": "tarball",
    "sglang_image_cuda_lane": "cu130",
    "sglang_gpus": False,
    "sglang_container_name": "sglang-test",
    "sglang_port": 30000,
    "sglang_tp_size": 2,
    "sglang_speculative_algorithm": "DFLASH",
    "sglang_flags": {
        "enable-linear-replayssm-spec": True,
        "speculative-num-draft-tokens": 16,
        "mamba-ssm-dtype": "float32",
    },
    "sglang_extra_args": [],
    "sglang_health_retries": 20,
    "sglang_health_delay": 1,
    "sglang_service_stop_timeout": 5,
    "sglang_smoke_mode": "generate",
    "sglang_preflight_min_free_gb": 1,
    # CI containers lack CAP_SYS_RESOURCE, so memlock=-1 (the production default) cannot be set here
    "sglang_ulimits": ["stack:67108864:67108864"],
}


#: how long an idle SSH multiplexing master stays (Ansible's default is 60 s)
SSH_PERSIST_S = 20


@dataclass
class Result:
    rc: int
    output: str
    recap: dict[str, dict[str, int]]

    def changed(self, host: str) -> int:
        return self.recap[host]["changed"]


def write_inventory(
    fleet: Fleet, path: Path, image, host_overrides: dict | None = None, extra_hosts: dict | None = None, **overrides
) -> Path:
    """An inventory of every fleet node for `image` (a SavedImage); overrides per host and for all,
    and `extra_hosts` (name -> vars) that are not fleet nodes."""
    hosts = {}
    for node in fleet.nodes:
        hosts[node.name] = {**node.inventory_vars(), **(host_overrides or {}).get(node.name, {})}
    hosts.update(extra_hosts or {})
    group_vars = {
        **COMMON_VARS,
        "ansible_ssh_private_key_file": str(fleet.key),
        "sglang_image": image.ref,
        "sglang_image_tarball": str(image.tarball),
        "sglang_image_id": image.image_id,
        **overrides,
    }
    path.write_text(json.dumps({"sglang_nodes": {"hosts": hosts, "vars": group_vars}}, indent=2))
    return path


def _playbook_command(fleet: Fleet, playbook: str, inventory: Path, args: tuple[str, ...]) -> tuple[list, dict]:
    """The command line (inside the controller namespace) and environment of one ansible-playbook run."""
    env = dict(os.environ)
    env.update(
        {
            "ANSIBLE_CONFIG": str(DEPLOY / "ansible.cfg"),
            # SSH multiplexing as Ansible's default has it (one connection per node, each task a session over
            # it), which spares a key exchange per task (notes/decisions.md). The masters live in the fleet's
            # folder, end when their node's sshd is stopped (Node.stop_sshd), and end by themselves when idle.
            "ANSIBLE_SSH_ARGS": (
                f"-o ControlMaster=auto -o ControlPersist={SSH_PERSIST_S}s -o UserKnownHostsFile=/dev/null"
            ),
            "ANSIBLE_SSH_CONTROL_PATH_DIR": str(fleet.root / "cp"),
            "ANSIBLE_HOST_KEY_CHECKING": "False",
            # a loaded 2-core machine's sshd now and then resets a connection during key exchange
            "ANSIBLE_SSH_RETRIES": "3",
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_DEPRECATION_WARNINGS": "False",
            "ANSIBLE_LOCAL_TEMP": str(fleet.root / "ansible-local"),
            "PATH": f"{BIN}:{env.get('PATH', '/usr/bin:/bin')}",
            # the smoke gate runs this tree's smoke suite on the controller
            "PYTHONPATH": os.pathsep.join([str(REPO / "smoke_tests"), str(REPO / "overlay"), str(REPO)]),
        }
    )
    cmd = fleet.netns_cmd(
        str(BIN / "ansible-playbook"), "-i", str(inventory), str(DEPLOY / "playbooks" / playbook), *args
    )
    return cmd, env


def _result(fleet: Fleet, playbook: str, args: tuple[str, ...], rc: int, output: str) -> Result:
    """Log the run in the fleet's ansible.log and parse its recap."""
    with (fleet.root / "ansible.log").open("a") as fh:
        fh.write(f"\n===== {playbook} {' '.join(args)} (rc {rc})\n{output}")
    recap = {
        m[0]: dict(zip(("ok", "changed", "unreachable", "failed", "skipped", "rescued", "ignored"), map(int, m[1:])))
        for m in RECAP.findall(output)
    }
    return Result(rc=rc, output=output, recap=recap)


def ansible_playbook(fleet: Fleet, playbook: str, inventory: Path, *args: str, timeout: float = 600) -> Result:
    """Run deploy/playbooks/<playbook> from the controller namespace; output goes to stdout too (pytest -s)."""
    cmd, env = _playbook_command(fleet, playbook, inventory, args)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, cwd=DEPLOY)
    return _result(fleet, playbook, args, proc.returncode, proc.stdout + proc.stderr)


def fleet_status(fleet: Fleet, inventory: Path, *args: str, timeout: float = 300) -> Result:
    """deploy/fleet-status (make fleet-status's exit codes: 0, 1, 2) from the controller namespace."""
    _, env = _playbook_command(fleet, "status.yml", inventory, args)
    env["ANSIBLE_PLAYBOOK"] = str(BIN / "ansible-playbook")
    cmd = fleet.netns_cmd(str(DEPLOY / "fleet-status"), str(inventory), *args)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, cwd=DEPLOY)
    return _result(fleet, "fleet-status", args, proc.returncode, proc.stdout + proc.stderr)


class RunningPlaybook:
    """An ansible-playbook run in the background (its own process group), to be waited for or killed
    mid-run (the controller dying); its output goes to a file until then."""

    def __init__(self, fleet: Fleet, playbook: str, inventory: Path, *args: str):
        self.fleet, self.playbook, self.args = fleet, playbook, args
        cmd, env = _playbook_command(fleet, playbook, inventory, args)
        self.log = fleet.root / f"running-{os.getpid()}-{id(self)}.log"
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                cmd,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=DEPLOY,
                start_new_session=True,
            )

    def _finish(self) -> Result:
        output = self.log.read_text(errors="replace")
        self.log.unlink(missing_ok=True)
        return _result(self.fleet, self.playbook, self.args, self.proc.returncode, output)

    def wait(self, timeout: float = 600) -> Result:
        self.proc.wait(timeout=timeout)
        return self._finish()

    def kill(self) -> Result:
        """SIGKILL the whole run (ansible-playbook, its workers, its ssh clients: one process group)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        return self._finish()
