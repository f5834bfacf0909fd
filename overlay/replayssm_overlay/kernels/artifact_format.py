"""The manifest of a prebuilt kernel folder: its schema, how it is read, and what is shown of it.

The build (`replayssm_overlay.aot.build`) writes it and the loader (`loader.py`) refuses a folder whose
manifest does not match the node; both need the same names, so they live here, on the node side: the
loader must not import the build. Imports nothing heavy: `kernels status` reads a manifest on a machine
without torch or a GPU. `summary` is what `kernels check` and `kernels status` report of a manifest.

Layout of a folder (DIR):
    DIR/manifest.json
    DIR/cuda/gdn_fold.cubin     the CUDA commit kernel (`kernels/gdn_fold.cu`), compiled by NVRTC for sm_90

Manifest (schema `replayssm-overlay-kernels/2`): `schema`, `overlay_version`, `built_at` (UTC ISO),
`build_seconds`, `builder` (`hostname`), `cuda` (`file`, `source_sha256` of gdn_fold.cu, `nvrtc`, `arch`
("sm_90"), `ptxas` {entry point: registers, spill_bytes}) and `files` (relative path -> sha256 of every file
above). Schema 1 folders (made before the prebuilt Triton binaries were retired) also held those
binaries and Triton's launcher modules; the loader refuses them with the command that rebuilds the folder.
"""

from __future__ import annotations

import json
from pathlib import Path

SCHEMA = "replayssm-overlay-kernels/2"
MANIFEST_NAME = "manifest.json"
TARGET_ARCH = 90  # Hopper (H100/H200): the only architecture the overlay ships a binary for


def read_manifest(folder: Path) -> dict:
    """The parsed manifest; raises ValueError with a one-line reason if it is missing or not ours."""
    path = Path(folder) / MANIFEST_NAME
    if not path.is_file():
        raise ValueError(f"no {MANIFEST_NAME} in {folder}")
    try:
        manifest = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"{path} is not readable JSON ({err})") from err
    if not isinstance(manifest, dict) or manifest.get("schema") != SCHEMA:
        found = manifest.get("schema") if isinstance(manifest, dict) else type(manifest).__name__
        raise ValueError(f"{path} has schema {found!r}, expected {SCHEMA!r}")
    return manifest


def older_schema(folder: Path) -> bool:
    """Whether the folder holds a manifest of an earlier schema of ours (a build replaces such a folder)."""
    try:
        schema = json.loads((Path(folder) / MANIFEST_NAME).read_text()).get("schema")
    except (OSError, ValueError, AttributeError):
        return False
    family = SCHEMA.rpartition("/")[0]
    return isinstance(schema, str) and schema != SCHEMA and schema.startswith(family + "/")


def summary(manifest: dict) -> dict:
    """What `kernels check` and `kernels status` show of a manifest: who built it, when, and the kernel."""
    return {
        "builder": manifest.get("builder"),
        "built_at": manifest.get("built_at"),
        "overlay_version": manifest.get("overlay_version"),
        "cuda": cuda_summary(manifest.get("cuda")),
    }


def cuda_summary(entry: dict | None) -> str:
    """One line on the folder's CUDA commit kernel (built with which NVRTC and registers)."""
    if not entry or not entry.get("file"):
        return "none"
    used = sorted({e["registers"] for e in (entry.get("ptxas") or {}).values() if e.get("registers")})
    if not used:
        registers = "registers per thread not reported by this NVRTC"
    else:
        registers = f"{used[0]}-{used[-1]}" if len(used) > 1 else f"{used[0]}"
        registers += " registers per thread"
    return f"built with NVRTC {entry.get('nvrtc')} for {entry.get('arch')}, {registers}"
