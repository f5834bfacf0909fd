"""The make entry points a new user meets first: `make help` aligned, `make demo-json`
printing only JSON on stdout (for the release asked for), targets that need .venv saying "run make setup
first", `make load` without a tarball saying what it needs, the patch status and the fleet status named
apart, and `make setup` waiting for the dpkg lock.

Nothing here runs `make setup` for real (it would rebuild the shared .venv): `demo-json` runs with
`-o setup-demo` and PY= a probe that prints its own argv as JSON, and setup-system.sh runs against stand-ins
for dpkg-query and apt-get (test doubles: the real apt cannot be run from a test), which record what
they were asked."""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
VENV_TARGETS = ("test-patcher", "patch-status", "test-hooks", "aot-test", "aot-build", "test-fast", "lint")


def make(*args: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["make", "--no-print-directory", *args], cwd=ROOT, capture_output=True, text=True, timeout=120, env=env
    )


def test_make_help_aligns_every_description():
    done = make("help")
    assert done.returncode == 0, done.stderr
    rows = [re.match(r"^  make (\S+)( +)(\S.*)$", line) for line in done.stdout.splitlines()]
    assert rows and all(rows), done.stdout
    columns = {len(row.group(1)) + len(row.group(2)) for row in rows}
    assert len(columns) == 1, done.stdout
    names = [row.group(1) for row in rows]
    assert names == sorted(names) and len(names) == len(set(names))
    assert {"patch-status", "fleet-status", "aot-build"} <= set(names)


def test_make_status_says_which_status_to_ask_for():
    done = make("status")
    assert done.returncode == 2 and done.stdout == ""
    assert "make patch-status" in done.stderr and "make fleet-status INVENTORY=" in done.stderr


def test_make_demo_json_prints_only_json(tmp_path):
    probe = tmp_path / "python"
    probe.write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    probe.chmod(0o755)
    done = make("-o", "setup-demo", "demo-json", f"PY={probe}")
    assert done.returncode == 0, done.stderr
    argv = json.loads(done.stdout)  # (with the release docker/base.lock names as SGLANG_RELEASE)
    assert argv[:2] == ["-m", "harness.demo"] and argv[-1] == "--json"
    # the release asked for reaches the demo (never silently 0.5.19)
    done = make("-o", "setup-demo", "demo-json", f"PY={probe}", "SGLANG_RELEASE=0.5.23")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == ["-m", "harness.demo", "--release", "0.5.23", "--json"]


def test_make_load_without_a_tarball_says_what_it_needs():
    """Not argparse's usage lines: one error and the fix, before any daemon is asked."""
    done = make("load")
    assert done.returncode == 2
    assert "error: make load needs TARBALL=" in done.stderr and "fix: e.g. make load TARBALL=" in done.stderr
    assert "usage:" not in done.stderr


@pytest.mark.parametrize("target", VENV_TARGETS)
def test_targets_that_need_the_venv_say_run_make_setup_first(target, tmp_path):
    absent = tmp_path / "no-venv" / "bin" / "python"
    done = make(target, f"PY={absent}")
    assert done.returncode == 2 and done.stdout == ""
    assert f"make {target}: {absent} not found; run make setup first" in done.stderr
    assert "No such file or directory" not in done.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="setup-system.sh installs only as root")
def test_setup_system_waits_for_the_dpkg_lock_and_keeps_stdout_clean(tmp_path):
    calls = tmp_path / "apt-calls"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "dpkg-query").write_text(
        "#!/bin/sh\nfor a; do p=$a; done\n[ \"$p\" = rsync ] && exit 1\necho 'install ok installed'\n"
    )  # every package present but rsync
    (bin_dir / "apt-get").write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\necho 'apt says something'\n")
    for stub in bin_dir.iterdir():
        stub.chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}")
    done = subprocess.run(
        ["bash", "scripts/setup-system.sh"], cwd=ROOT, capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    asked = calls.read_text().splitlines()
    assert len(asked) == 2 and all("DPkg::Lock::Timeout=600" in line for line in asked)
    assert asked[1].endswith("install -y -qq --no-install-recommends rsync")
    assert "waiting up to 600s if another apt holds the dpkg lock" in done.stderr
