"""The `replayssm-overlay` command line: exit codes, --json, --help, and `python -m replayssm_overlay`."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

from replayssm_overlay import fold
from replayssm_overlay.cli import main
from replayssm_overlay.patcher.releases import DSPARK_WORKER, RELEASES

REPO = pathlib.Path(__file__).resolve().parents[2]
SUBCOMMANDS = ("apply", "verify", "revert", "diff", "status")


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys, *argv):
    code, out, err = run(capsys, *argv, "--json")
    return code, json.loads(out), err


def test_every_subcommand_has_help_and_json(capsys):
    for command in SUBCOMMANDS:
        with pytest.raises(SystemExit) as done:
            main([command, "--help"])
        assert done.value.code == 0
        out = capsys.readouterr().out
        assert "--json" in out and "--sglang-dir" in out and len(out.split("\n\n")[1]) > 40  # a real description
        assert ("files[]" in out) == (command == "status")  # status documents its JSON schema


def test_exit_codes_and_json_through_a_whole_cycle(sglang_tree, capsys):
    target = ("--sglang-dir", str(sglang_tree))
    code, status, _ = run_json(capsys, "status", *target)
    assert code == 0 and status["schema"] == 1 and status["state"] == "pristine"
    assert [f["state"] for f in status["files"]] == ["pristine"] * 3
    assert status["kernels"] == fold.describe() and status["kernels"]["fold"]  # composed by the CLI

    code, verdict, _ = run_json(capsys, "verify", *target)
    assert code == 1 and not verdict["ok"] and verdict["problems"]

    code, result, _ = run_json(capsys, "apply", *target, "--dry-run")
    assert code == 0 and result["dry_run"] and not result["changed"]
    code, result, _ = run_json(capsys, "apply", *target)
    assert code == 0 and result["changed"] and result["release"] == "0.5.19"
    code, result, _ = run_json(capsys, "apply", *target)
    assert code == 0 and not result["changed"]

    code, verdict, _ = run_json(capsys, "verify", *target)
    assert code == 0 and verdict["ok"] and verdict["problems"] == []
    code, status, _ = run_json(capsys, "status", *target)
    assert status["state"] == "patched" and status["manifest"]["release"] == "0.5.19"
    assert status["manifest"]["kernels"] == fold.describe()  # apply records the fold choice

    code, payload, _ = run_json(capsys, "diff", *target)
    code_text, text, _ = run(capsys, "diff", *target)
    assert code == code_text == 0 and payload["diff"] == text and text.count("+++ b/sglang/") == 3

    code, result, _ = run_json(capsys, "revert", *target)
    assert code == 0 and result["changed"]
    code, text, _ = run(capsys, "status", *target)
    assert code == 0 and "pristine" in text and "srt/mem_cache/kv_cache_configurator.py" in text


def test_refusal_exits_2_with_the_reason(sglang_tree, capsys):
    path = sglang_tree / DSPARK_WORKER
    path.write_bytes(path.read_bytes() + b"# local\n")
    code, out, err = run(capsys, "apply", "--sglang-dir", str(sglang_tree))
    assert code == 2 and out == ""
    assert DSPARK_WORKER in err and RELEASES["0.5.19"][DSPARK_WORKER] in err and "fix:" in err
    code, payload, _ = run_json(capsys, "apply", "--sglang-dir", str(sglang_tree))
    assert code == 2 and payload["ok"] is False and DSPARK_WORKER in payload["error"] and payload["fix"]


def test_usage_errors_exit_2(tmp_path, capsys):
    assert run(capsys, "status", "--sglang-dir", str(tmp_path / "nowhere"))[0] == 2
    assert run(capsys)[0] == 2
    with pytest.raises(SystemExit) as done:
        main(["frobnicate"])
    assert done.value.code == 2


def test_python_dash_m_runs_the_same_command(sglang_tree):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(str(REPO / sub) for sub in ("overlay", "smoke_tests", ".")))
    done = subprocess.run(
        [sys.executable, "-m", "replayssm_overlay", "status", "--json", "--sglang-dir", str(sglang_tree)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["state"] == "pristine"


def test_status_reports_the_self_check_another_process_ran(sglang_tree, tmp_path, capsys, monkeypatch):
    """A serving process writes its self-check record; `status --json` (this process) reads it back, as
    node-wide: that process imported another SGLang tree (the venv's) than the one inspected."""
    state = tmp_path / "rso-state"
    env = dict(os.environ, PYTHONPATH=str(REPO / "overlay"), RSO_STATE_DIR=str(state), RSO_FOLD="sglang")
    code = (
        "from replayssm_overlay import selfcheck; selfcheck.check_before_serving(selfcheck.Geometry("
        "num_v_heads=32, num_k_heads=16, head_v_dim=128, head_k_dim=128, window=16, "
        "state_dtype='float32', ring_dtype='bfloat16'))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    monkeypatch.setenv("RSO_STATE_DIR", str(state))
    _, status, _ = run_json(capsys, "status", "--sglang-dir", str(sglang_tree))
    (record,) = status["selfcheck"]
    assert record["outcome"] == "sglang-fold" and record["alive"] is False
    assert record["fold"]["fold"] == "sglang" and record["geometry"]["window"] == 16
    _, text, _ = run(capsys, "status", "--sglang-dir", str(sglang_tree))
    assert record["scope"] == "node" and record["sglang_dir"] != str(sglang_tree)
    assert f"node-wide, SGLang at {record['sglang_dir']}: pid {record['pid']} (exited): sglang-fold" in text


@pytest.mark.parametrize("argv", [("status",), ("status", "--json"), ("diff",), ("verify",)])
def test_a_reader_that_closed_stdout_ends_the_output_quietly_with_the_commands_exit_code(sglang_tree, capsys, argv):
    """`replayssm-overlay status | head -1`: the pipe's reader is gone before the command writes."""
    assert main(["apply", "--sglang-dir", str(sglang_tree)]) == 0
    capsys.readouterr()
    read_end, write_end = os.pipe()
    os.close(read_end)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(str(REPO / sub) for sub in ("overlay", "smoke_tests", ".")))
    try:
        done = subprocess.run(
            [sys.executable, "-m", "replayssm_overlay", *argv, "--sglang-dir", str(sglang_tree)],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (0, "")
