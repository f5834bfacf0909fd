"""Node records (`replayssm_overlay.records`): each names its process by PID, start time, PID namespace and
boot; a reader calls it alive only if all four match a process it sees, and writes prune the dead ones.

Records of other processes are planted as files (the writer's identity edited: another namespace, an earlier
boot, a PID that exited or names another process now), or written by a child process of this test."""

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from replayssm_overlay import records

REPO = Path(__file__).resolve().parents[2]
LOG = logging.getLogger("test_records")


@pytest.fixture
def folder(monkeypatch, tmp_path):
    monkeypatch.setenv(records.ENV_DIR, str(tmp_path / "state"))
    return tmp_path / "state"


def _plant(folder: Path, name: str, written: float | None = None, **process) -> Path:
    """A selfcheck record of this process's identity with `process`'s fields changed, last written at
    `written` (seconds since the epoch; None: now)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"selfcheck-{name}.json"
    path.write_text(json.dumps({"time": 1, "outcome": "passed", "process": {**records.identity(), **process}}))
    if written is not None:
        os.utime(path, (written, written))
    return path


def _exited_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_record_names_its_process_and_reads_alive(folder):
    records.write("selfcheck", {"outcome": "passed"}, LOG)
    (record,) = records.read("selfcheck")
    me = records.identity()
    assert record["process"] == me and me["start_ticks"] and me["pid_namespace"].startswith("pid:[") and me["boot_id"]
    assert record["pid"] == os.getpid() and record["alive"] and record["liveness"] == records.ALIVE
    namespace = "".join(ch for ch in me["pid_namespace"] if ch.isdigit())
    assert Path(record["path"]).name == f"selfcheck-{namespace}-{os.getpid()}-{me['start_ticks']}.json"


@pytest.mark.parametrize(
    "process,why",
    [
        (lambda: {"pid": _exited_pid(), "start_ticks": 1}, "no process with that PID runs"),
        (lambda: {"start_ticks": records.identity()["start_ticks"] + 1}, "that PID now names another process"),
        (lambda: {"boot_id": "an-earlier-boot", "written": records.boot_time() - 60}, "before this node last booted"),
    ],
)
def test_a_dead_processs_record_is_dead_and_the_next_write_prunes_it(folder, process, why):
    planted = _plant(folder, "dead", **process())
    (record,) = records.read("selfcheck")
    assert record["alive"] is False and record["liveness"] == records.DEAD and why in record["liveness_detail"]
    records.write("fallbacks", {"shapes": []}, LOG)
    assert not planted.exists() and [r["liveness"] for r in records.read("fallbacks")] == [records.ALIVE]


def test_a_record_of_another_boot_written_since_this_boot_is_unknown_and_kept(folder):
    """A container under a kernel of its own (a VM-isolated one) has a boot id of its own: a boot id that
    differs proves nothing about a record written after this node booted."""
    planted = _plant(folder, "vm", boot_id="another-kernels-boot")
    (record,) = records.read("selfcheck")
    assert record["alive"] is False and record["liveness"] == records.UNKNOWN
    assert "another boot since this node booted" in record["liveness_detail"]
    records.write("selfcheck", {"outcome": "passed"}, LOG)
    assert planted.exists()


def test_a_record_of_another_pid_namespace_is_not_called_alive_nor_pruned(folder):
    """A container sharing this folder: its server may be this very PID there (PIDs repeat across
    namespaces); this process cannot tell whether it runs, so it is not alive to `status`, and kept."""
    planted = _plant(folder, "container", pid_namespace="pid:[4026599999]")
    (record,) = records.read("selfcheck")
    assert record["pid"] == os.getpid() and record["alive"] is False and record["liveness"] == records.UNKNOWN
    assert "another PID namespace" in record["liveness_detail"]
    records.write("selfcheck", {"outcome": "passed"}, LOG)
    assert planted.exists()


def test_a_record_without_an_identity_is_unknown_and_kept(folder):
    folder.mkdir(parents=True)
    legacy = folder / f"selfcheck-{os.getpid()}.json"  # an older overlay's: the PID only, which proves nothing
    legacy.write_text(json.dumps({"pid": os.getpid(), "time": 1, "outcome": "passed"}))
    (record,) = records.read("selfcheck")
    assert record["pid"] == os.getpid() and record["alive"] is False and record["liveness"] == records.UNKNOWN
    records.write("selfcheck", {"outcome": "passed"}, LOG)
    assert legacy.exists()


def test_a_live_processs_record_is_alive_and_kept_until_it_exits(folder):
    code = (
        "import logging, sys, time; from replayssm_overlay import records; "
        "records.write('selfcheck', {'outcome': 'passed'}, logging.getLogger()); print('written', flush=True); "
        "time.sleep(60)"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO / "overlay"))
    child = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "written"
        records.write("selfcheck", {"outcome": "passed"}, LOG)
        assert sorted((r["pid"], r["alive"]) for r in records.read("selfcheck")) == sorted(
            [(child.pid, True), (os.getpid(), True)]
        )
    finally:
        child.kill()
        child.wait()  # reaped: its PID names no process now
    assert {r["pid"]: r["liveness"] for r in records.read("selfcheck")}[child.pid] == records.DEAD
    records.write("selfcheck", {"outcome": "passed"}, LOG)
    assert [r["pid"] for r in records.read("selfcheck")] == [os.getpid()]


def test_a_record_names_the_sglang_tree_its_process_imported_and_reads_scoped_to_a_tree(folder, tmp_path):
    records.write("selfcheck", {"outcome": "passed"}, LOG)
    (record,) = records.read("selfcheck")
    assert record["sglang_dir"] == records.imported_sglang_dir() and record["scope"] == records.TREE
    (mine,) = records.read("selfcheck", sglang_dir=record["sglang_dir"])
    (other,) = records.read("selfcheck", sglang_dir=tmp_path / "another" / "sglang")
    assert mine["scope"] == records.TREE and other["scope"] == records.NODE and other["alive"]
