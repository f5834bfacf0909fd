"""The hook modules are imported by SGLang's start-up and commit paths: importing them must not pull in
torch or SGLang (they import those lazily, inside the hooks)."""

import subprocess
import sys

from harness.sandbox import REPO_ROOT


def test_hook_modules_import_without_torch_or_sglang():
    code = (
        "import sys, replayssm_overlay.hooks, replayssm_overlay.hooks.commit, "
        "replayssm_overlay.hooks.configurator, replayssm_overlay.hooks.ring_commit, "
        "replayssm_overlay.hooks.unserved_pools, replayssm_overlay.selfcheck\n"
        "heavy = sorted(m for m in ('torch', 'triton', 'sglang') if m in sys.modules)\n"
        "print(','.join(heavy))"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": str(REPO_ROOT / "overlay")},
        capture_output=True,
        text=True,
        check=True,
    )
    assert completed.stdout.strip() == ""
