"""Which package of the installed SGLang holds its GDN linear-attention kernels (harness only).

Releases 0.5.19 to 0.5.22 keep them in `sglang.kernels.ops.attention.fla`; 0.5.23 moved the ReplaySSM
and recurrent kernels to `sglang.kernels.ops.attention.linear` (the `fla` package remains, without
them). The harness imports a kernel module by name from whichever of the two has it, so one harness
drives every release.
"""

import importlib
import importlib.util

KERNEL_PACKAGES = ("sglang.kernels.ops.attention.linear", "sglang.kernels.ops.attention.fla")


def gdn_kernel_module(name: str):
    """The installed SGLang's kernel module `name` (e.g. `fused_sigmoid_gating_recurrent`)."""
    for package in KERNEL_PACKAGES:
        try:
            found = importlib.util.find_spec(f"{package}.{name}")
        except ModuleNotFoundError:
            found = None
        if found is not None:
            return importlib.import_module(f"{package}.{name}")
    raise ModuleNotFoundError(
        f"no GDN kernel module {name!r} in {' or '.join(KERNEL_PACKAGES)}: not an SGLang release this "
        "harness knows (0.5.19 to 0.5.23)"
    )
