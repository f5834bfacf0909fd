"""Ahead-of-time build of the CUDA commit kernel for Hopper (sm_90), on a machine without a GPU.

A serving node must never compile the fold while it serves. So the image build compiles the CUDA commit
kernel (`kernels/gdn_fold.cu`) with NVRTC (`kernels/nvrtc.py`: a library, PyPI `nvidia-cuda-nvrtc`, which
every CUDA build of torch depends on) into one cubin, and writes it with a manifest
(`replayssm_overlay.kernels.artifact_format`) that the loader checks on the node. One cubin covers every
model, tensor-parallel size and window the kernel takes (its shapes are runtime arguments). No GPU, driver,
torch or Triton is needed.

Re-running with the same inputs (overlay version, kernel source, NVRTC version) rebuilds nothing; otherwise
the folder is built in a staging folder that replaces the old one at the end, so a failed build leaves the
old folder intact. Without NVRTC nothing is written: the build refuses and names the package to install.
"""

from __future__ import annotations

import datetime
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from replayssm_overlay import __version__ as OVERLAY_VERSION
from replayssm_overlay.cliutil import atomic_write_json, sha256_file
from replayssm_overlay.errors import OverlayError
from replayssm_overlay.kernels import artifact_format as af

CUDA_CUBIN = Path("cuda", "gdn_fold.cubin")


def build(out: Path, progress: Callable[[str], None] = print) -> dict:
    """Build (or find up to date) the artifact folder `out`; returns a summary for the CLI. NvrtcMissing (an
    OverlayError) before anything is written where this Python has no NVRTC."""
    from replayssm_overlay.kernels import nvrtc

    started = time.monotonic()
    out = Path(out).resolve()
    old = _existing(out)
    nvrtc_version = nvrtc.version()
    if old is not None and _up_to_date(old, out, nvrtc_version):
        progress(f"up to date: the CUDA commit kernel in {out} ({af.cuda_summary(old['cuda'])}), nothing rebuilt")
        return {"out": str(out), "up_to_date": True, "cuda": af.cuda_summary(old["cuda"])}
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.staging-", dir=out.parent))
    try:
        cuda = _build_cuda(staging, nvrtc_version, progress)
        atomic_write_json(staging / af.MANIFEST_NAME, _manifest(cuda, staging, time.monotonic() - started))
        _replace(out, staging)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    progress(f"wrote {out}: CUDA commit kernel {af.cuda_summary(cuda)}, {time.monotonic() - started:.1f} s")
    return {"out": str(out), "up_to_date": False, "cuda": af.cuda_summary(cuda)}


def _existing(out: Path) -> dict | None:
    """The old manifest, None for a new or empty folder or one of an older schema (the build replaces it);
    refuses to replace a folder that is not ours."""
    if not out.exists():
        if not out.parent.is_dir():
            raise OverlayError(f"{out.parent} does not exist", "create the parent folder or choose another --out")
        return None
    if not out.is_dir():
        raise OverlayError(f"{out} exists and is not a folder", "choose another --out")
    if not any(out.iterdir()):
        return None
    try:
        return af.read_manifest(out)
    except ValueError as err:
        if af.older_schema(out):
            return None
        raise OverlayError(
            f"{out} is not empty and is not a kernel artifact folder ({err}); the build would replace it",
            "choose a new or empty folder for --out, or remove this one yourself",
        ) from err


def _up_to_date(old: dict, out: Path, nvrtc_version: str) -> bool:
    from replayssm_overlay.kernels import nvrtc

    cuda, files = old.get("cuda") or {}, old.get("files", {})
    return (
        old.get("overlay_version") == OVERLAY_VERSION
        and cuda.get("source_sha256") == sha256_file(nvrtc.SOURCE)
        and cuda.get("nvrtc") == nvrtc_version
        and cuda.get("file") in files
        and all((out / rel).is_file() and sha256_file(out / rel) == digest for rel, digest in files.items())
    )


def _build_cuda(staging: Path, nvrtc_version: str, progress: Callable[[str], None]) -> dict:
    """The CUDA commit kernel compiled with NVRTC into `staging/cuda/`: its manifest entry."""
    from replayssm_overlay.kernels import nvrtc

    progress(f"compile the CUDA commit kernel ({nvrtc.SOURCE.name}) with NVRTC {nvrtc_version} for {nvrtc.ARCH}")
    cubin, report = nvrtc.build_fold()
    (staging / CUDA_CUBIN).parent.mkdir(parents=True, exist_ok=True)
    (staging / CUDA_CUBIN).write_bytes(cubin)
    return {"file": str(CUDA_CUBIN), "source_sha256": sha256_file(nvrtc.SOURCE), **report}


def _manifest(cuda: dict, staging: Path, seconds: float) -> dict:
    files = sorted(str(p.relative_to(staging)) for p in staging.rglob("*") if p.is_file())
    return {
        "schema": af.SCHEMA,
        "overlay_version": OVERLAY_VERSION,
        "built_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "build_seconds": round(seconds, 1),
        "builder": {"hostname": socket.gethostname()},
        "cuda": cuda,
        "files": {rel: sha256_file(staging / rel) for rel in files},
    }


def _replace(out: Path, staging: Path) -> None:
    """Swap the finished staging folder in; the old folder is removed only after the swap."""
    os.chmod(staging, 0o755)
    if not out.exists():
        os.rename(staging, out)
        return
    retired = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
    os.rename(out, retired / "old")
    os.rename(staging, out)
    shutil.rmtree(retired, ignore_errors=True)
