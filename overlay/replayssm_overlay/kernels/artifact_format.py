"""The manifest of a prebuilt kernel folder, and the facts of a Python/Triton/GPU it is checked against.

The build (`replayssm_overlay.aot.build`) writes it and the loader (`loader.py`) refuses a folder whose
manifest does not match the node; both need the same names, the same notion of "this Python" and the
same view of a recorded kernel signature (`launcher_source`), so they live here, on the node side: the
loader must not import the build. Imports nothing heavy: `kernels status` reads a manifest where Triton
may be absent, and the build's launcher-module child process imports this by file path. `summary` is
what `kernels check` and `kernels status` report of a manifest.

Layout of a folder (DIR):
    DIR/manifest.json
    DIR/kernels/<kernel>/<spec_id>/<kernel>.cubin         the sm_90 binary
    DIR/kernels/<kernel>/<spec_id>/<kernel>.json          Triton's metadata for it
    DIR/modules/<triton cache key>/<module><EXT_SUFFIX>   gcc-built launcher modules (cuda_utils,
                                                          and __triton_launcher on Triton 3.6)
where <kernel> is the `@triton.jit` function's name.

Manifest (schema `replayssm-overlay-kernels/1`): `schema`, `overlay_version`, `built_at` (UTC ISO),
`build_seconds`, `builder` (`triton`, `python`, `platform`, `hostname`), `target` (`backend`, `arch`,
`warp_size`), `kernels` (one entry per kernel: `name`, `module`, `source_key` (Triton's
`JITFunction.cache_key`), `arg_names`, `specializations[]` with `id`, `label`, `signature`, `constexprs`,
`attrs`, `options`, `files`), `modules[]` (`name`, `key`, `file`) and `files` (relative path -> sha256 of
every file above).
"""

from __future__ import annotations

import json
import platform
import sys
import types
from pathlib import Path

SCHEMA = "replayssm-overlay-kernels/1"
MANIFEST_NAME = "manifest.json"
TARGET_ARCH = 90  # Hopper (H100/H200): the only architecture the overlay ships binaries for
TARGET = {"backend": "cuda", "arch": TARGET_ARCH, "warp_size": 32}


def python_tag() -> str:
    """`cp312` for CPython 3.12: gcc-built modules and Triton's own binary are per Python minor version."""
    return f"{sys.implementation.name[:2]}{sys.version_info.major}{sys.version_info.minor}"


def platform_key() -> str:
    """The same string Triton mixes into its module keys (machine, OS, bits, binary format)."""
    return ",".join([platform.machine(), platform.system(), *platform.architecture()])


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


def launcher_source(arg_names: list, signature: dict, constexprs: dict) -> types.SimpleNamespace:
    """The part of a Triton `ASTSource` its launcher reads. The launcher takes the signature's values in
    order as the argument order, so the signature is rebuilt in `arg_names` order here (a manifest's
    JSON need not keep it); the build's launcher modules and the loader both use this function, so node
    and build agree."""
    return types.SimpleNamespace(
        fn=types.SimpleNamespace(arg_names=list(arg_names)),
        signature={name: signature[name] for name in arg_names},
        constants=dict(constexprs),
    )


def summary(manifest: dict) -> dict:
    """What `kernels check` and `kernels status` show of a manifest: who built it, for what, when, and
    how many specializations of each kernel."""
    return {"builder": manifest.get("builder"), "target": manifest.get("target"), "built_at": manifest.get("built_at"),
            "kernels": {k["name"]: len(k["specializations"]) for k in manifest.get("kernels", [])},
            "cuda": cuda_summary(manifest.get("cuda"))}


def cuda_summary(entry: dict | None) -> str:
    """One line on the folder's CUDA commit kernel (built with which NVRTC and registers, or why not)."""
    if not entry:
        return "none (built before the CUDA kernel existed)"
    if not entry.get("file"):
        return f"skipped: {entry.get('skipped', 'unknown reason')}"
    used = sorted({e["registers"] for e in (entry.get("ptxas") or {}).values() if e.get("registers")})
    if not used:
        registers = "registers per thread not reported by this NVRTC"
    else:
        registers = f"{used[0]}-{used[-1]}" if len(used) > 1 else f"{used[0]}"
        registers += " registers per thread"
    return f"built with NVRTC {entry.get('nvrtc')} for {entry.get('arch')}, {registers}"

