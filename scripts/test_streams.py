"""Run every test in four pytest processes at once (`make test`), each over its own share of the test files.

Why: one process leaves a core idle while a rollout module waits on its fleet (Ansible over SSH, Docker
daemons, health polls); several side by side keep both cores of the CI machine busy, so the suite takes about
its CPU time over two cores (32-36 minutes). Each process builds its own session fixtures (a fleet of three
nodes on its own random subnet and namespaces, its own Docker daemons), so the streams share nothing but the
machine.

The split is by file, decided here (`STREAMS`: the first stream whose prefix a file matches takes it, the
last takes the rest), and every test file lands in exactly one stream (tests/ci/test_test_streams.py), but
for the modules that run behind each router kind (`BY_KIND`, the longest of the suite): each kind's stream
runs them with `--router-kind` of its kind (tests/deploy/conftest.py), so every test still runs once.
While the streams run a line per minute says how far each has got and the free space where the tests write;
at the end each stream's output is printed whole (ending with its slowest tests), then a table (stream,
files, outcome, wall time), the time per test folder (from each stream's JUnit report) and the least free
space seen. Exit 0 when every stream passed, else 1.

    python3 scripts/test_streams.py [--list]     (--list: the files of each stream, nothing run)
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: stream name -> the path prefixes (relative to the repository) it takes, in order of precedence
STREAMS = {
    "behind smg": ("tests/deploy/test_router_kinds.py",),
    "behind sglang-router": (),
    "rollout": ("tests/deploy/",),
    "the rest": ("tests/",),
}
#: the modules whose tests run once per router kind (the `router_kind` fixture): stream -> the kind it runs them
#: behind (tests/deploy/router.py's KINDS, tests/ci/test_test_streams.py checks both lists)
BY_KIND = ("tests/deploy/test_router_rollout.py", "tests/deploy/test_bake_rollout.py")
KIND_STREAMS = {"behind smg": "smg", "behind sglang-router": "sglang-router"}
HEARTBEAT_S = 60
#: each stream's output ends with its slowest tests (pytest --durations), where the CI time goes
SLOWEST = 12
COLLECTED = re.compile(r"^collected (\d+) items", re.M)
# pytest's progress lines: a file's path, then a letter a test (a long file's letters go on over more lines)
OUTCOMES = re.compile(r"^(?:tests/\S+ )?([.FEsxX]+) *(?:\[ *\d+%\])?$", re.M)


def test_files(root: Path = ROOT) -> list[str]:
    """Every test file pytest collects by its default pattern, relative to `root`, sorted."""
    return sorted(str(p.relative_to(root)) for p in (root / "tests").rglob("test_*.py"))


def split(files: list[str]) -> dict[str, list[str]]:
    """stream -> its files: a file of BY_KIND goes to every stream of KIND_STREAMS, any other file to the first
    stream with a prefix it starts with."""
    out: dict[str, list[str]] = {name: [] for name in STREAMS}
    for path in files:
        if path in BY_KIND:
            for name in KIND_STREAMS:
                out[name].append(path)
            continue
        name = next((n for n, prefixes in STREAMS.items() if path.startswith(prefixes)), None)
        if name is None:
            raise SystemExit(f"test_streams: {path} is in no stream; add a prefix to STREAMS")
        out[name].append(path)
    return out


def kind_args(name: str) -> list[str]:
    """The pytest arguments that put stream `name` behind its router kind (none for a stream of no kind)."""
    return ["--router-kind", KIND_STREAMS[name]] if name in KIND_STREAMS else []


def _progress(log: Path) -> str:
    """How far a stream has got, from its output: "tests done/collected", or "starting"."""
    text = log.read_text(errors="replace") if log.exists() else ""
    collected = COLLECTED.search(text)
    if not collected:
        return "starting"
    return f"{sum(map(len, OUTCOMES.findall(text)))}/{collected.group(1)}"


def _free_gb() -> float:
    """Free space where the tests write (the fleets' Docker data, images, copies of SGLang), in GB: the
    run prints its low-water mark, so a run that failed for space says so."""
    return shutil.disk_usage(tempfile.gettempdir()).free / 1e9


def run(python: str, root: Path = ROOT) -> int:
    """Run the streams, print their output and the table; the logs folder is removed once printed."""
    with tempfile.TemporaryDirectory(prefix="test-streams-") as logs:
        return _run(python, root, Path(logs))


def _run(python: str, root: Path, logs: Path) -> int:
    streams = {name: files for name, files in split(test_files(root)).items() if files}
    procs, started, ended = {}, time.monotonic(), {}
    beat = started + HEARTBEAT_S
    for index, (name, files) in enumerate(streams.items()):
        log = logs / f"{index}.log"
        with log.open("wb") as out:
            procs[name] = (
                subprocess.Popen(
                    [python, "-m", "pytest", f"--durations={SLOWEST}", f"--junitxml={logs / f'{index}.xml'}"]
                    + kind_args(name)
                    + files,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    cwd=root,
                ),
                log,
            )
        print(f"test-streams: {name}: {len(files)} files, output in {log} while it runs", flush=True)
    least_free = _free_gb()
    while len(ended) < len(procs):
        time.sleep(1)
        free = _free_gb()
        least_free = min(least_free, free)
        for name, (proc, _) in procs.items():
            if name not in ended and proc.poll() is not None:
                ended[name] = time.monotonic() - started
                print(
                    f"test-streams: {name} ended (exit {proc.returncode}) after {ended[name] / 60:.1f} min", flush=True
                )
        if len(ended) < len(procs) and time.monotonic() >= beat:
            beat += HEARTBEAT_S
            running = ", ".join(f"{n} {_progress(log)}" for n, (p, log) in procs.items() if n not in ended)
            print(
                f"test-streams: {(time.monotonic() - started) / 60:.0f} min: {running}; "
                f"{free:.1f} GB free in {tempfile.gettempdir()}",
                flush=True,
            )
    rows = []
    for name, (proc, log) in procs.items():
        print(f"\n{'=' * 30} stream: {name} {'=' * 30}", flush=True)
        sys.stdout.write(log.read_text(errors="replace"))
        rc = proc.returncode
        outcome = "passed" if rc == 0 else ("no tests collected" if rc == 5 else f"FAILED (exit {rc})")
        rows.append((name, str(len(streams[name])), outcome, f"{ended[name] / 60:.1f} min"))
    print()
    print(columns([("STREAM", "FILES", "OUTCOME", "WALL"), *rows]))
    print()
    print(folder_table(folder_times(sorted(logs.glob("*.xml")))))
    print(f"test-streams: the least free space in {tempfile.gettempdir()} was {least_free:.1f} GB", flush=True)
    print(f"test-streams: all streams took {(time.monotonic() - started) / 60:.1f} min", flush=True)
    return 0 if all(proc.returncode == 0 for proc, _ in procs.values()) else 1


def folder_times(reports: list[Path]) -> dict[str, list]:
    """tests/<folder> -> [tests, seconds] from the streams' JUnit reports (a test's setup, call and teardown)."""
    out = defaultdict(lambda: [0, 0.0])
    for report in reports:
        try:
            cases = ET.parse(report).getroot().iter("testcase")
        except (OSError, ET.ParseError):  # a stream that died before writing its report
            continue
        for case in cases:
            parts = case.get("classname", "").split(".")
            folder = "/".join(parts[:2]) if len(parts) > 2 else "tests/*.py"
            out[folder][0] += 1
            out[folder][1] += float(case.get("time") or 0)
    return dict(out)


def folder_table(times: dict[str, list]) -> str:
    """The time per test folder, longest first: the sum of its tests' times within their stream (streams
    run side by side on shared cores, so a folder's time is not wall time saved by removing it)."""
    rows = [
        (folder, str(count), f"{seconds / 60:.1f}")
        for folder, (count, seconds) in sorted(times.items(), key=lambda item: -item[1][1])
    ]
    return columns([("FOLDER", "TESTS", "MINUTES"), *rows])


def columns(rows: list[tuple[str, ...]]) -> str:
    """`rows` (the first one the header) as left-aligned columns two spaces apart."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows)


def main(argv=None) -> int:
    summary = __doc__.partition("\n\n")[0]
    parser = argparse.ArgumentParser(description=summary)
    parser.add_argument("--list", action="store_true", help="print each stream's files and run nothing")
    args = parser.parse_args(argv)
    if args.list:
        for name, files in split(test_files()).items():
            print(f"{name}:" + (f" ({' '.join(kind_args(name))})" if name in KIND_STREAMS else ""))
            print("".join(f"  {path}\n" for path in files), end="")
        return 0
    return run(os.environ.get("PY", str(ROOT / ".venv" / "bin" / "python")))


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # `--list | head`: a closed stdout is a quiet end
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
