"""The patcher's command line under bad conditions: every one ends in a message
that names the path and what to do (exit 2), never a traceback; unverified files are named in every
message; odd targets are reported as what they are. The trees are the real pristine 0.5.19 files."""

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from replayssm_overlay.cli import main
from replayssm_overlay.cliutil import sha256_bytes
from replayssm_overlay.patcher import store
from replayssm_overlay.patcher.releases import CONFIGURATOR, DFLASH_WORKER, DSPARK_WORKER, RELEASES

REPO = pathlib.Path(__file__).resolve().parents[2]
DROP_DAC = "-dac_override,-dac_read_search"


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_unprivileged(*argv) -> subprocess.CompletedProcess:
    """The CLI in a subprocess that file permissions bind: as root, without CAP_DAC_OVERRIDE and
    CAP_DAC_READ_SEARCH (setpriv), so a mode-000 file is really unreadable to it."""
    command = [sys.executable, "-m", "replayssm_overlay", *argv]
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root: needs setpriv (util-linux) to drop CAP_DAC_OVERRIDE")
        command = [setpriv, f"--inh-caps={DROP_DAC}", f"--bounding-set={DROP_DAC}", *command]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(str(REPO / sub) for sub in ("overlay", "smoke_tests", ".")))
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.parametrize("command", ["status", "apply", "verify"])
def test_an_unreadable_target_file_is_a_message_not_a_traceback(sglang_tree, command, snapshot):
    before = snapshot(sglang_tree)
    path = sglang_tree / DFLASH_WORKER
    path.chmod(0)
    try:
        done = run_unprivileged(command, "--sglang-dir", str(sglang_tree))
    finally:
        path.chmod(0o644)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert f"cannot read {DFLASH_WORKER}, {path}: Permission denied" in done.stderr
    assert "fix: run the command as a user who may read and write" in done.stderr
    assert snapshot(sglang_tree) == before and not store.state_dir(sglang_tree).exists()


@pytest.mark.parametrize("command", ["verify", "diff", "revert"])
def test_a_saved_pristine_copy_replaced_by_a_directory(sglang_tree, command, capsys, snapshot):
    assert run(capsys, "apply", "--sglang-dir", str(sglang_tree))[0] == 0
    copy = store.pristine_copy_path(sglang_tree, DFLASH_WORKER)
    copy.unlink()
    copy.mkdir()
    before = snapshot(sglang_tree)
    code, out, err = run(capsys, command, "--sglang-dir", str(sglang_tree))
    assert code == 2 and out == ""
    assert f"{copy} is a directory, where the saved pristine copy of {DFLASH_WORKER} should be a file" in err
    assert f"fix: move it away (mv {copy} {copy}.moved)" in err
    assert snapshot(sglang_tree) == before and copy.is_dir()


@pytest.mark.parametrize("command", ["revert", "apply", "verify", "diff"])
def test_the_state_folder_being_a_regular_file(sglang_tree, command, capsys, snapshot):
    record = store.state_dir(sglang_tree)
    record.write_text("not a folder\n")
    before = snapshot(sglang_tree)
    code, out, err = run(capsys, command, "--sglang-dir", str(sglang_tree))
    assert code == 2 and out == ""
    assert f"{record} is a file, not the folder where replayssm-overlay keeps its record" in err
    assert f"fix: move it away (mv {record} {record}.moved)" in err
    assert snapshot(sglang_tree) == before and record.read_text() == "not a folder\n"
    # status shows it instead of refusing
    code, out, _ = run(capsys, "status", "--json", "--sglang-dir", str(sglang_tree))
    assert code == 0 and "is a file, not the folder" in json.loads(out)["manifest_problem"]


def test_unverified_is_said_in_every_message(sglang_tree, capsys):
    path = sglang_tree / DFLASH_WORKER
    path.write_bytes(b"# a local change\n" + path.read_bytes())
    target = ("--sglang-dir", str(sglang_tree))

    def says_unverified(text):
        return "UNVERIFIED" in text and DFLASH_WORKER in text and "every file and hook point checks out" not in text

    code, out, _ = run(capsys, "apply", "--allow-unverified", "--dry-run", *target)
    assert code == 0 and says_unverified(out.splitlines()[0]), out
    code, out, _ = run(capsys, "apply", "--allow-unverified", *target)
    assert code == 0 and says_unverified(out.splitlines()[0]), out
    code, out, _ = run(capsys, "verify", "--allow-unverified", *target)
    assert code == 0 and out.startswith("OK: patched SGLang 0.5.19") and says_unverified(out), out
    code, out, _ = run(capsys, "status", *target)
    release_line = next(line for line in out.splitlines() if "release by hashes" in line)
    assert code == 0 and says_unverified(release_line), out
    code, out, _ = run(capsys, "status", "--json", *target)
    status = json.loads(out)
    assert status["unverified_files"] == [DFLASH_WORKER] and says_unverified(status["release_label"])
    # a verified tree says nothing of the kind
    code, out, _ = run(capsys, "revert", *target)
    path.write_bytes(path.read_bytes().replace(b"# a local change\n", b"", 1))
    code, out, _ = run(capsys, "apply", *target)
    assert code == 0 and "UNVERIFIED" not in out and "patched 3 file(s) of SGLang 0.5.19" in out


