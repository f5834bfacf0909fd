"""An interrupted `apply` or `revert` never leaves a tree that lifts the KDA-only refusal without the commit
behind it, SIGINT and SIGTERM roll the run back, and `status`/`verify` call a partial tree what it is
(`notes/decisions.md`, "All or nothing, by order and by rollback").

The signals are real, sent to a real `replayssm-overlay` process by itself at a chosen point of its write
window: the test's wrapper around `os.replace` and `shutil.rmtree` (the calls by which every write and
the record's removal land) counts them and sends the signal just before the N-th one runs, or just after
the last. Every point of the window is hit once per signal, deterministically. After each run the tree
must hold the invariant (the configurator is stock, or all three files are patched and the manifest
agrees), a SIGINT/SIGTERM run must have rolled back to the exact bytes it started from, and a rerun
of the same command must finish the job exactly.
"""

import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys

import pytest

from replayssm_overlay import patcher
from replayssm_overlay.cli import main
from replayssm_overlay.patcher import store
from replayssm_overlay.patcher.edits import patch_source
from replayssm_overlay.patcher.releases import CONFIGURATOR, DFLASH_WORKER, DSPARK_WORKER, TARGET_FILES

REPO = pathlib.Path(__file__).resolve().parents[2]
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(str(REPO / sub) for sub in ("overlay", "smoke_tests", ".")))
SIGNALS = (signal.SIGKILL, signal.SIGINT, signal.SIGTERM)
KILLED_TEMP_FILE = "a temp file left by a killed patcher run"

# argv: POINT SIGNUM COMMAND...; POINT k > 0 signals just before the k-th landing call, -k just after it,
# 0 never. Prints how many landing calls the run made (on stderr, last line).
SIGNALLED_AT = """
import os, shutil, signal, sys
from replayssm_overlay.cli import main
point, signum, calls = int(sys.argv[1]), int(sys.argv[2]), [0]
def landing(real):
    def call(*args, **kwargs):
        calls[0] += 1
        if calls[0] == point:
            os.kill(os.getpid(), signum)
        result = real(*args, **kwargs)
        if calls[0] == -point:
            os.kill(os.getpid(), signum)
        return result
    return call
os.replace, shutil.rmtree = landing(os.replace), landing(shutil.rmtree)
code = main(sys.argv[3:])
sys.stderr.write(f"\\nlanding calls: {calls[0]}\\n")
sys.exit(code)
"""


def signalled(point: int, signum: int, *argv) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", SIGNALLED_AT, str(point), str(int(signum)), *argv],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=120,
    )


def landing_calls(*argv) -> int:
    done = signalled(0, signal.SIGINT, *argv)
    assert done.returncode == 0, done.stderr
    return int(done.stderr.rsplit("landing calls: ", 1)[1])


def every_point(count: int) -> list:
    """Just before each landing call, and just after the last."""
    return [*range(1, count + 1), -count]


