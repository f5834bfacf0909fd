"""Compile the CUDA commit kernel (`gdn_fold.cu`) to an sm_90 cubin with NVRTC, on any machine.

Why NVRTC: it is a library (PyPI `nvidia-cuda-nvrtc`, which every CUDA build of torch depends on, so the
SGLang image has it), it needs neither a GPU nor a host compiler, and its cubin is what ptxas would make.
The image build calls it through `replayssm-overlay kernels build`; CI calls it on a CPU machine to check
that the source compiles without spills. Called through ctypes: no Python binding is needed.
"""

from __future__ import annotations

import ctypes
import glob
import os
import re
import sys
from pathlib import Path

from replayssm_overlay.errors import OverlayError

SOURCE = Path(__file__).with_name("gdn_fold.cu")
ARCH = "sm_90"
ENV_LIB = "RSO_NVRTC"  # an explicit libnvrtc.so path


class NvrtcMissing(OverlayError):
    """No NVRTC library was found; the CUDA kernel cannot be built here."""

    code = "nvrtc-missing"


def _candidates() -> list[str]:
    found = []
    for base in sys.path:
        found += sorted(glob.glob(os.path.join(base, "nvidia", "*", "lib", "libnvrtc.so*")))
        found += sorted(glob.glob(os.path.join(base, "nvidia", "cuda_nvrtc", "lib", "libnvrtc.so*")))
    found += sorted(glob.glob("/usr/local/cuda*/lib64/libnvrtc.so*"))
    return [f for f in found if "builtins" not in f and ".alt." not in f]


def library() -> ctypes.CDLL:
    """libnvrtc: $RSO_NVRTC, else the first one on sys.path (pip's nvidia packages), else /usr/local/cuda."""
    explicit = os.environ.get(ENV_LIB)
    for path in [explicit] if explicit else _candidates():
        try:  # its builtins library first: NVRTC opens it by name, which the loader may not find beside it
            for builtins in sorted(glob.glob(os.path.join(os.path.dirname(path), "libnvrtc-builtins.so*"))):
                if ".alt." not in builtins:
                    ctypes.CDLL(builtins, mode=ctypes.RTLD_GLOBAL)
            return ctypes.CDLL(path)
        except OSError:
            continue
    raise NvrtcMissing(
        "no NVRTC library (libnvrtc.so) found",
        f"pip install nvidia-cuda-nvrtc (the CUDA major of this torch), or set {ENV_LIB} to its path",
    )


def version(lib: ctypes.CDLL | None = None) -> str:
    lib = lib or library()
    major, minor = ctypes.c_int(), ctypes.c_int()
    lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    return f"{major.value}.{minor.value}"


def compile_cubin(source: str, options: list[str], name: str = "gdn_fold.cu") -> tuple[bytes, str]:
    """(cubin, compile log) for `source`; raises OverlayError with the log if it does not compile."""
    lib = library()
    prog = ctypes.c_void_p()
    check = _checker(lib)
    check(lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None), "create")
    try:
        opts = [f"--gpu-architecture={ARCH}", "--std=c++17", *options]
        argv = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
        rc = lib.nvrtcCompileProgram(prog, len(opts), argv)
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, log)
        text = log.value.decode(errors="replace")
        if rc != 0:
            raise OverlayError(f"NVRTC could not compile {name}:\n{text}", "report this as a bug")
        check(lib.nvrtcGetCUBINSize(prog, ctypes.byref(size)), "cubin size")
        cubin = ctypes.create_string_buffer(size.value)
        check(lib.nvrtcGetCUBIN(prog, cubin), "cubin")
        return cubin.raw, text
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


def _checker(lib):
    lib.nvrtcGetErrorString.restype = ctypes.c_char_p

    def check(rc: int, what: str) -> None:
        if rc != 0:
            raise OverlayError(f"NVRTC {what} failed: {lib.nvrtcGetErrorString(rc).decode()}", "report this as a bug")

    return check


def build_fold() -> tuple[bytes, dict]:
    """The commit kernel's cubin (its four entry points, `cuda_fold.KERNELS`) and what ptxas reported: the
    NVRTC version, registers per thread and spilled bytes of each entry point."""
    cubin, log = compile_cubin(SOURCE.read_text(), ["--ptxas-options=-v"])
    return cubin, {"nvrtc": version(), "arch": ARCH, "ptxas": ptxas_report(log)}


def ptxas_report(log: str) -> dict:
    """{entry point: {"registers": n, "spill_bytes": stores + loads}} from ptxas' -v lines."""
    report, name = {}, None
    for line in log.splitlines():
        found = re.search(r"Function properties for (\w+)", line)
        if found:
            name = found.group(1)
            report[name] = {"registers": None, "spill_bytes": 0}
        spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if spills and name:
            report[name]["spill_bytes"] = int(spills.group(1)) + int(spills.group(2))
        used = re.search(r"Used (\d+) registers", line)
        if used and name:
            report[name]["registers"] = int(used.group(1))
    return report
