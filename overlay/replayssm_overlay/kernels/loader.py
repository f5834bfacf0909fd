"""The prebuilt CUDA commit kernel on the serving node: which folder, whether this node can use it, and the
kernel it holds, or every reason it cannot.

The folder comes from `RSO_KERNEL_DIR`, else `/opt/replayssm-overlay/kernels` (where the image puts it).
`check(folder, arch)` lists what stands between this node and the folder: its manifest (schema
`artifact_format.SCHEMA`), the GPU's compute capability (`torch.cuda.get_device_capability`), the sha256 of
every file, and a CUDA kernel built from the installed `gdn_fold.cu`.
`ArtifactSet.open()` refuses with all of them (`errors.NotCovered`: SGLang's fold commits); `cuda_kernels()` hands
out the cubin as a `cuda_fold.CudaKernels`, which the driver loads when the fold is chosen (`fold.py`: a
refusal there, too, makes the commit SGLang's, said once). Nothing here compiles anything.
"""

from __future__ import annotations

import os
from pathlib import Path

from replayssm_overlay.cliutil import sha256_file
from replayssm_overlay.errors import NotCovered
from replayssm_overlay.kernels import artifact_format as af

ENV_DIR = "RSO_KERNEL_DIR"
DEFAULT_DIR = Path("/opt/replayssm-overlay/kernels")
_REBUILD = "rebuild them on this node's image: replayssm-overlay kernels build --out DIR"


def artifact_dir(explicit: str | os.PathLike | None = None) -> Path:
    """The folder to use: the argument, else $RSO_KERNEL_DIR, else /opt/replayssm-overlay/kernels."""
    return Path(explicit or os.environ.get(ENV_DIR) or DEFAULT_DIR)


def gpu_arch() -> int | None:
    """The visible GPU's compute capability as one number (90 for sm_90); None without torch or a CUDA device."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    major, minor = torch.cuda.get_device_capability()
    return major * 10 + minor


def check(folder: Path, arch: int | None) -> tuple[dict | None, list[str]]:
    """(manifest or None, problems): every reason a node whose GPU is sm_`arch` (None: no GPU visible) cannot
    use the folder; none means it can."""
    folder = Path(folder)
    if not folder.is_dir():
        return None, [f"kernel artifact folder {folder} does not exist"]
    try:
        manifest = af.read_manifest(folder)
    except ValueError as err:
        return None, [str(err)]
    problems = []
    if arch is None:
        problems.append("no CUDA device is visible, so the GPU architecture cannot be checked")
    elif arch != af.TARGET_ARCH:
        problems.append(f"built for sm_{af.TARGET_ARCH}, this GPU is sm_{arch}")
    problems += _cuda_problems(manifest.get("cuda") or {}, folder)
    for rel, digest in sorted(manifest.get("files", {}).items()):
        path = folder / rel
        if not path.is_file():
            problems.append(f"file {rel} is missing")
        elif sha256_file(path) != digest:
            problems.append(f"file {rel} does not match its sha256 in the manifest (changed or corrupted)")
    return manifest, problems


def _cuda_problems(entry: dict, folder: Path) -> list[str]:
    """Why the folder's CUDA commit kernel is not built from the installed source (none: it is). Imports no
    torch or Triton: `kernels check` runs where neither is installed."""
    from replayssm_overlay.kernels import nvrtc

    if not entry.get("file"):
        return [f"no CUDA commit kernel in {folder}"]
    if entry.get("source_sha256") != sha256_file(nvrtc.SOURCE):
        return [f"the CUDA commit kernel in {folder} was built from another version of {nvrtc.SOURCE.name}"]
    return []


class ArtifactSet:
    """A checked artifact folder; hands out its CUDA commit kernel."""

    def __init__(self, folder: Path, manifest: dict):
        self.folder = Path(folder)
        self.manifest = manifest

    @classmethod
    def open(cls, folder: str | os.PathLike | None = None, arch: int | None = None) -> ArtifactSet:
        """The folder (`artifact_dir(folder)`) checked against sm_`arch` (default: the visible GPU's)."""
        folder = artifact_dir(folder)
        manifest, problems = check(folder, arch if arch is not None else gpu_arch())
        if problems:
            raise NotCovered(
                f"the prebuilt kernel in {folder} is refused: " + "; ".join(problems),
                f"SGLang's fold commits meanwhile; {_REBUILD}, or point {ENV_DIR} at a matching folder",
            )
        return cls(folder, manifest)

    def cuda_kernels(self):
        """The folder's CUDA commit kernel (`cuda_fold.CudaKernels`, loaded on first use)."""
        from replayssm_overlay.kernels import cuda_fold

        path = self.folder / self.manifest["cuda"]["file"]
        return cuda_fold.CudaKernels(path.read_bytes(), str(path))