def test_a_target_replaced_by_a_directory_is_named_and_revert_restores_the_others(sglang_tree, capsys):
    target = ("--sglang-dir", str(sglang_tree))
    assert run(capsys, "apply", *target)[0] == 0
    blocked = sglang_tree / DSPARK_WORKER
    blocked.unlink()
    blocked.mkdir()

    code, out, _ = run(capsys, "status", "--json", *target)
    entry = json.loads(out)["files"][2]
    assert code == 0 and entry["detail"] == "a directory is where the file should be"
    code, _, err = run(capsys, "apply", *target)
    assert code == 2 and f"{DSPARK_WORKER}: a directory is where the file should be ({blocked})" in err
    assert "does not exist" not in err

    code, out, err = run(capsys, "revert", "--json", *target)
    result = json.loads(out)
    assert code == 1 and result["complete"] is False and not result["removed_state_dir"]
    assert [f["action"] for f in result["files"]] == [
        "restored",
        "restored",
        "left as is: a directory is where the file should be",
    ]
    for rel in (CONFIGURATOR, DFLASH_WORKER):
        assert sha256_bytes((sglang_tree / rel).read_bytes()) == RELEASES["0.5.19"][rel]
    assert blocked.is_dir() and store.pristine_copy_path(sglang_tree, DSPARK_WORKER).is_file()
    code, out, _ = run(capsys, "revert", *target)
    assert code == 1 and "NOT complete" in out and str(blocked) in out


def test_sglang_dir_empty_or_a_file_is_refused(sglang_tree, tmp_path, capsys):
    code, _, err = run(capsys, "status", "--sglang-dir", "")
    assert code == 2 and "--sglang-dir is empty" in err
    a_file = tmp_path / "sglang.txt"
    a_file.write_text("")
    for command in ("status", "apply", "revert"):
        code, _, err = run(capsys, command, "--sglang-dir", str(a_file))
        assert code == 2 and f"{a_file} is a file, not a directory" in err
    code, _, err = run(capsys, "status", "--sglang-dir", str(tmp_path / "nowhere"))
    assert code == 2 and "no such directory" in err


@pytest.mark.parametrize("argv", [("apply", "--dry-run"), ("apply",)], ids=["dry-run", "apply"])
@pytest.mark.parametrize("folder", ["the tree", "the record folder's"])
def test_a_folder_the_apply_must_write_refuses_the_dry_run_too(sglang_tree, snapshot, argv, folder):
    """A dry run checks what the apply will write: the target files' folders and the record folder's."""
    blocked = (sglang_tree / DFLASH_WORKER).parent if folder == "the tree" else sglang_tree.parent
    before = snapshot(sglang_tree)
    blocked.chmod(0o555)
    try:
        done = run_unprivileged(*argv, "--sglang-dir", str(sglang_tree))
    finally:
        blocked.chmod(0o755)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert f"{blocked}: this user may not write there" in done.stderr and "no file was changed" in done.stderr
    assert snapshot(sglang_tree) == before and not store.state_dir(sglang_tree).exists()


def test_a_revert_that_cannot_write_the_tree_refuses_before_writing(sglang_tree, capsys, snapshot):
    assert run(capsys, "apply", "--sglang-dir", str(sglang_tree))[0] == 0
    blocked = (sglang_tree / CONFIGURATOR).parent
    before = snapshot(sglang_tree)
    blocked.chmod(0o555)
    try:
        done = run_unprivileged("revert", "--sglang-dir", str(sglang_tree))
    finally:
        blocked.chmod(0o755)
    assert done.returncode == 2 and f"{blocked}: this user may not write there" in done.stderr, done.stderr
    assert snapshot(sglang_tree) == before and store.state_dir(sglang_tree).exists()
