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
if all four match a process it can see; "dead" where the reader's namespace and boot are the record's and
no process with that PID and start time runs, or where the boot differs and the file was last written
before this node booted (`btime` in /proc/stat); "unknown" for a record of another PID namespace, one of
another boot written since this node booted (a container under its own kernel, e.g. a VM-isolated one,
has a boot of its own: a boot id alone proves nothing), or one without an identity (written by an older
overlay). Every write prunes the folder's dead records; unknown ones are kept, and so is every live one.
Reads change nothing.

Why records name their SGLang: the folder is node-wide, so it holds the records of every server on the
node, whichever SGLang tree each imported. Each record carries `sglang_dir`, the `sglang` package its
process imported, and `read(kind, sglang_dir=...)` tells each record's `scope`: "tree" (that tree's),
"node" (another tree's, or a record that does not say); `status` of a tree claims only what its tree's
live records say and lists the others as node-wide. Standard library only: `status` imports it without
torch or Triton.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path

from replayssm_overlay.cliutil import atomic_write_json
from replayssm_overlay.protocol import sglang_location

ENV_DIR = "RSO_STATE_DIR"
KINDS = ("selfcheck", "fallbacks")
ALIVE, DEAD, UNKNOWN = "alive", "dead", "unknown"
TREE, NODE = "tree", "node"  # a record's scope: the inspected SGLang tree's, or another process's on the node
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


def boot_time() -> int | None:
    """When this node booted (`btime` in /proc/stat, seconds since the epoch), or None."""
    for line in (_read(PROC / "stat") or "").splitlines():
        if line.startswith("btime "):
            return int(line.split()[1])
    return None


def identity(pid: int | None = None) -> dict:
    """What names this process (or `pid`, in this namespace) unambiguously on this node."""
    pid = os.getpid() if pid is None else pid
    return {"pid": pid, "start_ticks": start_ticks(pid), "pid_namespace": pid_namespace(), "boot_id": boot_id()}


def liveness(process: dict | None, written: float | None = None) -> tuple[str, str]:
    """(alive | dead | unknown, why) for a record's process identity, as this process can tell; `written`:
    when the record file was last written (seconds since the epoch), None where unknown."""
    if not isinstance(process, dict) or process.get("start_ticks") is None:
        return UNKNOWN, "the record names no process start time (written by an older overlay)"
    mine = identity(int(process["pid"]))
    if process.get("boot_id") != mine["boot_id"]:
        booted = boot_time()
        if written is not None and booted is not None and written < booted:
            return DEAD, "written before this node last booted"
        return UNKNOWN, (
            "written under another boot since this node booted (e.g. a container with a kernel of its own)"
        )
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


def imported_sglang_dir() -> str | None:
    """The `sglang` package directory this process imported (or would import), resolved, or None."""
    location = sglang_location()
    return str(location) if location else None


def write(kind: str, payload: dict, logger: logging.Logger) -> None:
    """This process's `kind` record (its identity under "process", its SGLang under "sglang_dir"), replaced
    whole, then the folder's dead records pruned; logs a warning instead of raising."""
    folder = record_dir()
    process = identity()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write_json(
            folder / _file_name(kind, process), {**payload, "process": process, "sglang_dir": imported_sglang_dir()}
        )
    except OSError as err:
        logger.warning("replayssm-overlay: could not write the %s record in %s: %s", kind, folder, err)
        return
    prune(folder, logger)


def prune(folder: Path, logger: logging.Logger) -> list:
    """Remove the records of every kind in `folder` whose process is dead (never a live or unknown one);
    returns the removed paths."""
    removed = []
    for path, record in _records(folder, "*"):
        if "problem" not in record and liveness(record.get("process"), _written(path))[0] == DEAD:
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


def _written(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def read(kind: str, folder: Path | None = None, sglang_dir: Path | str | None = None) -> list:
    """Every process's `kind` record in `folder` (default `record_dir()`), each with `pid`, `alive` (true
    only where this process can tell that the writer still runs), `liveness` (alive | dead | unknown,
    with `liveness_detail`), `scope` (TREE: written by a process that imported `sglang_dir`, or any record
    where `sglang_dir` is None; NODE: another tree's, or one that names none) and `path`; an unreadable
    file is listed with its `problem` (scope NODE)."""
    tree = None if sglang_dir is None else str(Path(sglang_dir).resolve())
    found = []
    for path, record in _records(folder or record_dir(), kind):
        scope = NODE
        if "problem" not in record:
            process = record.get("process")
            state, why = liveness(process, _written(path))
            pid = process.get("pid") if isinstance(process, dict) else record.get("pid")
            scope = TREE if tree is None or record.get("sglang_dir") == tree else NODE
            record = {**record, "pid": pid, "alive": state == ALIVE, "liveness": state, "liveness_detail": why}
        found.append({**record, "scope": scope, "path": str(path)})
    return found
