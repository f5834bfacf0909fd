"""Where the patcher keeps its record, and how it writes files without ever leaving half a file.

The record lives NEXT TO the package, not inside it, so reinstalling SGLang does not silently drop it
and the package directory holds only SGLang's own files plus our marked lines:
`<site-packages>/sglang-replayssm-overlay/manifest.json` and `.../pristine/<relpath>` (exact copies of
the files as they were before the patch). Writes go through `replayssm_overlay.cliutil.atomic_write`
(temp file, fsync, os.replace, permissions kept).
"""

import json
import pathlib
import shutil

from replayssm_overlay.cliutil import atomic_write, atomic_write_json

STATE_DIR_NAME = "sglang-replayssm-overlay"
MANIFEST_SCHEMA = 1


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
    atomic_write_json(path, manifest)


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


def write_module(path: pathlib.Path, data: bytes) -> None:
    """Atomically replace module file `path`, then delete its cached bytecode, so Python compiles the
    bytes now on disk even where the cache is not checked against the source (pycs built with
    `--invalidation-mode unchecked-hash`)."""
    atomic_write(path, data)
    for cached in (path.parent / "__pycache__").glob(f"{path.stem}.*.pyc"):
        cached.unlink(missing_ok=True)

