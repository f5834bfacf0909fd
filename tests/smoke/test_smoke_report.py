"""report.json is what report.py says it is: the CLI's JSON report has exactly `report.RUN_KEYS` (a run
that got to its verdict) or `report.ERROR_KEYS` (stopped by an environment error), in that order, and
smoke_tests/README.md documents every one of them."""

from __future__ import annotations

import json
import pathlib
import re
import socket

from replayssm_smoke import cli, report

README = pathlib.Path(__file__).resolve().parents[2] / "smoke_tests" / "README.md"


def _json_report(capsys, *argv: str) -> tuple[int, dict]:
    code = cli.main([*argv, "--json", "-q"])
    return code, json.loads(capsys.readouterr().out)


def test_a_finished_run_reports_the_run_keys(double, tmp_path, capsys):
    code, doc = _json_report(
        capsys,
        "--target",
        double(),
        "--reference",
        double(spec=False),
        "--classes",
        "code",
        "--max-new-tokens",
        "16",
        "--out",
        str(tmp_path),
    )
    assert code == 0 and tuple(doc) == report.RUN_KEYS
    assert doc["schema"] == report.SCHEMA and doc["passed"] is True and doc["reference"] is not None


def test_a_failed_run_reports_the_run_keys(double, tmp_path, capsys):
    code, doc = _json_report(
        capsys,
        "--target",
        double("--accept-length", "1.0"),
        "--classes",
        "code",
        "--max-new-tokens",
        "16",
        "--out",
        str(tmp_path),
    )
    assert code == 1 and tuple(doc) == report.RUN_KEYS and doc["exit_code"] == 1


def test_a_stopped_run_reports_the_error_keys(tmp_path, capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code, doc = _json_report(capsys, "--target", f"http://127.0.0.1:{port}", "--timeout", "2", "--out", str(tmp_path))
    assert code == 2 and tuple(doc) == report.ERROR_KEYS
    assert doc["passed"] is False and doc["gates"] == [] and "cannot reach" in doc["error"]["what"]


def _closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def test_an_unreachable_target_creates_no_report_folder(tmp_path, capsys):
    """A typo in the URL writes no ./smoke-report/ folder."""
    out = tmp_path / "smoke-report"
    code = cli.main(["--target", _closed_port_url(), "--timeout", "2", "--out", str(out), "-q"])
    assert code == 2 and not out.exists()
    captured = capsys.readouterr()
    assert "cannot reach" in captured.out and f"no report written: {out} does not exist" in captured.err


def test_an_unreachable_target_replaces_an_older_report_so_it_cannot_read_as_a_pass(tmp_path, capsys):
    (tmp_path / "report.json").write_text(json.dumps({"passed": True, "exit_code": 0}))
    code = cli.main(["--target", _closed_port_url(), "--timeout", "2", "--out", str(tmp_path), "-q"])
    capsys.readouterr()
    doc = json.loads((tmp_path / "report.json").read_text())
    assert code == 2 and doc["passed"] is False and "cannot reach" in doc["error"]["what"]


def test_the_readme_documents_every_key():
    block = README.read_text().split("## report.json", 1)[1].split("```", 2)[1]
    documented = set(re.findall(r"^([a-z_]+)", block, flags=re.M)) | set(re.findall(r"\b([a-z_]+):", block))
    documented |= set(block.split("\n", 2)[1].replace(",", " ").split())  # the envelope line
    assert set(report.RUN_KEYS) | set(report.ERROR_KEYS) <= documented
