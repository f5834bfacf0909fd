"""Per-process JSON records on this node: what a serving process found out that `replayssm-overlay
status` (another process) reports.

Two kinds are written, both into one folder ($RSO_STATE_DIR, default <tmp>/replayssm-overlay), one file
per kind and process: `selfcheck-<pid>.json` (the check before serving, `selfcheck.py`) and
`fallbacks-<pid>.json` (the shapes whose commits ran SGLang's fold, `fold.py`). Writes are atomic and
best effort (serving never depends on its record: a failure is logged); reads mark whether the writing
process still runs. Standard library only: `status` imports it without torch or Triton.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path

from replayssm_overlay.cliutil import atomic_write_json, pid_alive

ENV_DIR = "RSO_STATE_DIR"


def record_dir() -> Path:
    """$RSO_STATE_DIR, else <tmp>/replayssm-overlay."""
    return Path(os.environ.get(ENV_DIR) or Path(tempfile.gettempdir()) / "replayssm-overlay")


def write(kind: str, payload: dict, logger: logging.Logger) -> None:
    """<record_dir>/<kind>-<this pid>.json, replaced whole; logs a warning instead of raising."""
    folder = record_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write_json(folder / f"{kind}-{os.getpid()}.json", payload)
    except OSError as err:
        logger.warning("replayssm-overlay: could not write the %s record in %s: %s", kind, folder, err)


def read(kind: str, folder: Path | None = None) -> list:
    """Every process's `kind` record in `folder` (default `record_dir()`), each with `pid`, `alive`
    (whether that process still runs) and `path`; an unreadable file is listed with its `problem`."""
    folder = folder or record_dir()
    found = []
    for path in sorted(folder.glob(f"{kind}-*.json")) if folder.is_dir() else []:
        try:
            record = json.loads(path.read_text())
            if not isinstance(record, dict):
                raise ValueError("not a JSON object")
            pid = int(path.stem.removeprefix(f"{kind}-"))
            record = {**record, "pid": pid, "alive": pid_alive(pid)}
        except (OSError, ValueError) as err:
            record = {"problem": f"unreadable record: {err}"}
        found.append({**record, "path": str(path)})
    return found