def files_under(folder: pathlib.Path) -> dict:
    """Every file under `folder` and its bytes (the manifest without the times it was written and the files'
    modification times it records)."""
    written = rb'"applied_at": "[^"]*"|"source_mtime_ns": {[^}]*}'
    return {
        str(p.relative_to(folder)): re.sub(written, b"", p.read_bytes())
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def patched_bytes(pristine_files) -> dict:
    """What each target file must be once patched, made here from the pristine bytes."""
    return {rel: patch_source(rel, data) for rel, data in pristine_files.items()}


def assert_invariant(tree: pathlib.Path, pristine_files: dict, patched_bytes: dict) -> None:
    """The configurator still refuses (stock bytes), or all three files are patched and verify passes."""
    now = {rel: (tree / rel).read_bytes() for rel in TARGET_FILES}
    assert now[CONFIGURATOR] in (pristine_files[CONFIGURATOR], patched_bytes[CONFIGURATOR])
    if now[CONFIGURATOR] == patched_bytes[CONFIGURATOR]:
        assert now == patched_bytes, "the configurator lifts the refusal while a commit file is stock's"
        assert store.read_manifest(tree)[0] is not None, "the refusal is lifted with no manifest"
        problems = [p for p in patcher.verify(tree)["problems"] if KILLED_TEMP_FILE not in p]
        assert problems == []  # (a SIGKILLed write leaves its temp file, which the rerun removes)
    for rel in (DFLASH_WORKER, DSPARK_WORKER):
        assert now[rel] in (pristine_files[rel], patched_bytes[rel])


def assert_rolled_back_or_complete(run, signum, verb: str, before: dict, after: dict, now: dict) -> None:
    """A SIGINT/SIGTERM run either rolled back to the exact bytes it started from (exit 2, one clear
    message, no traceback), or, signalled during its last step, completed and said so (exit 0)."""
    name = signal.Signals(signum).name
    assert "Traceback" not in run.stderr, run.stderr
    if run.returncode == 2:
        assert f"{verb} interrupted by {name}" in run.stderr and "every file is as it was" in run.stderr, run.stderr
        assert f"run `replayssm-overlay {verb}` again" in run.stderr
        assert now == before
    else:
        assert run.returncode == 0, run.stderr
        assert f"{name} arrived during the last step" in run.stdout and now == after, run.stdout


def stop_and_rerun(tree, target, point, signum, before, after, pristine_files, patched_bytes) -> bool:
    """Run `target` (the CLI's argv) stopped by `signum` at `point`, check what it left, then run it again
    to the end (it must succeed); whether the stopped run rolled back."""
    run = signalled(point, signum, *target)
    assert_invariant(tree, pristine_files, patched_bytes)
    if signum == signal.SIGKILL:
        assert run.returncode == -signal.SIGKILL, (point, run.stderr)
    else:
        assert_rolled_back_or_complete(run, signum, target[0], before, after, files_under(tree.parent))
    assert main(list(target)) == 0, point  # a rerun finishes the job exactly (its output: pytest's capture)
    return signum != signal.SIGKILL and run.returncode == 2


@pytest.mark.parametrize("signum", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_an_apply_stopped_anywhere_never_lifts_the_refusal_without_the_commit(
    sglang_tree, pristine_files, patched_bytes, signum, capsys
):
    site, target = sglang_tree.parent, ("apply", "--sglang-dir", str(sglang_tree))
    before = files_under(site)
    count = landing_calls(*target)
    after = files_under(site)
    assert main(["revert", "--sglang-dir", str(sglang_tree)]) == 0 and files_under(site) == before
    rolled_back = 0
    for point in every_point(count):
        rolled_back += stop_and_rerun(sglang_tree, target, point, signum, before, after, pristine_files, patched_bytes)
        assert {rel: (sglang_tree / rel).read_bytes() for rel in TARGET_FILES} == patched_bytes
        assert_invariant(sglang_tree, pristine_files, patched_bytes)
        capsys.readouterr()
        shutil.rmtree(store.state_dir(sglang_tree))  # back to the pristine tree for the next point
        for rel, data in pristine_files.items():
            (sglang_tree / rel).write_bytes(data)
        assert files_under(site) == before
    if signum != signal.SIGKILL:
        assert rolled_back == count - 1  # every point but the last write rolls back


@pytest.mark.parametrize("signum", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_a_revert_stopped_anywhere_never_lifts_the_refusal_without_the_commit(
    sglang_tree, pristine_files, patched_bytes, signum, capsys
):
    site, target = sglang_tree.parent, ("revert", "--sglang-dir", str(sglang_tree))
    pristine_site = files_under(site)
    assert main(["apply", "--sglang-dir", str(sglang_tree)]) == 0
    count = landing_calls(*target)
    assert files_under(site) == pristine_site
    rolled_back = 0
    for point in every_point(count):
        assert main(["apply", "--sglang-dir", str(sglang_tree)]) == 0
        before = files_under(site)
        rolled_back += stop_and_rerun(
            sglang_tree, target, point, signum, before, pristine_site, pristine_files, patched_bytes
        )
        assert files_under(site) == pristine_site
        capsys.readouterr()
    if signum != signal.SIGKILL:
        assert rolled_back == count - 2  # the last restore is the point of no return; the record goes after it


@pytest.mark.parametrize("patched", [(CONFIGURATOR,), (DFLASH_WORKER, DSPARK_WORKER), (CONFIGURATOR, DSPARK_WORKER)])
def test_status_and_verify_call_a_partial_tree_partial_and_name_the_repair(sglang_tree, patched_bytes, patched, capsys):
    for rel in patched:
        (sglang_tree / rel).write_bytes(patched_bytes[rel])
    target = ["--sglang-dir", str(sglang_tree)]
    unsafe = CONFIGURATOR in patched
    repair = [f"replayssm-overlay {verb} --sglang-dir {sglang_tree}" for verb in ("apply", "revert")]

    assert main(["status", "--json", *target]) == 1
    status = json.loads(capsys.readouterr().out)
    assert status["state"] == "mixed" and status["partial"]["patched"] == list(patched)
    assert status["partial"]["lifts_refusal_without_commit"] == unsafe and status["partial"]["repair"] == repair
    assert main(["status", *target]) == 1
    text = capsys.readouterr().out
    assert f"PARTIAL:  partially patched: {len(patched)} of 3 files" in text and f"`{repair[0]}`" in text
    assert ("DANGER" in text) == unsafe

    assert main(["verify", *target]) == 1
    out = capsys.readouterr().out
    assert out.startswith("FAILED:\n  - partially patched") and f"`{repair[1]}`" in out
    assert "the overlay is not applied here" not in out and "although" in out

    assert main(repair[0].split()[1:]) == 0 and main(["verify", *target]) == 0
    assert main(["status", *target]) == 0
    capsys.readouterr()
