"""Build Triton's gcc-made launcher modules for prebuilt kernels on a machine without a GPU or libcuda.

Triton launches a kernel through small CPython extension modules it compiles with the system C compiler
on first use and caches under a key it computes from their C source (`cuda_utils`, and on Triton 3.6 one
`__triton_launcher` per signature). A GPU node that loads our cubins should find those modules ready, so
the build makes them here, through Triton's own code, into a private cache folder that `build.py` copies
into the artifact folder.

That needs a fake `libcuda.so.1` (an empty library with the right soname, linked with
`-Wl,--no-as-needed` so that the modules still record that they need the real one) and lazy symbol
binding so that Triton can import what it just built. Both change process-wide state, so this runs as
a child process of the build (`python launcher_modules.py REQUEST.json`), never inside a caller's
process. Run by file path, it puts its own tree's package root first on `sys.path`, so it works where the
overlay is not installed; besides the standard library and Triton it imports only the node-side
`replayssm_overlay.kernels.artifact_format` (stdlib only), whose `launcher_source` the loader uses too.

REQUEST.json: {"cache_dir": DIR, "kernels": [{"arg_names": [...], "signature": {...},
"constexprs": {...}, "metadata": PATH to Triton's metadata json}]}. Prints the modules it found in
DIR as JSON: [{"name", "key", "path"}].
"""

import ctypes
import json
import os
import subprocess
import sys
import sysconfig
import tempfile
import types
from pathlib import Path

if __name__ == "__main__":  # run by file path from the build: import the overlay from this same tree
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from replayssm_overlay.kernels.artifact_format import launcher_source  # noqa: E402


def _fake_libcuda(workdir: Path) -> Path:
    """An empty `libcuda.so.1` (and `libcuda.so` for `-lcuda`), loaded globally so imports resolve it."""
    source = workdir / "libcuda_stub.c"
    source.write_text("/* stand-in for the NVIDIA driver library while building launcher modules */\n")
    library = workdir / "libcuda.so.1"
    subprocess.check_call(
        ["gcc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(library), str(source)]
    )
    (workdir / "libcuda.so").symlink_to(library.name)
    ctypes.CDLL(str(library), mode=os.RTLD_GLOBAL)
    return workdir


def _compiler_keeping_libcuda(workdir: Path) -> Path:
    """A `CC` that puts `--no-as-needed` before Triton's `-lcuda`, or the linker drops the dependency."""
    real = os.environ.get("CC") or "gcc"
    wrapper = workdir / "cc"
    wrapper.write_text(f'#!/bin/sh\nexec {real} -Wl,--no-as-needed "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def _metadata(path: str) -> types.SimpleNamespace:
    return types.SimpleNamespace(**json.loads(Path(path).read_text()))


def build(request: dict) -> list:
    cache_dir = Path(request["cache_dir"])
    with tempfile.TemporaryDirectory(prefix="rso-libcuda-") as tmp:
        workdir = Path(tmp)
        os.environ["TRITON_LIBCUDA_PATH"] = str(_fake_libcuda(workdir))
        os.environ["CC"] = str(_compiler_keeping_libcuda(workdir))
        os.environ["TRITON_CACHE_DIR"] = str(cache_dir)
        sys.setdlopenflags(os.RTLD_LAZY | os.RTLD_GLOBAL)

        import triton.runtime
        from triton.backends.nvidia import driver as nvidia

        utils = nvidia.CudaUtils()  # builds cuda_utils
        triton.runtime.driver.set_active(types.SimpleNamespace(utils=utils, launcher_cls=nvidia.CudaLauncher))
        for entry in request["kernels"]:
            source = launcher_source(entry["arg_names"], entry["signature"], entry["constexprs"])
            nvidia.CudaLauncher(source, _metadata(entry["metadata"]))  # 3.6: builds one

    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    return [
        {"name": path.name[: -len(suffix)], "key": path.parent.name, "path": str(path)}
        for path in sorted(cache_dir.glob(f"*/*{suffix}"))
    ]


if __name__ == "__main__":
    print(json.dumps(build(json.loads(Path(sys.argv[1]).read_text()))))
