"""What the patcher says to a person: an unsupported release in one line first, with the
hashes only on request; a folder that is not SGLang called that; UNVERIFIED said in text as in JSON; no
record folder promised where there is none; a negative --lock-timeout refused."""

import json
import re

import pytest

from replayssm_overlay.cli import main
from replayssm_overlay.patcher import store
from replayssm_overlay.patcher.releases import DSPARK_WORKER, MAMBA_POOL, RELEASES, TARGET_FILES

SUPPORTED = ", ".join(RELEASES)


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def tree_0518(sglang_tree, files_0518):
    """The real SGLang 0.5.18 target files, in a tree that declares 0.5.18."""
    for rel, data in files_0518.items():
        (sglang_tree / rel).write_bytes(data)
    (sglang_tree / "_version.py").write_text('__version__ = "0.5.18"\n')
    return sglang_tree


def test_an_unsupported_release_is_said_in_its_first_line_and_the_hashes_come_on_request(tree_0518, capsys):
    target = ("--sglang-dir", str(tree_0518))
    code, out, err = run(capsys, "apply", *target)
    assert code == 2 and out == ""
    first = f"replayssm-overlay apply: SGLang 0.5.18 is not supported; supported: {SUPPORTED}."
    assert err.splitlines()[0].startswith(first)
    assert "install one of the supported releases" in err and "-v or --json" in err
    assert "sglang==0.5.23" not in err and not re.search("[0-9a-f]{64}", err) and len(err) < 1200, err

    code, _, verbose = run(capsys, "apply", "-v", *target)
    assert code == 2 and verbose.startswith(err) and "detail:" in verbose
    assert "looks most like SGLang 0.5.19" in verbose and RELEASES["0.5.19"][TARGET_FILES[0]] in verbose

    code, out, _ = run(capsys, "apply", "--json", *target)
    refusal = json.loads(out)
    assert code == 2 and refusal["error"].startswith("SGLang 0.5.18 is not supported")
    assert any("looks most like" in line for line in refusal["detail"])
    assert not store.state_dir(tree_0518).exists()


def test_a_release_newer_than_the_table_is_told_to_wait_for_a_newer_overlay(tree_0518, capsys):
    (tree_0518 / "_version.py").write_text('__version__ = "0.5.30"\n')
    code, _, err = run(capsys, "apply", "--sglang-dir", str(tree_0518))
    assert code == 2 and err.splitlines()[0].endswith(
        f"SGLang 0.5.30 is not supported; supported: {SUPPORTED}. Its files match none of those releases, so no "
        f"file of {tree_0518} was changed"
    )
    assert "newer than this overlay knows" in err and "a newer overlay that supports it" in err


@pytest.mark.parametrize("command", ["apply", "revert"])
def test_a_folder_without_sglang_is_not_an_sglang_installation(tmp_path, command, capsys):
    code, out, err = run(capsys, command, "--sglang-dir", str(tmp_path))
    assert code == 2 and out == ""
    assert f"{tmp_path} is not an SGLang installation: none of the files the overlay patches is there" in err
    assert "looks most like" not in err and "0 of" not in err


def test_a_fingerprint_file_accepted_as_unverified_is_said_in_text_too(sglang_tree, capsys):
    (sglang_tree / MAMBA_POOL).write_bytes((sglang_tree / MAMBA_POOL).read_bytes() + b"# local hotfix\n")
    target = ("--sglang-dir", str(sglang_tree))
    code, out, _ = run(capsys, "apply", "--allow-unverified", *target)
    assert code == 0 and f"UNVERIFIED: {MAMBA_POOL}" in out.splitlines()[0], out
    code, out, _ = run(capsys, "verify", "--allow-unverified", *target)
    assert code == 0 and f"UNVERIFIED: {MAMBA_POOL}" in out, out
    code, out, _ = run(capsys, "status", *target)
    release_line = next(line for line in out.splitlines() if "release by hashes" in line)
    assert f"UNVERIFIED: {MAMBA_POOL}" in release_line, out


def test_revert_promises_no_record_folder_that_is_not_there(sglang_tree, capsys):
    blocked = sglang_tree / DSPARK_WORKER
    blocked.unlink()
    blocked.mkdir()
    code, out, _ = run(capsys, "revert", "--sglang-dir", str(sglang_tree))
    assert code == 1 and "NOT complete" in out and "is kept" not in out, out
    assert not store.state_dir(sglang_tree).exists()


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "soon"])
def test_a_lock_timeout_that_is_no_number_of_seconds_is_refused(sglang_tree, value, capsys):
    with pytest.raises(SystemExit) as done:
        main(["apply", "--sglang-dir", str(sglang_tree), "--lock-timeout", value])
    assert done.value.code == 2
    assert "--lock-timeout: must be a number of seconds, 0 or more" in capsys.readouterr().err
    assert not store.state_dir(sglang_tree).exists()


def test_a_tree_declaring_another_release_than_its_bytes_is_called_both(sglang_tree, capsys):
    (sglang_tree / "_version.py").write_text('__version__ = "0.5.20"\n')
    code, out, _ = run(capsys, "status", "--json", "--sglang-dir", str(sglang_tree))
    status = json.loads(out)
    assert code == 0 and status["release"] == "0.5.19" and status["declared_version"] == "0.5.20"
    both = "0.5.19 by its files' bytes (the installation declares 0.5.20)"
    assert status["release_label"] == both
    code, out, _ = run(capsys, "apply", "--dry-run", "--sglang-dir", str(sglang_tree))
    assert code == 0 and f"SGLang {both}" in out
