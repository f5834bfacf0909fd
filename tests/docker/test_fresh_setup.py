"""The README's commands set up a fresh Debian 12 machine: run in the project's own bare
Debian 12 rootfs (the stand-in base's debootstrap rootfs: minbase + python3 + pip, no venv module, no
make), `scripts/setup-system.sh demo` installs what `make demo` needs and `scripts/setup-venv.sh`'s
first step (the venv) then works; every package `make setup` asks for exists in Debian 12. This machine
has all of them, so only a rootfs that lacks them can show a gap.

The rootfs is extracted from the cached tarball and entered with `chroot` in a private mount namespace
(`unshare --mount`: its /proc and /dev mounts vanish with the process). apt reaches the Debian mirror the
rootfs was built from. The venv script is stopped after its first step by `PIP_NO_INDEX=1` (its second
step installs torch), which keeps the test to about a minute.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from tests.docker import standin

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
# what setup-venv.sh reads besides itself (its stamp hashes them; it asks releases.py for the releases)
SETUP_FILES = ("scripts", "pyproject.toml", "overlay/replayssm_overlay/patcher/releases.py")


@pytest.fixture(scope="module")
def rootfs(tmp_path_factory) -> Path:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("chroot into a rootfs needs root and unshare")
    root = tmp_path_factory.mktemp("fresh-debian") / "rootfs"
    root.mkdir()
    with tarfile.open(standin.rootfs_tarball()) as tar:
        tar.extractall(root, filter="fully_trusted")
    for name in SETUP_FILES:
        target = root / "repo" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if (REPO / name).is_dir() else shutil.copy2)(REPO / name, target)
    shutil.copy2("/etc/resolv.conf", root / "etc" / "resolv.conf")
    yield root
    shutil.rmtree(root)  # 200 MB; nothing is mounted in it any more (the namespaces are gone)


def in_rootfs(root: Path, script: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """`script` (sh) as root inside `root`, with /proc and /dev, in a mount namespace of its own."""
    enter = (
        f'mount -t proc proc "{root}/proc" && mount --rbind /dev "{root}/dev" && '
        f'exec chroot "{root}" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin '
        f'HOME=/root DEBIAN_FRONTEND=noninteractive /bin/sh -c "$0"'
    )
    return subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "--fork", "sh", "-c", enter, script],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_the_bare_rootfs_lacks_what_the_readme_commands_need(rootfs):
    """The premise (so it runs first, on the module's one rootfs): without setup-system.sh this rootfs
    cannot make the venv, and has no make."""
    done = in_rootfs(rootfs, "cd /repo && VENV=/tmp/bare bash scripts/setup-venv.sh")
    assert done.returncode == 2, done.stderr
    assert "python3.11 -m venv failed" in done.stderr and "install python3.11-venv as root" in done.stderr
    assert in_rootfs(rootfs, "command -v make").returncode != 0


def test_setup_system_demo_then_the_venv_step_works_in_a_bare_debian(rootfs):
    done = in_rootfs(rootfs, "cd /repo && bash scripts/setup-system.sh demo")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "setup-system: installing make python3.11-venv " in done.stderr and done.stdout == ""
    again = in_rootfs(rootfs, "cd /repo && bash scripts/setup-system.sh demo")
    assert again.returncode == 0 and "all packages present" in again.stderr  # a rerun changes nothing

    venv = in_rootfs(rootfs, "cd /repo && PIP_NO_INDEX=1 VENV=/root/venv bash scripts/setup-venv.sh")
    assert "[1/8] creating /root/venv with Python 3.11" in venv.stderr, venv.stderr
    assert "[2/8]" in venv.stderr and venv.returncode != 0  # stopped by PIP_NO_INDEX, after the venv
    check = in_rootfs(rootfs, "/root/venv/bin/python -m pip --version && make --version")
    assert check.returncode == 0 and "python 3.11" in check.stdout and "GNU Make" in check.stdout, check.stderr

    # every package `make setup` installs for the tests exists in Debian 12 and installs together
    wanted = " ".join(re.findall(r"^need\+?=\(([^)]*)\)", (REPO / "scripts" / "setup-system.sh").read_text(), re.M))
    simulated = in_rootfs(rootfs, f"apt-get install --simulate -qq --no-install-recommends {wanted}")
    assert simulated.returncode == 0, simulated.stdout[-2000:] + simulated.stderr[-2000:]
