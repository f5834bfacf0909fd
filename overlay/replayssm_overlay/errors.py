"""The root of every exception the overlay raises on purpose, so callers can tell a refusal from a bug.

Every refusal says three things: what is wrong, what was expected, and what to do about it. The command
line prints `str(error)` and exits 2; SGLang's startup shows it as the reason the server did not start.
`from_os_error` turns a failed file operation (permissions, a folder where a file should be, a read-only
or full disk) into such a refusal, naming the path, so no command ends in a traceback for it.

The tree: `OverlayError` is the root (the patcher's `HookPointError` and `writes.Interrupted`, the AOT
build's `nvrtc.NvrtcMissing`, the smoke suite's `SmokeEnvironmentError` and the harness's `HarnessError`
are refusals of their own kind under it); `NotCovered` is the one "the overlay does not take this" case,
which is not a refusal to the user: SGLang's fold commits instead, and `fold.covered` is where it is
caught.

Every class carries a stable kebab-case `code` of its own (as pip's diagnostic errors do), which every
`--json` error prints beside `error` and `fix`, so a script can tell one refusal from another without
parsing the message; codes never change meaning once released and are unique across the repository
(`tests/structure/test_error_codes.py`).
"""

import errno


class OverlayError(Exception):
    """A clear, actionable refusal: `what` went wrong, `fix` says how to proceed, `detail` (lines) is the
    evidence a person rarely needs (hashes, per-file findings): the command line shows it with -v and in
    --json, not in `str(error)`."""

    code = "overlay-refused"

    def __init__(self, what: str, fix: str = "", detail=None):
        self.what = what
        self.fix = fix
        self.detail = list(detail or [])
        super().__init__(f"{what}\n  fix: {fix}" if fix else what)


class NotCovered(OverlayError):
    """The overlay's commit kernel does not take this call or pool: a shape, dtype, layout or alignment it
    does not reproduce bitwise, a prebuilt artifact folder this node refuses, or a CUDA driver call of its
    plan or launch that failed (and launched nothing). Raised before the state is touched; the caller
    commits with SGLang's fold instead (`fold.covered`, the one place that catches it)."""

    code = "not-covered"


class FileAccessRefused(OverlayError):
    """A file operation failed (permissions, a folder where a file belongs, a read-only or full disk)."""

    code = "file-access"


def from_os_error(err: OSError, doing: str, path=None) -> OverlayError:
    """A FileAccessRefused for `err`, raised while `doing` (e.g. "read", "write the saved pristine copy")
    `path` (default: the path the error names)."""
    path = path if path is not None else (err.filename if err.filename is not None else "the file")
    reason = err.strerror or str(err)
    fix = _FIXES.get(err.errno, "fix the cause and run the command again")
    return FileAccessRefused(f"cannot {doing} {path}: {reason}", fix.format(path=path))


_FIXES = {
    errno.EACCES: "run the command as a user who may read and write the SGLang installation (its owner, "
    "often root), or fix the permissions of {path}",
    errno.EPERM: "run the command as a user who may read and write the SGLang installation (its owner, "
    "often root), or fix the permissions of {path}",
    errno.EISDIR: "{path} is a directory where a file belongs; move it away, then run the command again",
    errno.ENOTDIR: "a part of {path} is a file where a folder belongs; move it away, then run the command again",
    errno.EROFS: "the file system holding {path} is read-only; run the command where it is writable "
    "(e.g. in the image build)",
    errno.ENOSPC: "free disk space on the file system holding {path}, then run the command again",
}
