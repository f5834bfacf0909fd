"""Which kernel stock SGLang verifies GDN drafts with when ReplaySSM spec-verify is off: the reference the
overlay's bitwise claim on 0.5.19 is about (`exactness.py`).

Why it matters: with ReplaySSM off, the verify's per-step snapshots are the state SGLang commits, and they
come from the verify kernel SGLang's GDN dispatcher picks (`gdn_backend.py`, `GDNKernelDispatcher`, the
"Verify kernel" block; the same in every release of the table). With ReplaySSM on (0.5.19's raw-window fold) the
verify writes its window through the Triton recurrence whatever that pick (with a float32 state), so the
committed state is the Triton recurrence's: the ReplaySSM-off state only where stock verifies with Triton.

SGLang's rule, in the overlay's words (tests/releases/test_verify_selection.py holds it equal to SGLang's
own dispatcher, run on the CPU, for every flag combination each release accepts with the ReplaySSM spec
flag): the verify backend is `--linear-attn-verify-backend`, or, unset, flashinfer where the decode
backend (`--linear-attn-decode-backend`, else `--linear-attn-backend`) is flashinfer and triton otherwise;
a verify backend of triton verifies with Triton; any other verifies with FlashInfer's MTP kernel where the
decode or the prefill backend is flashinfer and the GPU is SM90 or SM100 (FlashInfer's
`supports_target_verify`), else with Triton. The prefill backend is `--linear-attn-prefill-backend`, else
`--linear-attn-backend`; with no prefill flag and the base backend triton, SGLang defaults prefill to
FlashInfer on SM90/SM100 for the models and chunk sizes it validated, which this rule, not knowing those,
counts as FlashInfer: it may call a Triton verify FlashInfer (and name a Triton reference where the plain
one would do), never the other way round.

Standard library only: `status` and the smoke suite use it without SGLang.
"""

from __future__ import annotations

TRITON, FLASHINFER = "triton", "flashinfer"
FLASHINFER_VERIFY_SM = (9, 10)  # the GPU generations whose FlashInfer GDN kernel verifies (supports_target_verify)
FLAGS = {  # server argument -> its flag
    "linear_attn_backend": "--linear-attn-backend",
    "linear_attn_decode_backend": "--linear-attn-decode-backend",
    "linear_attn_prefill_backend": "--linear-attn-prefill-backend",
    "linear_attn_verify_backend": "--linear-attn-verify-backend",
}


def stock_verify_kernel(arguments: dict, sm_major: int | None = None) -> str:
    """FLASHINFER where stock SGLang with ReplaySSM off verifies (or, by its SM90/SM100 prefill default, may
    verify) with FlashInfer's MTP kernel, else TRITON. `arguments`: the server arguments of `FLAGS` (missing
    or None: unset; `linear_attn_backend` unset is SGLang's default, triton); `sm_major`: the GPU's compute
    capability major, None where unknown (any GPU)."""
    base = arguments.get("linear_attn_backend") or TRITON
    decode = arguments.get("linear_attn_decode_backend") or base
    verify = arguments.get("linear_attn_verify_backend") or (FLASHINFER if decode == FLASHINFER else TRITON)
    if verify == TRITON or (sm_major is not None and sm_major not in FLASHINFER_VERIFY_SM):
        return TRITON
    prefill = arguments.get("linear_attn_prefill_backend")
    prefill_flashinfer = (prefill or base) == FLASHINFER or (prefill is None and base == TRITON)
    return FLASHINFER if decode == FLASHINFER or prefill_flashinfer else TRITON


def given_flags(arguments: dict) -> str:
    """The linear-attention flags `arguments` sets, as a command line would (or "no linear-attention flag")."""
    given = [f"{flag} {arguments[name]}" for name, flag in FLAGS.items() if arguments.get(name)]
    return " ".join(given) or "no linear-attention flag"
