"""`replayssm-overlay kernels build|check|status`: exit codes 0/1/2, --json, and the readable output."""

import json

import pytest

from replayssm_overlay.cli import main
from replayssm_overlay.kernels import loader
from tests.aot.aot_helpers import build_args, cli


def run_json(capsys, *argv) -> tuple[int, dict]:
    code = main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_check_passes_on_a_matching_node(built, capsys):
    code, report = run_json(capsys, "kernels", "check", str(built), "--arch", "90")
    assert code == 0 and report["ok"] is True and report["problems"] == [] and report["node"] == {"arch": 90}
    assert report["manifest"]["cuda"].startswith("built with NVRTC") and "sm_90" in report["manifest"]["cuda"]


def test_check_fails_with_reasons(built, tmp_path, capsys):
    code, report = run_json(capsys, "kernels", "check", str(built), "--arch", "80")
    assert code == 1 and report["problems"] == ["built for sm_90, this GPU is sm_80"]
    code, report = run_json(capsys, "kernels", "check", str(tmp_path / "none"), "--arch", "90")
    assert code == 1 and "does not exist" in report["problems"][0]
    assert main(["kernels", "check", str(built), "--arch", "80"]) == 1
    text = capsys.readouterr().out
    assert text.startswith(f"REFUSED: {built}") and "  - built for sm_90, this GPU is sm_80" in text


def test_check_without_gpu_or_arch_says_so(built, capsys):
    if loader.gpu_arch() is not None:
        pytest.skip("this machine has a GPU")
    code, report = run_json(capsys, "kernels", "check", str(built))
    assert code == 1 and report["problems"] == ["no CUDA device is visible, so the GPU architecture cannot be checked"]


def test_status_reports_the_folder_and_where_it_came_from(built, monkeypatch, capsys):
    monkeypatch.setenv(loader.ENV_DIR, str(built))
    code, status = run_json(capsys, "kernels", "status", "--arch", "90")
    assert code == 0 and status["folder_source"] == loader.ENV_DIR and status["usable"] is True
    monkeypatch.delenv(loader.ENV_DIR)
    code, status = run_json(capsys, "kernels", "status", "--arch", "90")
    assert code == 0 and status["folder"] == str(loader.DEFAULT_DIR) and status["folder_source"] == "default"
    assert status["usable"] is (not status["problems"])
    assert main(["kernels", "status", "--dir", str(built), "--arch", "90"]) == 0
    assert "usable:   yes" in capsys.readouterr().out


def test_build_refusals_exit_2_and_write_nothing(tmp_path, capsys):
    out = tmp_path / "missing-parent" / "out"
    code = main(["kernels", "build", "--out", str(out), "--json"])
    payload = json.loads(capsys.readouterr().out)
    assert code == 2 and payload["ok"] is False and "does not exist" in payload["error"] and payload["fix"]
    assert not out.parent.exists()


def test_runs_as_a_module_with_help_and_exit_codes(artifacts):
    helped = cli("kernels", "build", "--help")
    assert helped.returncode == 0 and "NVRTC" in helped.stdout and "sm_90" in helped.stdout
    bare = cli("kernels")
    assert bare.returncode == 2 and "build" in bare.stderr
    checked = cli("kernels", "check", str(artifacts), "--arch", "90")
    assert checked.returncode == 0 and checked.stdout.startswith("OK")
    again = cli(*build_args(artifacts))
    assert again.returncode == 0 and "nothing rebuilt" in again.stdout
