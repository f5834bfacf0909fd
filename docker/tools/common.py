"""Shared pieces of the host-side image tools (docker/tools/*.py, driven by docker/docker.mk).

Why it exists: every tool reads the one lock file, talks to the same Docker daemon, and refuses bad
input the same way (one `error: ...` / `  fix: ...` message on stderr, exit 2, nothing half-done).
Standard library only: the tools run with the build host's plain `python3`.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

DOCKER_DIR = Path(__file__).resolve().parent.parent
REPO = DOCKER_DIR.parent
LOCK = Path(os.environ.get("RSO_BASE_LOCK") or DOCKER_DIR / "base.lock")  # docker.mk exports it
LOCK_REQUIRED = ("SGLANG_RELEASE", "BASE_REPOSITORY", "CUDA_LANE", "RELEASES")
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
DOCKER = os.environ.get("DOCKER", "docker")


class Refusal(Exception):
    """Bad input or environment: what is wrong, and the fix.

    Not an `OverlayError`: the tools run with the build host's plain `python3` and the standard library,
    where the overlay package is not installed. It carries a stable `code` all the same, printed in
    `--json` errors and unique with the overlay's (`tests/structure/test_error_codes.py`)."""

    code = "image-tool-refused"

    def __init__(self, what: str, fix: str):
        super().__init__(what)
        self.what, self.fix = what, fix


def run_tool(main) -> None:
    """Run `main()`; a Refusal becomes `error: ...` + `fix: ...` on stderr (and, for a tool run with
    --json, `{ok: false, error, fix, code}` on stdout) and exit status 2."""
    try:
        sys.exit(main() or 0)
    except Refusal as refusal:
        print(f"error: {refusal.what}\n  fix: {refusal.fix}", file=sys.stderr)
        if "--json" in sys.argv[1:]:
            print(json.dumps({"ok": False, "error": refusal.what, "fix": refusal.fix, "code": refusal.code}))
        sys.exit(2)


def log(msg: str) -> None:
    print(f"==> {msg}", file=sys.stderr, flush=True)


def read_lock(path: Path = LOCK) -> dict[str, str]:
    """KEY=VALUE lines of the lock file (comments and blank lines skipped)."""
    values = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]*", key) or re.search(r"[\s#]", value):
            raise Refusal(
                f"{path}:{number}: not a KEY=VALUE line (no spaces, no inline comment): {line!r}",
                "fix the lock file by hand: comments go on lines of their own",
            )
        values[key] = value
    missing = [key for key in LOCK_REQUIRED if not values.get(key)]
    if missing:
        raise Refusal(f"{path} lacks {', '.join(missing)}", "restore those lines (docker/README.md, 'The lock file')")
    return values


def write_lock_value(key: str, value: str, path: Path = LOCK) -> None:
    """Replace `key`'s value in the lock file (atomically), keeping every other line as it is."""
    lines = path.read_text().splitlines()
    hits = [i for i, line in enumerate(lines) if line.startswith(f"{key}=")]
    if len(hits) != 1:
        raise Refusal(f"{path} has {len(hits)} lines for {key}", f"keep exactly one `{key}=...` line")
    lines[hits[0]] = f"{key}={value}"
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, prefix=".base.lock.") as tmp:
        tmp.write("\n".join(lines) + "\n")
    os.chmod(tmp.name, 0o644)
    os.replace(tmp.name, path)


def _listed(lock: dict[str, str], key: str) -> list[str]:
    return [item for item in lock.get(key, "").split(",") if item]


def pin_base_command(release: str, lane: str) -> str:
    """The command that records the digest of (release, lane) in the lock."""
    return f"make pin-base SGLANG_RELEASE={release} CUDA_LANE={lane}"


