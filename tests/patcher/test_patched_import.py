"""A full copy of the installed SGLang, patched, still imports, and the configurator it loads is the patched
one (the hook call is in the method's bytecode). The two worker modules are only compiled (test_hookpoints):
importing them costs twice as long and their inserted lines import nothing at module load."""

import os
import pathlib
import shutil
import subprocess
import sys

from replayssm_overlay import patcher

REPO = pathlib.Path(__file__).resolve().parents[2]

PROBE = """
import sglang
from sglang.srt.mem_cache.kv_cache_configurator import KVCacheConfigurator
print(sglang.__file__)
print("keep_kda_only_guard" in KVCacheConfigurator._build_hybrid_req_pool.__code__.co_names)
"""


def test_patched_copy_of_installed_sglang_imports(installed_sglang_dir, tmp_path):
    copy = tmp_path / "site" / "sglang"
    try:
        shutil.copytree(installed_sglang_dir, copy, ignore=shutil.ignore_patterns("__pycache__"))
        assert patcher.apply(copy)["changed"]
        assert patcher.verify(copy)["ok"]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(copy.parent), str(REPO / "overlay")]))
        done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode == 0, done.stderr[-3000:]
        module_file, hooked = done.stdout.split()[-2:]
        assert pathlib.Path(module_file) == copy / "__init__.py"
        assert hooked == "True"
    finally:
        shutil.rmtree(copy.parent, ignore_errors=True)  # 160 MB; pytest would keep it for three runs
