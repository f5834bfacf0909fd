"""The write phase of `apply` and `revert`: all or nothing, whatever stops it.

Why it exists: the three files are written one after another, so a run stopped in between leaves some
patched and some not. Two rules make every such stop safe:

* The order (`apply_order`, `revert_order`). The configurator's patch is what lifts SGLang's KDA-only
  refusal; the two commit files' patches are what make the commit work on GDN. `apply` writes the commit
  files first, then the manifest, and the configurator last; `revert` restores the configurator first.
  So no prefix of the writes lets a server accept DFLASH/DSPARK on GDN while a commit method is still
  stock's (which crashes at the first commit), and a SIGKILL anywhere leaves a tree that is safe to serve
  and that the next `apply` or `revert` finishes (`status` and `verify` call it partial and name both).
* The rollback (`run`). While the steps run, SIGINT and SIGTERM are noted, never acted on in the middle
  of a write; before each step the run looks, and if one came, or a step failed (OSError, or an
  `OverlayError` from the store), it puts back the bytes of every file it touched (a module with its
  modification time and cached bytecode), newest first, removes
  the record folder if it created it, and raises `OverlayError` saying what it did. The last step is the
  point of no return: a signal that arrives during it is reported (`run` returns its name) and the run completes;
  `then` (revert's removal of the record folder) runs after it with signals still held.
Signal handlers can only be set in the main thread; called from another thread, the run writes in the
same order and rolls back failed writes, and signals act as the program defines.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from dataclasses import dataclass, field

from replayssm_overlay.errors import OverlayError
from replayssm_overlay.patcher import store
from replayssm_overlay.patcher.releases import CONFIGURATOR

WATCHED = (signal.SIGINT, signal.SIGTERM)


def apply_order(relpaths) -> list:
    """The commit files first, the configurator (which lifts the refusal) last."""
    return sorted(relpaths, key=lambda rel: rel == CONFIGURATOR)


def revert_order(relpaths) -> list:
    """The configurator (which lifts the refusal) first, then the commit files."""
    return sorted(relpaths, key=lambda rel: rel != CONFIGURATOR)


@dataclass
class Step:
    """Write `data` to `path` (`module`: a Python module of SGLang's, whose cached bytecode goes too), then
    set its modification time to `mtime_ns` where given (a restored module's, so that its restored cached
    bytecode stays valid)."""

    label: str
    path: object
    data: bytes
    module: bool = False
    mtime_ns: int | None = None
    previous: bytes | None = field(default=None, repr=False)  # what was there before the step; None: nothing
    previous_bytecode: dict = field(default_factory=dict, repr=False)  # a module's cached bytecode before it
    previous_mtime_ns: int | None = field(default=None, repr=False)  # and its modification time


class Interrupted(OverlayError):
    """SIGINT or SIGTERM came while the steps ran (raised between two steps, never inside one); `run` turns
    it into the refusal that says what was rolled back."""

    code = "interrupted"

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.name = signal.Signals(signum).name


def run(verb: str, steps: list, *, sglang_dir, created_record: bool, then=None) -> str | None:
    """Do `steps` in order (all or nothing, as the module docstring says), then `then()` if given. Returns
    the name of a signal that came during the last step or `then` (not acted on), else None."""
    done = []
    with _held_signals() as received:
        try:
            for step in steps:
                if received:
                    raise Interrupted(received[0])
                step.previous = _read(step.path)
                if step.module and step.previous is not None:
                    step.previous_bytecode = {p: p.read_bytes() for p in store.cached_bytecode(step.path)}
                    step.previous_mtime_ns = step.path.stat().st_mtime_ns
                done.append(step)
                _write(step, step.data)
                if step.mtime_ns is not None:
                    os.utime(step.path, ns=(step.mtime_ns, step.mtime_ns))
        except (OSError, OverlayError) as err:
            undone = _roll_back(done, sglang_dir, created_record)
            raise _failure(verb, err, undone, len(done), len(steps)) from err
        if then is not None:
            then()
    return signal.Signals(received[0]).name if received else None


def _failure(verb: str, err, undone: list, reached: int, total: int) -> OverlayError:
    clean = all(not line.startswith("COULD NOT") for line in undone)
    back = ("every file is as it was before the run" if clean else "NOT everything could be put back") + (
        " (" + "; ".join(undone) + ")" if undone else ""
    )
    if isinstance(err, Interrupted):
        return OverlayError(
            f"{verb} interrupted by {err.name} after write {reached} of {total}; rolled back: {back}",
            f"run `replayssm-overlay {verb}` again to {verb}"
            + ("" if clean else "; it finishes the job from any state a stopped run leaves (or reinstall SGLang)"),
        )
    reason = err.what if isinstance(err, OverlayError) else str(err)
    return OverlayError(
        f"{verb} failed while writing ({reason}); rolled back: {back}",
        "fix the cause (disk space, permissions, read-only file system) and run the command again",
    )


def _roll_back(done: list, sglang_dir, created_record: bool) -> list:
    """Put back what each started step replaced, newest first; returns one line per file it touched."""
    outcomes = []
    for step in reversed(done):
        try:
            if _read(step.path) == step.previous:
                continue
            if step.previous is None:
                step.path.unlink(missing_ok=True)
            else:
                _write(step, step.previous)
            if step.previous_mtime_ns is not None:  # the module as it was: its time and the bytecode its write deleted
                os.utime(step.path, ns=(step.previous_mtime_ns, step.previous_mtime_ns))
            for cached, data in step.previous_bytecode.items():
                store.write_record_file(cached, data)
            if step.module or not created_record:  # (the record folder's removal below says the rest)
                outcomes.append(f"{'removed' if step.previous is None else 'restored'} {step.label}")
        except OSError as err:
            outcomes.append(f"COULD NOT restore {step.label} ({err}); reinstall SGLang")
    if created_record:
        try:
            if store.remove_state_dir(sglang_dir):
                outcomes.append(f"removed the record folder {store.state_dir(sglang_dir)}")
        except OverlayError as err:
            outcomes.append(f"COULD NOT remove the record folder it created ({err.what})")
    return outcomes


def _write(step: Step, data: bytes) -> None:
    (store.write_module if step.module else store.write_record_file)(step.path, data)


def _read(path):
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


@contextlib.contextmanager
def _held_signals():
    """Inside the block SIGINT and SIGTERM are appended to the yielded list instead of acted on (main
    thread only; elsewhere the list stays empty); the previous handlers come back after it."""
    received = []
    if threading.get_ident() != threading.main_thread().ident:  # only the main thread may set handlers
        yield received
        return
    previous = {signum: signal.getsignal(signum) for signum in WATCHED}
    for signum in WATCHED:
        signal.signal(signum, lambda number, _frame: received.append(number))
    try:
        yield received
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
