"""Where the patcher keeps its record, and how it writes files without ever leaving half a file.

The record lives NEXT TO the package, not inside it, so reinstalling SGLang does not silently drop it
and the package directory holds only SGLang's own files plus our marked lines:
`<site-packages>/sglang-replayssm-overlay/manifest.json` and `.../pristine/<relpath>` (exact copies of
the files as they were before the patch). Writes go through `replayssm_overlay.cliutil.atomic_write`
(temp file, fsync, os.replace, permissions kept); a run killed between the temp file and the rename
leaves the temp file, which `leftover_temp_files` finds and `remove_leftovers` deletes on the next run.
A record path that is not what it should be (the folder a regular file, a saved copy a directory, an
unreadable file) is a refusal that names the path, never a traceback.
"""

import json
import os
import pathlib
import shutil

from replayssm_overlay.cliutil import TEMP_SUFFIX, atomic_write, temp_files_of
from replayssm_overlay.errors import OverlayError, from_os_error

STATE_DIR_NAME = "sglang-replayssm-overlay"
MANIFEST_SCHEMA = 1


def state_dir(sglang_dir: pathlib.Path) -> pathlib.Path:
    return sglang_dir.parent / STATE_DIR_NAME


def manifest_path(sglang_dir: pathlib.Path) -> pathlib.Path:
    return state_dir(sglang_dir) / "manifest.json"


def pristine_copy_path(sglang_dir: pathlib.Path, relpath: str) -> pathlib.Path:
    return state_dir(sglang_dir) / "pristine" / relpath


def state_dir_problem(sglang_dir: pathlib.Path):
    """Why the record folder cannot be used (it exists but is not a folder), or None."""
    path = state_dir(sglang_dir)
    if path.is_dir() or not (path.exists() or path.is_symlink()):
        return None
    return f"{path} is a file, not the folder where replayssm-overlay keeps its record"


def check_state_dir(sglang_dir: pathlib.Path) -> None:
    """Refuse (naming the path and the fix) if the record folder exists but is not a folder."""
    problem = state_dir_problem(sglang_dir)
    if problem:
        raise OverlayError(
            problem,
            f"move it away (mv {state_dir(sglang_dir)} {state_dir(sglang_dir)}.moved), then run the command "
            "again; the patcher recognises patched files from their bytes and rewrites the record on apply",
        )


def read_manifest(sglang_dir: pathlib.Path):
    """(manifest dict or None, problem text or None): None/None when there is no manifest."""
    path = manifest_path(sglang_dir)
    problem = state_dir_problem(sglang_dir)
    if problem:
        return None, problem
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError) as err:
        return None, f"{path} is unreadable ({err})"
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        return None, f"{path} is not a replayssm-overlay manifest"
    return manifest, None


def manifest_bytes(manifest: dict) -> bytes:
    """The manifest as the record holds it (JSON, sorted keys, a final newline)."""
    return (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()


def saved_bytecode_path(sglang_dir: pathlib.Path, relpath: str, name: str) -> pathlib.Path:
    """Where the record keeps cached bytecode file `name` of `relpath` as it was before the patch."""
    return pristine_copy_path(sglang_dir, relpath).parent / "__pycache__" / name


def cached_bytecode(path: pathlib.Path) -> list:
    """The cached bytecode files of module `path` (`__pycache__/<stem>.*.pyc`, any interpreter)."""
    return sorted((path.parent / "__pycache__").glob(f"{path.stem}.*.pyc"))


def read_saved_bytecode(sglang_dir: pathlib.Path, relpath: str) -> dict:
    """{file name: bytes} of the cached bytecode of `relpath` that `apply` saved, or {}."""
    saved = cached_bytecode(pristine_copy_path(sglang_dir, relpath))
    try:
        return {path.name: path.read_bytes() for path in saved}
    except OSError as err:
        raise from_os_error(err, f"read the saved bytecode of {relpath},", err.filename) from err


def read_pristine_copy(sglang_dir: pathlib.Path, relpath: str):
    """The saved pristine bytes of `relpath`, None if none was saved; refuses a copy it cannot read."""
    path = pristine_copy_path(sglang_dir, relpath)
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except IsADirectoryError as err:
        raise OverlayError(
            f"{path} is a directory, where the saved pristine copy of {relpath} should be a file",
            f"move it away (mv {path} {path}.moved), then run the command again; revert can rebuild the "
            "pristine bytes from the patched file and checks them before writing",
        ) from err
    except OSError as err:
        raise from_os_error(err, f"read the saved pristine copy of {relpath},", path) from err


def write_record_file(path: pathlib.Path, data: bytes) -> None:
    """Atomically write a file of the record folder (the manifest, a pristine copy), making its folders."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, data)


def remove_state_dir(sglang_dir: pathlib.Path) -> bool:
    path = state_dir(sglang_dir)
    if not path.exists():
        return False
    try:
        shutil.rmtree(path)
    except OSError as err:
        raise from_os_error(err, "remove the record folder", err.filename or path) from err
    return True


def unwritable_folders(paths) -> list:
    """The folders that writing (or removing) each of `paths` changes -- its folder, or the nearest one that
    exists, where the write would create it -- which this process may not change (permissions, a read-only
    file system), each once, in order."""
    found = []
    for path in paths:
        folder = pathlib.Path(path).parent
        while not folder.exists() and folder != folder.parent:
            folder = folder.parent
        if folder not in found and not os.access(folder, os.W_OK | os.X_OK):
            found.append(folder)
    return found


def write_module(path: pathlib.Path, data: bytes) -> None:
    """Atomically replace module file `path`, then delete its cached bytecode, so Python compiles the
    bytes now on disk even where the cache is not checked against the source (pycs built with
    `--invalidation-mode unchecked-hash`)."""
    atomic_write(path, data)
    for cached in cached_bytecode(path):
        cached.unlink(missing_ok=True)


def leftover_temp_files(sglang_dir: pathlib.Path, relpaths) -> list:
    """Temp files a killed run of the patcher left: beside each target file, and anywhere in the record
    folder. Only names `atomic_write` makes are matched, so nothing of SGLang's is ever listed."""
    found = []
    for relpath in relpaths:
        found.extend(temp_files_of(sglang_dir / relpath))
    record = state_dir(sglang_dir)
    if record.is_dir():
        found.extend(p for p in sorted(record.rglob(f".*{TEMP_SUFFIX}")) if p.is_file() and not p.is_symlink())
    return found


def remove_leftovers(sglang_dir: pathlib.Path, relpaths) -> list:
    """Delete `leftover_temp_files`; returns the paths removed (as strings, for the report)."""
    removed = []
    for path in leftover_temp_files(sglang_dir, relpaths):
        try:
            path.unlink()
        except FileNotFoundError:
            continue
        except OSError as err:
            raise from_os_error(err, "remove the leftover temp file", path) from err
        removed.append(str(path))
    return removed
