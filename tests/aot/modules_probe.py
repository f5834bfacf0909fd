"""Child process of test_aot_loader.py: set up Triton's launcher for each prebuilt binary the way the
loader does on a GPU node (`loader.prebuilt_modules`), on a machine without a GPU.

Needs a fake libcuda to import the modules (as the build's launcher_modules.py does), so it runs in its own process.
argv[1]: the folder whose modules/ to serve; argv[2]: the folder whose manifest lists the binaries.
Prints {"served": bool, "cache_files": n} or {"served": false, "refusal": why}.
"""

import json
import os
import sys
import tempfile
import types
from pathlib import Path

from replayssm_overlay.aot import launcher_modules
from replayssm_overlay.kernels import artifact_format as af
from replayssm_overlay.kernels import loader

modules_root, manifest_dir = Path(sys.argv[1]), Path(sys.argv[2])

with tempfile.TemporaryDirectory() as tmp:
    os.environ["TRITON_LIBCUDA_PATH"] = str(launcher_modules._fake_libcuda(Path(tmp)))
    sys.setdlopenflags(os.RTLD_LAZY | os.RTLD_GLOBAL)
    import triton.runtime
    from triton.backends.nvidia import driver as nvidia

    result = {"served": True}
    try:
        with loader.prebuilt_modules(modules_root):
            utils = nvidia.CudaUtils()
            triton.runtime.driver.set_active(types.SimpleNamespace(utils=utils, launcher_cls=nvidia.CudaLauncher))
            manifest = af.read_manifest(manifest_dir)
            for kernel in manifest["kernels"]:
                for spec in kernel["specializations"]:
                    src = af.launcher_source(kernel["arg_names"], spec["signature"], spec["constexprs"])
                    meta = json.loads((manifest_dir / spec["files"]["json"]).read_text())
                    nvidia.CudaLauncher(src, types.SimpleNamespace(**meta))
    except loader._BuildRefused as err:
        result = {"served": False, "refusal": str(err)}
    cache = Path(os.environ["TRITON_CACHE_DIR"])
    if result["served"]:
        result["cache_files"] = sum(1 for p in cache.rglob("*") if p.is_file()) if cache.exists() else 0
print(json.dumps(result))
