"""One patcher at a time per SGLang installation: an advisory lock on the `sglang` package directory.

Two `apply`s racing on one tree would both read the pristine files, both write, and both report
success. So `apply` and `revert` hold the lock exclusively, `verify` and `apply --dry-run` shared
(several checks may run together, never beside a writer). A second run waits up to a bounded time, then
refuses, naming the process that holds the lock.

The lock is `flock(2)` on the package directory itself, opened read-only, so there is no lock file: the
installation gains nothing, `revert` may remove the record folder while it holds the lock, and a
read-only installation can still be verified. The kernel drops the lock with its holder's last open
descriptor, so a killed run never leaves a stale lock behind. The holder's pid comes from
`/proc/locks`, where Linux shows it.
"""

import contextlib
import errno
import fcntl
import os
import pathlib
import time

from replayssm_overlay.errors import OverlayError, from_os_error

DEFAULT_TIMEOUT_S = 30.0
_POLL_S = 0.05


@contextlib.contextmanager
def held(sglang_dir, *, exclusive: bool, timeout_s: float = DEFAULT_TIMEOUT_S, command: str):
    """Hold the lock on `sglang_dir` for the block; `command` names the run in the refusal."""
    sglang_dir = pathlib.Path(sglang_dir)
    try:
        fd = os.open(sglang_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as err:
        raise from_os_error(err, "open (to lock)", sglang_dir) from err
    try:
        _acquire(fd, sglang_dir, exclusive, timeout_s, command)
        yield
    finally:
        os.close(fd)


def holder(sglang_dir) -> str:
    """Who holds a lock on `sglang_dir` ("pid N (command line)"), or "" if /proc/locks names nobody."""
    try:
        st = os.stat(sglang_dir)
        with open("/proc/locks") as locks:
            lines = locks.read().splitlines()
    except OSError:
        return ""
    for line in lines:
        fields = line.split()
        if "->" in fields or len(fields) < 6 or fields[1] != "FLOCK":
            continue  # a waiter, or a kind of lock this module does not take
        pid, where = fields[4], fields[5].split(":")
        try:
            identity = (int(where[0], 16), int(where[1], 16), int(where[2]))
        except (IndexError, ValueError):
            continue
        if identity == (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino):
            return f"pid {pid}" + (f" ({cmd})" if (cmd := _command_line(pid)) else "")
    return ""


def _acquire(fd: int, sglang_dir: pathlib.Path, exclusive: bool, timeout_s: float, command: str) -> None:
    mode = (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB
    deadline = time.monotonic() + max(timeout_s, 0.0)
    while True:
        try:
            fcntl.flock(fd, mode)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                break
            time.sleep(_POLL_S)
        except OSError as err:
            if err.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
                raise OverlayError(
                    f"cannot lock {sglang_dir}: {err.strerror} (the file system offers no flock locks)",
                    "run the patcher where the SGLang installation is on a local file system",
                ) from err
            raise from_os_error(err, "lock", sglang_dir) from err
    who = holder(sglang_dir) or "another process"
    raise OverlayError(
        f"{command}: another patcher run holds the lock on {sglang_dir}: {who}; waited {timeout_s:g} s, "
        "changed nothing",
        "let that run finish, then run the command again (or pass --lock-timeout SECONDS to wait longer); "
        "a killed run releases the lock by itself",
    )


def _command_line(pid: str) -> str:
    try:
        raw = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return " ".join(raw.replace(b"\0", b" ").decode("utf-8", "replace").split())[:120]
