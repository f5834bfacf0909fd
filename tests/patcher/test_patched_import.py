"""A full copy of the installed SGLang, patched, still imports its three patched modules, and the code it
loads is the patched code (the hook calls are in the methods' bytecode)."""

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
from sglang.srt.speculative.dflash_worker_v2 import DFlashWorkerV2
from sglang.srt.speculative.dspark_components.dspark_worker_v2 import DSparkWorkerV2
print(sglang.__file__)
print(
    "keep_kda_only_guard" in KVCacheConfigurator._build_hybrid_req_pool.__code__.co_names
    and "dflash_commit" in DFlashWorkerV2._update_target_mamba_state_after_verify.__code__.co_names
    and "dspark_commit" in DSparkWorkerV2._commit_target_mamba_states_after_verify.__code__.co_names
)
"""


def test_patched_copy_of_installed_sglang_imports(installed_sglang_dir, tmp_path):
    copy = tmp_path / "site" / "sglang"
    shutil.copytree(installed_sglang_dir, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert patcher.apply(copy)["changed"]
    assert patcher.verify(copy)["ok"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(copy.parent), str(REPO / "overlay")]))
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    module_file, hooked = done.stdout.split()[-2:]
    assert pathlib.Path(module_file) == copy / "__init__.py"
    assert hooked == "True"
