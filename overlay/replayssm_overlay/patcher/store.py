"""Where the patcher keeps its record, and how it writes files without ever leaving half a file.

The record lives NEXT TO the package, not inside it, so reinstalling SGLang does not silently drop it
and the package directory holds only SGLang's own files plus our marked lines:
`<site-packages>/sglang-replayssm-overlay/manifest.json` and `.../pristine/<relpath>` (exact copies of
the files as they were before the patch).
"""

import hashlib
import json
import os
import pathlib
import shutil
import tempfile

STATE_DIR_NAME = "sglang-replayssm-overlay"
MANIFEST_SCHEMA = 1


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def state_dir(sglang_dir: pathlib.Path) -> pathlib.Path:
    return sglang_dir.parent / STATE_DIR_NAME


def manifest_path(sglang_dir: pathlib.Path) -> pathlib.Path:
    return state_dir(sglang_dir) / "manifest.json"


def pristine_copy_path(sglang_dir: pathlib.Path, relpath: str) -> pathlib.Path:
    return state_dir(sglang_dir) / "pristine" / relpath


def read_manifest(sglang_dir: pathlib.Path):
    """(manifest dict or None, problem text or None): None/None when there is no manifest."""
    path = manifest_path(sglang_dir)
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError) as err:
        return None, f"{path} is unreadable ({err})"
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        return None, f"{path} is not a replayssm-overlay manifest"
    return manifest, None


def write_manifest(sglang_dir: pathlib.Path, manifest: dict) -> None:
    path = manifest_path(sglang_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode())


def read_pristine_copy(sglang_dir: pathlib.Path, relpath: str):
    try:
        return pristine_copy_path(sglang_dir, relpath).read_bytes()
    except FileNotFoundError:
        return None


def save_pristine_copy(sglang_dir: pathlib.Path, relpath: str, data: bytes) -> None:
    path = pristine_copy_path(sglang_dir, relpath)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, data)


def remove_state_dir(sglang_dir: pathlib.Path) -> bool:
    path = state_dir(sglang_dir)
    if not path.exists():
        return False
    shutil.rmtree(path)
    return True


def atomic_write(path: pathlib.Path, data: bytes) -> None:
    """Replace `path` with `data` in one step: a temp file in the same directory, fsync, os.replace.

    An existing file's permission bits (and, when we may, its owner) are kept; a reader sees either the
    old or the new content, never a mix. A symlink at `path` is replaced, never written through.
    """
    try:
        old = path.lstat()
    except FileNotFoundError:
        old = None
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".rso-tmp")
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


def write_module(path: pathlib.Path, data: bytes) -> None:
    """Atomically replace module file `path`, then delete its cached bytecode, so Python compiles the
    bytes now on disk even where the cache is not checked against the source (pycs built with
    `--invalidation-mode unchecked-hash`)."""
    atomic_write(path, data)
    for cached in (path.parent / "__pycache__").glob(f"{path.stem}.*.pyc"):
        cached.unlink(missing_ok=True)


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
