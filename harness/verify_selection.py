"""Which verify kernel the imported SGLang's own GDN dispatcher picks, for every combination of the
linear-attention flags it accepts with `--enable-linear-replayssm-spec`, on the CPU (harness only).

Run as `python -m harness.verify_selection` in a process whose PYTHONPATH puts a release's tree first: it
publishes each combination, resolves the backends with SGLang's `resolve_linear_attn_backends` (with and
without its SM90/SM100 FlashInfer prefill default, where that default can apply) and builds SGLang's
`GDNKernelDispatcher` on them, with stand-ins for the two GPU kernels it would construct (FlashInfer's,
whose `supports_target_verify` is SM90/SM100 only, and CuTe DSL's, prefill-less as on SM90). It prints
one JSON line: per combination and GPU generation, whether SGLang verifies with FlashInfer under some
prefill default, next to `replayssm_overlay.verify_kernel.stock_verify_kernel`'s answer.
"""

import itertools
import json
import sys
import types

from harness.context import published

BASES = ("triton", "flashinfer", "cutedsl")
DECODES = (None, "triton", "flashinfer")  # the spec flag takes only a triton or flashinfer decode backend
PREFILLS = (None, "triton", "cutedsl", "flashinfer")
VERIFIES = (None, "triton", "flashinfer", "cutedsl", "nv_cutedsl")
SM_MAJORS = (8, 9, 10)
KERNELS = "sglang.srt.layers.attention.linear.kernels"


class _FlashInferKernel:
    sm_major = 9

    def __init__(self):
        self.supports_target_verify = self.sm_major in (9, 10)


class _CuteDSLKernel:
    supports_prefill = False


def _stand_in_gpu_kernels(gdn_backend) -> None:
    for module, name, kernel in (
        ("gdn_flashinfer", "FlashInferGDNKernel", _FlashInferKernel),
        ("gdn_cutedsl", "CuteDSLGDNKernel", _CuteDSLKernel),
    ):
        stand_in = types.ModuleType(f"{KERNELS}.{module}")
        setattr(stand_in, name, kernel)
        sys.modules[stand_in.__name__] = stand_in
    gdn_backend.is_cuda = lambda: True


def combinations():
    for base, decode, prefill, verify in itertools.product(BASES, DECODES, PREFILLS, VERIFIES):
        if (decode or base) in ("triton", "flashinfer"):
            yield {
                "linear_attn_backend": base,
                "linear_attn_decode_backend": decode,
                "linear_attn_prefill_backend": prefill,
                "linear_attn_verify_backend": verify,
            }


def sglang_verifies_with_flashinfer(flags: dict, sm_major: int) -> bool:
    """Whether SGLang's dispatcher picks FlashInfer's verify for `flags` on an SM `sm_major` GPU, for some
    outcome of its prefill default (FlashInfer only with no prefill flag, a triton base and SM90/SM100)."""
    import sglang.srt.layers.attention.linear.gdn_backend as gdn_backend
    from sglang.srt.layers.attention.linear.utils import resolve_linear_attn_backends

    _FlashInferKernel.sm_major = sm_major
    defaults = [None]
    prefill_flag, base = flags["linear_attn_prefill_backend"], flags["linear_attn_backend"]
    if prefill_flag is None and base == "triton" and sm_major in (9, 10):
        defaults.append("flashinfer")
    picks = []
    with published("DFLASH", **flags):
        for default in defaults:
            backends = resolve_linear_attn_backends(prefill_default=default)
            dispatcher = gdn_backend.GDNKernelDispatcher(backends.decode, backends.prefill, backends.verify)
            picks.append(dispatcher.verify_kernel_is_flashinfer)
    return any(picks)


def main() -> int:
    from harness import on_cpu

    on_cpu.prepare()
    import sglang.srt.layers.attention.linear.gdn_backend as gdn_backend

    from replayssm_overlay.verify_kernel import FLASHINFER, stock_verify_kernel

    _stand_in_gpu_kernels(gdn_backend)
    rows = [
        {
            "flags": flags,
            "sm_major": sm,
            "sglang": sglang_verifies_with_flashinfer(flags, sm),
            "overlay": stock_verify_kernel(flags, sm) == FLASHINFER,
            "overlay_any_gpu": stock_verify_kernel(flags) == FLASHINFER,
        }
        for flags in combinations()
        for sm in SM_MAJORS
    ]
    print(json.dumps({"sglang": gdn_backend.__file__, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
