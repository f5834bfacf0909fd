"""Stand-in SGLang base images for the image tests (no registry is reachable, so nothing can be pulled).

A stand-in is Debian bookworm (debootstrap, minbase + python3 + pip: Python 3.11, which the cp311 SGLang
wheels need) with the REAL SGLang wheel from PyPI installed `--no-deps` the way the released
`lmsysorg/sglang` image has it: the package under `/sgl-workspace/sglang/python/sglang` (an editable-style
install: a `.pth` puts `/sgl-workspace/sglang/python` on the path, the wheel's dist-info sits in
site-packages with a `direct_url.json` that says editable). It has no torch and no CUDA: enough for the
overlay's patcher and CLI, which never import SGLang. With `toolchain=True` it also has what the real
image has and the image's `kernels` stage needs: NVRTC, the real `nvidia-cuda-nvrtc` wheel from PyPI that
the image's CUDA 13 torch installs (unmodified, into site-packages), so `KERNELS=build` compiles the CUDA
commit kernel for sm_90 exactly as it does on the released image.

One `docker import` of one tarball (the debootstrap rootfs with the SGLang layout appended) with a
non-default ENTRYPOINT/CMD/WORKDIR/ENV (so a test can check that the overlay image keeps them).

Everything slow is cached under `<repo>/.cache/docker-standin/`, keyed by its inputs: the rootfs tarball
(debootstrap version, mirror, suite, packages), the downloaded wheels (by version) and the stand-in
tarball per SGLang release and toolchain choice. A rerun only imports the tarball (about 10 s; 20 s
with the toolchain).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

from tests.infra.dockerd import Dockerd, unmount_below

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache" / "docker-standin"
SUITE = "bookworm"
PACKAGES = ("python3", "python3-pip")
#: what the kernels stage needs besides Python: NVRTC, as torch 2.13.0+cu130 in lmsysorg/sglang:v0.5.19-cu130 pins it
NVRTC_VERSION = "13.0.88"
PYTHON_SITE = "usr/local/lib/python3.11/dist-packages"  # where Debian's python3 looks for pip-installed code
SGLANG_PROJECT = "sgl-workspace/sglang/python"  # the editable project dir of the released image
LAYOUT_MTIME = 1_700_000_000  # fixed, so the cached tarball does not depend on when it was made
#: the stand-in's runtime settings; the overlay image must carry exactly these
STANDIN_CONFIG = {
    "WorkingDir": "/sgl-workspace/sglang",
    "Entrypoint": ["/usr/bin/env"],
    "Cmd": ["python3", "-c", "print('stand-in sglang base')"],
    # PATH explicitly, as every real image has it (an image without one gets the builder's default added)
    "Env": {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "RSO_STANDIN": "1",
        "PYTHONUNBUFFERED": "1",
    },
}


def apt_mirror() -> str:
    """The Debian mirror this machine's apt uses for `bookworm main` (override: RSO_DEBIAN_MIRROR)."""
    if os.environ.get("RSO_DEBIAN_MIRROR"):
        return os.environ["RSO_DEBIAN_MIRROR"]
    sources = sorted(Path("/etc/apt").glob("sources.list.d/*.sources"))
    for path in sources:
        for stanza in path.read_text().split("\n\n"):
            fields = dict(re.findall(r"^(\w[\w-]*):\s*(.*)$", stanza, re.M))
            if SUITE in fields.get("Suites", "").split() and "main" in fields.get("Components", "").split():
                return fields["URIs"].split()[0]
    for path in [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt").glob("sources.list.d/*.list"))]:
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            words = re.sub(r"\[[^]]*\]", "", line).split()
            if len(words) >= 4 and words[0] == "deb" and words[2] == SUITE and "main" in words[3:]:
                return words[1]
    raise RuntimeError(f"no apt source for `{SUITE} main` in /etc/apt; set RSO_DEBIAN_MIRROR=URL")


def _key(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def _log(msg: str) -> None:
    print(f"[standin] {msg}", file=sys.stderr, flush=True)


def rootfs_tarball() -> Path:
    """The debootstrap rootfs as a tarball, built once per input set (about 40 s) and cached."""
    mirror, packages = apt_mirror(), PACKAGES
    version = subprocess.run(
        ["dpkg-query", "-W", "-f=${Version}", "debootstrap"], capture_output=True, text=True
    ).stdout.strip()
    tarball = CACHE / f"rootfs-{SUITE}-{_key(version, mirror, SUITE, packages, 'minbase')}.tar"
    if tarball.exists():
        return tarball
    CACHE.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="rootfs-", dir=CACHE))
    try:
        rootfs = work / "rootfs"
        _log(f"debootstrap {SUITE} from {mirror} (about 40 s, cached afterwards)")
        proc = subprocess.run(
            ["debootstrap", "--variant=minbase", f"--include={','.join(packages)}", SUITE, str(rootfs), mirror],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            raise RuntimeError(
                f"debootstrap {SUITE} from {mirror} failed (exit {proc.returncode}); needs root, "
                f"the debootstrap package and the mirror (RSO_DEBIAN_MIRROR):\n"
                + "\n".join((proc.stdout + proc.stderr).splitlines()[-15:])
            )
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for entry in (rootfs / junk).glob("*"):
                if entry.is_file():
                    entry.unlink()
        partial = work / "rootfs.tar"
        subprocess.run(["tar", "-C", str(rootfs), "--numeric-owner", "-cf", str(partial), "."], check=True)
        partial.rename(tarball)
    finally:
        unmount_below(work)  # debootstrap leaves /proc mounted when it fails half-way
        shutil.rmtree(work, ignore_errors=True)
    return tarball


def pypi_wheel(project: str, version: str) -> Path:
    """The real `project==version` wheel from PyPI for this machine's Python (`pip download --no-deps`),
    cached. The stand-in's Debian Python is 3.11, like the test environment's."""
    target = CACHE / "wheels" / (version if project == "sglang" else f"{project}-{version}")
    pattern = f"{project.replace('-', '_')}-{version}-*.whl"  # a wheel's file name spells the project with _
    found = sorted(target.glob(pattern))
    if found:
        return found[0]
    target.mkdir(parents=True, exist_ok=True)
    _log(f"pip download {project}=={version}")
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", f"{project}=={version}", "-d", str(target)],
        check=True,
    )
    return sorted(target.glob(pattern))[0]


def sglang_wheel(version: str) -> Path:
    return pypi_wheel("sglang", version)


def _installed(wheel: Path) -> dict[str, tuple[bytes, int]]:
    """The files `pip install --no-deps` puts into site-packages for `wheel`: path -> (bytes, mode)."""
    with tempfile.TemporaryDirectory(prefix="wheel-install-") as target:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "--no-deps",
                "--no-compile",
                "--disable-pip-version-check",
                "--target",
                target,
                str(wheel),
            ],
            check=True,
        )
        files = {}
        for path in sorted(Path(target).rglob("*")):
            rel = path.relative_to(target)
            if path.is_file() and not path.is_symlink() and rel.parts[0] != "bin":  # console scripts: unused
                files[f"{PYTHON_SITE}/{rel}"] = (path.read_bytes(), path.stat().st_mode & 0o777)
        return files


def _layout(wheel: Path) -> dict[str, bytes]:
    """The files of the SGLang `wheel` in the released image's layout (the module docstring): path -> bytes."""
    files = {}
    with zipfile.ZipFile(wheel) as zf:
        dist_info = next(n.split("/")[0] for n in zf.namelist() if n.split("/")[0].endswith(".dist-info"))
        for name in zf.namelist():
            top = name.split("/")[0]
            if name.endswith("/") or name.endswith("/RECORD"):
                continue
            if top == "sglang":
                files[f"{SGLANG_PROJECT}/{name}"] = zf.read(name)
            elif top == dist_info:
                files[f"{PYTHON_SITE}/{name}"] = zf.read(name)
    files[f"{PYTHON_SITE}/{dist_info}/direct_url.json"] = (
        json.dumps({"url": f"file:///{SGLANG_PROJECT}", "dir_info": {"editable": True}}) + "\n"
    ).encode()
    files[f"{PYTHON_SITE}/{dist_info}/INSTALLER"] = b"pip\n"
    files[f"{PYTHON_SITE}/__editable__.{dist_info.removesuffix('.dist-info')}.pth"] = f"/{SGLANG_PROJECT}\n".encode()
    return files


def standin_tarball(sglang_version: str, toolchain: bool = True) -> Path:
    """The rootfs tarball plus the SGLang layout (and, with `toolchain`, NVRTC in site-packages): one
    tarball, so `docker import` makes the image in one step (a build step per config line would copy the
    whole rootfs each time under `vfs`), cached."""
    rootfs = rootfs_tarball()
    wheel = sglang_wheel(sglang_version)
    nvrtc = pypi_wheel("nvidia-cuda-nvrtc", NVRTC_VERSION) if toolchain else None
    inputs = (rootfs.name, wheel.name, wheel.stat().st_size, nvrtc.name if nvrtc else None)
    tarball = CACHE / f"standin-sglang-{sglang_version}{'-toolchain' if toolchain else ''}-{_key(*inputs)}.tar"
    if tarball.exists():
        return tarball
    handle, name = tempfile.mkstemp(prefix=".standin-", suffix=".tar", dir=CACHE)
    os.close(handle)
    partial = Path(name)
    try:
        shutil.copyfile(rootfs, partial)
        files = {path: (data, 0o644) for path, data in _layout(wheel).items()}
        if nvrtc:
            files.update(_installed(nvrtc))
        dirs = sorted({str(Path(path).parents[i]) for path in files for i in range(len(Path(path).parents) - 1)})
        with tarfile.open(partial, "a") as tar:
            present = set(tar.getnames())  # the tar format allows duplicates; `docker import` does not
            for directory in (d for d in dirs if f"./{d}" not in present):
                info = tarfile.TarInfo(f"./{directory}")
                info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, LAYOUT_MTIME
                tar.addfile(info)
            for path, (data, mode) in sorted(files.items()):
                info = tarfile.TarInfo(f"./{path}")
                info.size, info.mode, info.mtime = len(data), mode, LAYOUT_MTIME
                tar.addfile(info, io.BytesIO(data))
        partial.chmod(0o644)
        partial.rename(tarball)
    finally:
        partial.unlink(missing_ok=True)
    return tarball


def build_standin(
    daemon: Dockerd, sglang_version: str = "0.5.19", tag: str | None = None, toolchain: bool = True
) -> str:
    """Import the stand-in base with the real `sglang==sglang_version` wheel (and the kernels toolchain);
    returns its image ID."""
    tag = tag or f"rso-standin-sglang:{sglang_version}"
    tarball = standin_tarball(sglang_version, toolchain)
    changes = [
        "ENV " + " ".join(f"{k}={v}" for k, v in STANDIN_CONFIG["Env"].items()),
        f"WORKDIR {STANDIN_CONFIG['WorkingDir']}",
        f"ENTRYPOINT {json.dumps(STANDIN_CONFIG['Entrypoint'])}",
        f"CMD {json.dumps(STANDIN_CONFIG['Cmd'])}",
    ]
    _log(f"docker import {tarball.name} as {tag}")
    daemon.docker(
        "import", *(arg for change in changes for arg in ("--change", change)), str(tarball), tag, timeout=600
    )
    return image_id(daemon, tag)


def derive(daemon: Dockerd, base: str, tag: str, files: dict[str, bytes]) -> str:
    """A small image FROM `base` with `files` (absolute path -> bytes) replaced; returns its image ID."""
    with tempfile.TemporaryDirectory(prefix="derive-ctx-") as ctx:
        for path, data in files.items():
            dest = Path(ctx) / "files" / path.lstrip("/")
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
        (Path(ctx) / "Dockerfile").write_text(f"FROM {base}\nCOPY files/ /\n")
        daemon.docker("build", "--network", "none", "-q", "-t", tag, ctx, timeout=600)
    return image_id(daemon, tag)


def image_id(daemon: Dockerd, ref: str) -> str:
    return daemon.docker("image", "inspect", "--format", "{{.Id}}", ref).stdout.strip()
