"""The small jobs that both command lines, the patcher and the AOT build do the same way, done once.

`replayssm-overlay` and `replayssm-smoke` share their exit codes and how they print JSON; the patcher,
the AOT build and the smoke report write files that a reader must see whole or not at all (and the
patcher finds the temp files a killed write left, `temp_files_of`); the patcher and the kernel loader
hash files; `replayssm-overlay`'s commands format `--help` the same way (`HelpFormatter`). Standard library only and
cheap to import: the node-side loader uses
`sha256_file` on the server's commit path, and the smoke suite imports this without torch or Triton.
(The stdlib-only host tools in `docker/tools/` and the in-image `docker/scripts/` keep their own.)
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import pathlib
import stat
import sys
import tempfile

EXIT_OK = 0
EXIT_CHECK_FAILED = 1  # a check or gate said no (`verify`, `kernels check`, a failed smoke gate)
EXIT_USAGE = 2  # usage error, environment error or refusal: nothing was changed

#: `atomic_write`'s temp files are `.<name>.<8 random characters>.rso-tmp` beside the file they replace;
#: a process killed between writing one and renaming it leaves it behind (`temp_files_of` finds them).
TEMP_SUFFIX = ".rso-tmp"


def print_json(payload, *, sort_keys: bool = True, indent: int | None = 2) -> None:
    """One JSON document on stdout (machines read it; progress and errors go to stderr)."""
    emit(json.dumps(payload, indent=indent, sort_keys=sort_keys) + "\n")


def emit_line(text: str) -> None:
    """`emit` one line."""
    emit(text + "\n")


def emit(text: str) -> None:
    """Write `text` to stdout; a reader that closed it (`| head -1`) ends the output quietly: the rest is
    dropped (stdout then points at the null device, so the exit flush cannot fail either) and the command
    goes on to its own exit code."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def atomic_write(path, data: bytes | str) -> None:
    """Replace `path` with `data` in one step: a temp file in the same directory, fsync, os.replace.

    An existing file's permission bits (and, when we may, its owner) are kept, a new file gets 0644; a
    reader sees either the old or the new content, never a mix. A symlink at `path` is replaced, never
    written through. On any failure the temp file is removed and `path` is as it was.
    """
    path = pathlib.Path(path)
    if isinstance(data, str):
        data = data.encode("utf-8")
    try:
        old = path.lstat()
    except FileNotFoundError:
        old = None
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TEMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if old is not None and not path.is_symlink():
            os.chmod(tmp, old.st_mode & 0o7777)
            if os.geteuid() == 0:
                os.chown(tmp, old.st_uid, old.st_gid)
        else:
            os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    _fsync_dir(path.parent)


def temp_files_of(path) -> list:
    """The temp files `atomic_write(path, ...)` runs that were killed left beside `path` (regular files
    only, sorted)."""
    path = pathlib.Path(path)
    pattern = f".{glob.escape(path.name)}.{'?' * 8}{TEMP_SUFFIX}"
    found = []
    for candidate in path.parent.glob(pattern):
        try:
            if stat.S_ISREG(candidate.lstat().st_mode):
                found.append(candidate)
        except FileNotFoundError:
            continue
    return sorted(found)


def atomic_write_json(path, payload, *, sort_keys: bool = True, indent: int | None = 2) -> None:
    """`atomic_write` of `payload` as JSON with a final newline."""
    atomic_write(path, json.dumps(payload, indent=indent, sort_keys=sort_keys) + "\n")


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path) -> str:
    """The sha256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """`--help` that teaches: descriptions and epilogs are wrapped paragraph by paragraph, but a paragraph
    with indented lines (examples, tables) is kept as written; an option's help ends in
    "(default: X)" unless it names its default itself or has none worth showing (a flag that is off, a
    required option, an option whose default is "not given")."""

    def _fill_text(self, text, width, indent):
        paragraphs = []
        for paragraph in text.strip("\n").split("\n\n"):
            lines = paragraph.splitlines()
            if any(line[:1].isspace() for line in lines):
                paragraphs.append("\n".join(indent + line for line in lines))
            else:
                paragraphs.append(super()._fill_text(paragraph, width, indent))
        return "\n\n".join(paragraphs)

    def _get_help_string(self, action):
        text = action.help or ""
        if "default" in text or action.required or action.default in (None, False, argparse.SUPPRESS):
            return text
        return super()._get_help_string(action)


def _fsync_dir(directory: pathlib.Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def pid_alive(pid: int) -> bool:
    """Whether process `pid` exists (one owned by another user counts): per-process records of dead
    processes are left out of `status`."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
