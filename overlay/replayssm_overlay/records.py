"""Per-process JSON records on this node: what a serving process found out that `replayssm-overlay
status` (another process) reports.

Two kinds are written, both into one folder ($RSO_STATE_DIR, default <tmp>/replayssm-overlay), one file
per kind and process: "selfcheck" (the check before serving, `selfcheck.py`) and "fallbacks" (the shapes
whose commits ran SGLang's fold, `fold.py`). Writes are atomic and best effort (serving never depends on
its record: a failure is logged).

Why records carry more than a PID: containers that share this folder through a mount have PID
namespaces of their own, so the same PID names different processes there (a server is often PID 1 or
7 in every container), and a PID is reused after its process exits. So each record names its process
by its PID, its start time (`/proc/<pid>/stat`, clock ticks after boot), its PID namespace
(`/proc/self/ns/pid`) and the boot (`/proc/sys/kernel/random/boot_id`), in its content and its file
name (`<kind>-<namespace inode>-<pid>-<start ticks>.json`). A reader calls a record's process alive only
if all four match a process it can see; "dead" where the boot differs, or where the reader's namespace
is the record's and no process with that PID and start time runs; "unknown" for a record of another PID
namespace of the same boot (this process cannot see that process) or one without an identity (written
by an older overlay). Every write prunes the folder's dead records; unknown ones are kept, and so is
every live one. Reads change nothing. Standard library only: `status` imports it without torch or
Triton.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path

from replayssm_overlay.cliutil import atomic_write_json

ENV_DIR = "RSO_STATE_DIR"
KINDS = ("selfcheck", "fallbacks")
ALIVE, DEAD, UNKNOWN = "alive", "dead", "unknown"
PROC = Path("/proc")  # where the process facts are read (tests point it elsewhere)


def record_dir() -> Path:
    """$RSO_STATE_DIR, else <tmp>/replayssm-overlay."""
    return Path(os.environ.get(ENV_DIR) or Path(tempfile.gettempdir()) / "replayssm-overlay")


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def start_ticks(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat (the process's start, in clock ticks after boot), or None where there is
    no such process visible here."""
    stat = _read(PROC / str(pid) / "stat")
    if not stat:
        return None
    fields = stat.rpartition(")")[2].split()  # after the command name, which may hold spaces and ')'
    return int(fields[19]) if len(fields) > 19 else None


def pid_namespace() -> str | None:
    """This process's PID namespace, e.g. "pid:[4026531836]"."""
    try:
        return os.readlink(PROC / "self" / "ns" / "pid")
    except OSError:
        return None


def boot_id() -> str | None:
    return _read(PROC / "sys" / "kernel" / "random" / "boot_id")


def identity(pid: int | None = None) -> dict:
    """What names this process (or `pid`, in this namespace) unambiguously on this node."""
    pid = os.getpid() if pid is None else pid
    return {"pid": pid, "start_ticks": start_ticks(pid), "pid_namespace": pid_namespace(), "boot_id": boot_id()}


def liveness(process: dict | None) -> tuple[str, str]:
    """(alive | dead | unknown, why) for a record's process identity, as this process can tell."""
    if not isinstance(process, dict) or process.get("start_ticks") is None:
        return UNKNOWN, "the record names no process start time (written by an older overlay)"
    mine = identity(int(process["pid"]))
    if process.get("boot_id") != mine["boot_id"]:
        return DEAD, "written before this node last booted"
    if process.get("pid_namespace") != mine["pid_namespace"]:
        return UNKNOWN, f"written in another PID namespace ({process.get('pid_namespace')}), e.g. another container"
    if mine["start_ticks"] is None:
        return DEAD, "no process with that PID runs"
    if mine["start_ticks"] != process["start_ticks"]:
        return DEAD, "that PID now names another process"
    return ALIVE, "the process runs"


def _file_name(kind: str, process: dict) -> str:
    namespace = "".join(ch for ch in str(process["pid_namespace"] or "none") if ch.isdigit()) or "none"
    return f"{kind}-{namespace}-{process['pid']}-{process['start_ticks']}.json"


def write(kind: str, payload: dict, logger: logging.Logger) -> None:
    """This process's `kind` record (its identity under "process"), replaced whole, then the folder's dead
    records pruned; logs a warning instead of raising."""
    folder = record_dir()
    process = identity()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write_json(folder / _file_name(kind, process), {**payload, "process": process})
    except OSError as err:
        logger.warning("replayssm-overlay: could not write the %s record in %s: %s", kind, folder, err)
        return
    prune(folder, logger)


def prune(folder: Path, logger: logging.Logger) -> list:
    """Remove the records of every kind in `folder` whose process is dead (never a live or unknown one);
    returns the removed paths."""
    removed = []
    for path, record in _records(folder, "*"):
        if "problem" not in record and liveness(record.get("process"))[0] == DEAD:
            try:
                path.unlink()
                removed.append(path)
            except OSError as err:  # another writer pruned it first, or the folder is not ours to change
                logger.debug("replayssm-overlay: could not prune %s: %s", path, err)
    return removed


def _records(folder: Path, kind: str) -> list:
    """(path, record or {"problem": ...}) for each `kind` record file (kind "*": every kind) in `folder`."""
    kinds = KINDS if kind == "*" else (kind,)
    found = []
    for name in kinds:
        for path in sorted(folder.glob(f"{name}-*.json")) if folder.is_dir() else []:
            try:
                record = json.loads(path.read_text())
                if not isinstance(record, dict):
                    raise ValueError("not a JSON object")
            except (OSError, ValueError) as err:
                record = {"problem": f"unreadable record: {err}"}
            found.append((path, record))
    return found


def read(kind: str, folder: Path | None = None) -> list:
    """Every process's `kind` record in `folder` (default `record_dir()`), each with `pid`, `alive` (true
    only where this process can tell that the writer still runs), `liveness` (alive | dead | unknown,
    with `liveness_detail`) and `path`; an unreadable file is listed with its `problem`."""
    found = []
    for path, record in _records(folder or record_dir(), kind):
        if "problem" not in record:
            process = record.get("process")
            state, why = liveness(process)
            pid = process.get("pid") if isinstance(process, dict) else record.get("pid")
            record = {**record, "pid": pid, "alive": state == ALIVE, "liveness": state, "liveness_detail": why}
        found.append({**record, "path": str(path)})
    return found