def base_pin(lock: dict[str, str], release: str, lane: str) -> dict[str, str]:
    """The locked base of one SGLang release and CUDA lane; refuses a release or lane the lock lacks."""
    releases = _listed(lock, "RELEASES")
    if release not in releases:
        raise Refusal(
            f"unknown SGLang release {release!r}: docker/base.lock pins {', '.join(releases)}",
            f"use SGLANG_RELEASE={' or '.join(releases)}; another release needs the overlay ported "
            "to it first (overlay/replayssm_overlay/patcher/releases.py) and its lines in docker/base.lock",
        )
    lanes = _listed(lock, f"LANES_{release}")
    if lane not in lanes or f"BASE_DIGEST_{release}_{lane}" not in lock or f"BASE_TAG_{release}_{lane}" not in lock:
        raise Refusal(
            f"unknown CUDA lane {lane!r} for SGLang {release}: docker/base.lock pins "
            f"{', '.join(lanes) or 'none'} (LANES_{release})",
            f"use CUDA_LANE={' or '.join(lanes)}, or, if the SGLang project publishes that lane, add it to "
            f"LANES_{release} with BASE_TAG_{release}_{lane}/BASE_DIGEST_{release}_{lane}/"
            f"BASE_IMAGE_ID_{release}_{lane} lines and DRIVER_FLOOR_{lane}, then run "
            f"`{pin_base_command(release, lane)}`",
        )
    key = f"{release}_{lane}"
    return {
        "name": f"{lock['BASE_REPOSITORY']}:{lock[f'BASE_TAG_{key}']}",
        "digest": lock[f"BASE_DIGEST_{key}"],
        "release": release,
        "lane": lane,
        "key": key,
        "image_id": lock.get(f"BASE_IMAGE_ID_{key}", ""),
    }


def docker(
    *args: str, check: bool = True, capture: bool = True, timeout: float | None = None, capture_stderr: bool = False
) -> subprocess.CompletedProcess:
    """Run the docker client; with `check`, a failure raises Refusal carrying its stderr. `capture=False`
    lets the output through to the terminal (progress), `capture_stderr` still keeps stderr for a message."""
    try:
        proc = subprocess.run(
            [DOCKER, *args],
            text=True,
            timeout=timeout,
            stdout=subprocess.PIPE if capture else None,
            stderr=subprocess.PIPE if capture or capture_stderr else None,
        )
    except FileNotFoundError as err:
        raise Refusal(
            f"the docker client `{DOCKER}` is not installed", "install docker (docker.io), or set DOCKER="
        ) from err
    except subprocess.TimeoutExpired as err:
        raise Refusal(
            f"`docker {' '.join(args)}` did not finish within {timeout:.0f} s", "check the daemon and the network"
        ) from err
    if check and proc.returncode != 0:
        detail = (proc.stderr or "").strip() if capture else "see the output above"
        raise Refusal(
            f"`docker {' '.join(args[:3])} ...` failed (exit {proc.returncode}): {detail}", "see the message above"
        )
    return proc


def image_id(ref: str) -> str | None:
    """The local image ID (config digest) of `ref`, or None when the daemon does not have it."""
    proc = docker("image", "inspect", "--format", "{{.Id}}", ref, check=False)
    return proc.stdout.strip() if proc.returncode == 0 else None


def overlay_version() -> str:
    """`version = "..."` from the project's pyproject.toml (the overlay wheel's version)."""
    match = re.search(r'^version\s*=\s*"([^"]+)"', (REPO / "pyproject.toml").read_text(), re.M)
    if not match:
        raise Refusal('pyproject.toml has no `version = "..."` line', "restore the [project] version")
    return match.group(1)


def registry_host(ref: str) -> str:
    """The registry a reference lives in: its first path part if it names a host, else Docker Hub."""
    first = ref.split("/", 1)[0]
    if "/" in ref and ("." in first or ":" in first or first == "localhost"):
        return first
    return "registry-1.docker.io"


def check_registry_reachable(host: str, timeout: float = 10.0) -> None:
    """Refuses when nothing answers on the registry's port (443 unless `host:port`), in seconds."""
    name, _, port = host.partition(":")
    try:
        socket.create_connection((name, int(port or 443)), timeout=timeout).close()
    except (OSError, ValueError) as err:
        raise Refusal(
            f"registry {host} is not reachable ({err})",
            "check the network, proxy or VPN; sites without a registry use `make save` and "
            "`make load` (docker/README.md, 'Air-gapped sites')",
        ) from err
