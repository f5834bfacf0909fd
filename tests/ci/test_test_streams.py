"""`make test` runs the suite in streams split by file (scripts/test_streams.py): every test file must run in
exactly one stream, and a stream's named file that is renamed or removed must not silently move its tests
elsewhere (every prefix still takes a file). The control shows the split refuses a file no stream takes, and
a run over a small tree shows a failing stream fails the whole run and is named in the table."""

import importlib.util
import pathlib
import re
import shutil
import sys
import tempfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location("test_streams", ROOT / "scripts" / "test_streams.py")
streams = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(streams)


def test_every_test_file_runs_in_exactly_one_stream():
    files = streams.test_files()
    split = streams.split(files)
    taken = [path for paths in split.values() for path in paths]
    assert sorted(taken) == files and len(set(taken)) == len(taken)
    assert len(files) > 50 and all(split.values())


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


def test_progress_counts_the_tests_done_over_wrapped_lines(tmp_path):
    log = tmp_path / "stream.log"
    assert streams._progress(log) == "starting"
    log.write_text("collected 90 items\n\ntests/a/test_one.py ..s.F [  5%]\n......x  [ 10%]\ntests/b/test_two.py ..")
    assert streams._progress(log) == "14/90"
