"""`make test` runs the suite in streams split by file (scripts/test_streams.py): every test file must run in
exactly one stream (a module of BY_KIND in one stream per router kind, each behind its kind), and a stream's
named file that is renamed or removed must not silently move its tests elsewhere (every prefix still takes a
file). The control shows the split refuses a file no stream takes, and a run over a small tree shows a failing
stream fails the whole run and is named in the table, and each kind's stream runs with its `--router-kind`."""

import importlib.util
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

import pytest

from tests.deploy.router import KINDS

ROOT = pathlib.Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location("test_streams", ROOT / "scripts" / "test_streams.py")
streams = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(streams)


def test_every_test_file_runs_in_exactly_one_stream_and_a_by_kind_module_once_per_kind():
    files = streams.test_files()
    split = streams.split(files)
    taken = [path for paths in split.values() for path in paths if path not in streams.BY_KIND]
    assert sorted(taken) == sorted(set(files) - set(streams.BY_KIND)) and len(set(taken)) == len(taken)
    assert len(files) > 50 and all(split.values())
    # each module run by kind exists, uses the router_kind fixture, and runs in one stream per kind
    assert set(streams.KIND_STREAMS.values()) == set(KINDS) and len(streams.KIND_STREAMS) == len(KINDS)
    for path in streams.BY_KIND:
        assert path in files and re.search(r"def \w+\(router_kind\b", (ROOT / path).read_text()), path
        assert [name for name, paths in split.items() if path in paths] == list(streams.KIND_STREAMS)


def test_every_prefix_of_a_stream_takes_a_file():
    files = streams.test_files()
    split = streams.split(files)
    for name, prefixes in streams.STREAMS.items():
        for prefix in prefixes:
            assert any(path.startswith(prefix) for path in split[name]), f"{name}: {prefix} takes no file"


def test_a_file_no_stream_takes_is_refused(monkeypatch):
    monkeypatch.setattr(streams, "STREAMS", {"deploy": ("tests/deploy/",)})
    with pytest.raises(SystemExit, match="tests/kernels/test_x.py is in no stream"):
        streams.split(["tests/deploy/test_a.py", "tests/kernels/test_x.py"])


def test_a_failing_stream_fails_the_run_and_the_table_names_it(tmp_path, monkeypatch, capsys):
    for folder, body in (("a", "assert True"), ("b", "assert False")):
        (tmp_path / "tests" / folder).mkdir(parents=True)
        (tmp_path / "tests" / folder / "test_one.py").write_text(f"def test_one():\n    {body}\n")
    monkeypatch.setattr(streams, "STREAMS", {"first": ("tests/a/",), "second": ("tests/",)})
    assert streams.run(sys.executable, tmp_path) == 1
    out = capsys.readouterr().out
    table = out.split("STREAM")[-1]
    assert "def test_one():" in out and "assert False" in out  # each stream's output, printed whole
    logs = {
        pathlib.Path(line.split("output in ")[1].split()[0]).parent for line in out.splitlines() if "output in" in line
    }
    assert len(logs) == 1 and not logs.pop().exists()  # and its folder removed
    assert "first   1      passed" in table and "second  1      FAILED (exit 1)" in table
    # the time per test folder, from each stream's JUnit report
    folders = out.split("FOLDER")[-1].splitlines()
    assert folders[0].split() == ["TESTS", "MINUTES"]
    assert sorted(line.split()[:2] for line in folders[1:3]) == [["tests/a", "1"], ["tests/b", "1"]]
    # the low-water mark of the free space where the tests write
    least = re.search(r"the least free space in (\S+) was ([0-9.]+) GB", out)
    assert least and least[1] == tempfile.gettempdir()
    assert 0 < float(least[2]) <= shutil.disk_usage(least[1]).free / 1e9 + 1


def test_each_kind_stream_runs_the_by_kind_modules_behind_its_kind(tmp_path, monkeypatch, capsys):
    (tmp_path / "tests" / "k").mkdir(parents=True)
    (tmp_path / "tests" / "conftest.py").write_text(
        "def pytest_addoption(parser):\n    parser.addoption('--router-kind', default='both')\n"
        "def pytest_report_header(config):\n    return 'router kind: ' + config.getoption('--router-kind')\n"
    )
    (tmp_path / "tests" / "k" / "test_routed.py").write_text("def test_one():\n    assert True\n")
    (tmp_path / "tests" / "k" / "test_plain.py").write_text("def test_one():\n    assert True\n")
    monkeypatch.setattr(streams, "STREAMS", {"first": (), "second": (), "rest": ("tests/",)})
    monkeypatch.setattr(streams, "BY_KIND", ("tests/k/test_routed.py",))
    monkeypatch.setattr(streams, "KIND_STREAMS", {"first": "smg", "second": "sglang-router"})
    assert streams.run(sys.executable, tmp_path) == 0
    out = capsys.readouterr().out
    outputs = {block.split(" =")[0]: block for block in out.split("= stream: ")[1:]}
    assert "router kind: smg" in outputs["first"] and "test_routed.py ." in outputs["first"]
    assert "router kind: sglang-router" in outputs["second"] and "test_routed.py ." in outputs["second"]
    assert "router kind: both" in outputs["rest"] and "test_routed.py" not in outputs["rest"]


def test_progress_counts_the_tests_done_over_wrapped_lines(tmp_path):
    log = tmp_path / "stream.log"
    assert streams._progress(log) == "starting"
    log.write_text("collected 90 items\n\ntests/a/test_one.py ..s.F [  5%]\n......x  [ 10%]\ntests/b/test_two.py ..")
    assert streams._progress(log) == "14/90"


def _collect(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", *streams.BY_KIND, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_router_kind_collects_the_by_kind_modules_behind_that_kind_only():
    ids = {kind: _collect("--router-kind", kind).stdout.splitlines() for kind in KINDS}
    both = [line for line in _collect().stdout.splitlines() if "::" in line]
    for kind, lines in ids.items():
        tests = [line for line in lines if "::" in line]
        assert tests and all(f"[{kind}" in line for line in tests), lines[-5:]
        assert {path.split("::")[0] for path in tests} == set(streams.BY_KIND)
    assert sorted(both) == sorted(line for lines in ids.values() for line in lines if "::" in line)


def test_an_unknown_router_kind_is_a_usage_error_naming_the_kinds():
    run = _collect("--router-kind", "nginx")
    assert run.returncode == 4, run.stdout[-2000:] + run.stderr[-2000:]
    assert f"--router-kind nginx: not a router kind; use one of {', '.join(KINDS)} or both" in run.stderr + run.stdout
