"""Which package of the installed SGLang holds its GDN linear-attention kernels (harness only).

Releases up to 0.5.22 keep them in `sglang.kernels.ops.attention.fla`; 0.5.23 moved the ReplaySSM and
recurrent kernels to `sglang.kernels.ops.attention.linear` (the `fla` package remains, without them). The
harness imports a kernel module by name from whichever package has it, so one harness drives every release.

`replayssm_overlay.protocol.KERNEL_PACKAGES` is where the overlay says it; this module names the same
packages itself because the probe imports it where a test hides `replayssm_overlay`, and
tests/releases/test_release_coverage.py holds the two equal.
"""

import importlib
import importlib.util

KERNEL_PACKAGES = ("sglang.kernels.ops.attention.linear", "sglang.kernels.ops.attention.fla")


def gdn_kernel_module(name: str):
    """The installed SGLang's kernel module `name` (e.g. `fused_sigmoid_gating_recurrent`)."""
    names = tuple(f"{package}.{name}" for package in KERNEL_PACKAGES)
    for module in names:
        try:
            found = importlib.util.find_spec(module)
        except ModuleNotFoundError:
            found = None
        if found is not None:
            return importlib.import_module(module)
    raise ModuleNotFoundError(
        f"no GDN kernel module {' or '.join(names)}: not an SGLang release this harness knows "
        "(patcher/releases.py lists them)"
    )
