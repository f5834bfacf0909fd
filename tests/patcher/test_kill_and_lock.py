"""A killed patcher leaves nothing the next run does not clean, and only one patcher acts on a tree at a
time. The kill is a real SIGKILL of a real `replayssm-overlay` process, made
deterministic by killing it from inside its N-th atomic rename: the temp file is written and fsynced,
the rename never happens, exactly as a kill at the worst moment leaves it."""

import json
import os
import pathlib
import subprocess
import sys
import threading
import time

import pytest

from replayssm_overlay.cli import main
from replayssm_overlay.cliutil import TEMP_SUFFIX, sha256_bytes
from replayssm_overlay.patcher import lock, store
from replayssm_overlay.patcher.releases import RELEASES, TARGET_FILES

REPO = pathlib.Path(__file__).resolve().parents[2]
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(str(REPO / sub) for sub in ("overlay", "smoke_tests", ".")))
# apply renames 3 pristine copies (1-3), the 2 commit modules (4-5), the manifest (6), the configurator (7);
# revert renames the 3 modules. One kill point of each kind, and the first and last module of revert
# (every point, with every signal: test_all_or_nothing.py).
APPLY_KILL_POINTS, REVERT_KILL_POINTS = (1, 4, 7), (1, 3)

KILLED_AT_RENAME = f"""
import os, signal, sys
from replayssm_overlay.cli import main
real_replace, calls, kill_at = os.replace, [0], int(sys.argv[1])
def replace(src, dst):
    if str(src).endswith({TEMP_SUFFIX!r}):
        calls[0] += 1
        if calls[0] == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
    real_replace(src, dst)
os.replace = replace
sys.exit(main(sys.argv[2:]))
"""


def cli(*argv, killed_at=None) -> subprocess.CompletedProcess:
    if killed_at is None:
        command = [sys.executable, "-m", "replayssm_overlay", *argv]
    else:
        command = [sys.executable, "-c", KILLED_AT_RENAME, str(killed_at), *argv]
    return subprocess.run(command, capture_output=True, text=True, env=ENV, timeout=120)


def temp_files(root: pathlib.Path) -> list:
    return sorted(str(p) for p in root.rglob(f"*{TEMP_SUFFIX}"))


def shas(tree) -> dict:
    return {rel: sha256_bytes((tree / rel).read_bytes()) for rel in TARGET_FILES}


@pytest.mark.parametrize("killed_at", APPLY_KILL_POINTS)
def test_a_killed_apply_leaves_nothing_the_next_run_does_not_remove(sglang_tree, killed_at):
    site = sglang_tree.parent
    target = ("--sglang-dir", str(sglang_tree))
    killed = cli("apply", *target, killed_at=killed_at)
    assert killed.returncode == -9, killed.stderr
    left = temp_files(site)
    assert len(left) == 1

    status = json.loads(cli("status", "--json", *target).stdout)
    assert status["leftovers"] == left
    verdict = cli("verify", *target)
    assert verdict.returncode == 1 and f"{left[0]}: a temp file left by a killed patcher run" in verdict.stdout

    again = cli("apply", "--json", *target)
    assert again.returncode == 0, again.stderr
    result = json.loads(again.stdout)
    assert result["leftovers_removed"] == left
    assert f"removed 1 temp file(s) a killed run left: {left[0]}" in result["message"]
    assert temp_files(site) == []
    assert cli("verify", *target).returncode == 0


@pytest.mark.parametrize("killed_at", REVERT_KILL_POINTS)
def test_a_killed_revert_leaves_nothing_the_next_run_does_not_remove(sglang_tree, killed_at):
    site = sglang_tree.parent
    target = ("--sglang-dir", str(sglang_tree))
    assert cli("apply", *target).returncode == 0
    killed = cli("revert", *target, killed_at=killed_at)
    assert killed.returncode == -9, killed.stderr
    left = temp_files(site)
    assert len(left) == 1 and json.loads(cli("status", "--json", *target).stdout)["leftovers"] == left

    again = cli("revert", "--json", *target)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["leftovers_removed"] == left
    assert temp_files(site) == [] and shas(sglang_tree) == RELEASES["0.5.19"]
    assert not store.state_dir(sglang_tree).exists()


def test_leftovers_of_other_names_are_never_touched(sglang_tree, capsys):
    """Only names atomic_write makes for the target files count: SGLang's own files stay."""
    folder = (sglang_tree / TARGET_FILES[0]).parent
    others = [folder / ".other.py.abcdefgh.rso-tmp", folder / "kv_cache_configurator.py.rso-tmp"]
    for path in others:
        path.write_text("not ours\n")
    assert main(["apply", "--sglang-dir", str(sglang_tree)]) == 0
    capsys.readouterr()
    assert all(path.read_text() == "not ours\n" for path in others)


@pytest.mark.parametrize("command", ["apply", "revert", "verify"])
def test_a_second_patcher_waits_a_bounded_time_then_refuses_naming_the_holder(sglang_tree, command, capsys, snapshot):
    before = snapshot(sglang_tree)
    with lock.held(sglang_tree, exclusive=True, timeout_s=0, command="test"):
        started = time.monotonic()
        code = main([command, "--sglang-dir", str(sglang_tree), "--lock-timeout", "0.3"])
        waited = time.monotonic() - started
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert f"{command}: another patcher run holds the lock on {sglang_tree.resolve()}: pid {os.getpid()}" in err
    assert "waited 0.3 s, changed nothing" in err and "--lock-timeout" in err
    assert waited >= 0.3
    assert snapshot(sglang_tree) == before and not store.state_dir(sglang_tree).exists()


def test_verifies_share_the_lock_and_a_waiting_apply_runs_once_it_is_free(sglang_tree, capsys):
    target = ["--sglang-dir", str(sglang_tree)]
    with lock.held(sglang_tree, exclusive=False, timeout_s=0, command="test"):
        assert main(["verify", *target, "--lock-timeout", "0"]) == 1  # ran (nothing is patched yet)
    holder = threading.Thread(target=_hold_for, args=(sglang_tree, 0.5))
    holder.start()
    time.sleep(0.1)
    try:
        assert main(["apply", *target, "--lock-timeout", "30"]) == 0
    finally:
        holder.join()
    assert "patched 3 file(s) of SGLang 0.5.19" in capsys.readouterr().out


def test_two_concurrent_applies_patch_once(sglang_tree):
    target = ["--sglang-dir", str(sglang_tree), "--json"]
    runs = [
        subprocess.Popen(
            [sys.executable, "-m", "replayssm_overlay", "apply", *target],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=ENV,
        )
        for _ in range(2)
    ]
    results = [json.loads(run.communicate(timeout=120)[0]) for run in runs]
    assert [run.returncode for run in runs] == [0, 0]
    assert sorted(r["changed"] for r in results) == [False, True]
    assert sorted(r["message"] for r in results)[0] == "already patched; nothing to do"


def test_status_names_a_running_patcher(sglang_tree, capsys):
    with lock.held(sglang_tree, exclusive=True, timeout_s=0, command="test"):
        assert main(["status", "--json", "--sglang-dir", str(sglang_tree)]) == 0
    assert json.loads(capsys.readouterr().out)["locked_by"].startswith(f"pid {os.getpid()}")


def _hold_for(sglang_dir, seconds):
    with lock.held(sglang_dir, exclusive=True, timeout_s=0, command="test"):
        time.sleep(seconds)
