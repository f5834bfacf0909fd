"""The test nodes' code cache (tests/deploy/node_python/sitecustomize.py) on the nodes' own interpreter: a
module imported from a zip runs the same with the cache as without it, a cached entry serves a zip at another
path (and tracebacks name that path), a changed source is compiled afresh, and an unreadable entry is
compiled again rather than failing the run."""

from __future__ import annotations

import os
import subprocess
import zipfile
from pathlib import Path

from tests.deploy.fleet import NODE_PYTHON
from tests.deploy.runner import COMMON_VARS

PYTHON = COMMON_VARS["ansible_python_interpreter"]
SOURCE = "VALUE = {value}\n\n\ndef fail():\n    raise ValueError('from the zip')\n"
PROGRAM = (
    "import sys; sys.path.insert(0, sys.argv[1]); import payload; print(payload.VALUE)\n"
    "try:\n    payload.fail()\nexcept ValueError as e:\n"
    "    print(e.__traceback__.tb_next.tb_frame.f_code.co_filename)\n"
)


def _zip(path: Path, value: int) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("payload.py", SOURCE.format(value=value))
    return path


def _run(zip_path: Path, cache: Path | None) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ANSIBALLZ_CODE_CACHE")}
    if cache is not None:
        env.update(PYTHONPATH=str(NODE_PYTHON), ANSIBALLZ_CODE_CACHE=str(cache))
    out = subprocess.run([PYTHON, "-c", PROGRAM, str(zip_path)], env=env, capture_output=True, text=True, check=True)
    return out.stdout.split()


def test_a_cached_entry_serves_a_zip_at_another_path_and_names_that_path(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    first = _zip(tmp_path / "first.zip", 1)
    assert _run(first, cache) == _run(first, None) == ["1", f"{first}/payload.py"]
    [entry] = cache.iterdir()
    written = entry.stat().st_mtime_ns

    second = _zip(tmp_path / "second.zip", 1)
    assert _run(second, cache) == ["1", f"{second}/payload.py"]
    assert [p.name for p in cache.iterdir()] == [entry.name]
    assert entry.stat().st_mtime_ns == written


def test_a_changed_source_is_compiled_afresh(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    assert _run(_zip(tmp_path / "a.zip", 1), cache)[0] == "1"
    assert _run(_zip(tmp_path / "b.zip", 2), cache)[0] == "2"
    assert len(list(cache.iterdir())) == 2


def test_an_unreadable_entry_is_compiled_again(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    payload = _zip(tmp_path / "a.zip", 3)
    _run(payload, cache)
    [entry] = cache.iterdir()
    entry.write_bytes(b"\xff not marshal data")
    assert _run(payload, cache)[0] == "3"
    assert entry.read_bytes() != b"\xff not marshal data"


def test_without_the_cache_folder_nothing_is_written(tmp_path):
    payload = _zip(tmp_path / "a.zip", 4)
    assert _run(payload, tmp_path / "absent")[0] == "4"
    assert not (tmp_path / "absent").exists()
