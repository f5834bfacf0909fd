"""Startup refusals for the pool builders that stock SGLang 0.5.19 runs without its KDA-only guard.

Only `KVCacheConfigurator._build_hybrid_req_pool` refuses DFLASH/DSPARK with `--enable-linear-replayssm-spec`
on a non-KDA model. Two other builders make the request pool of a hybrid GDN model without asking:

- `_build_hybrid_mamba_decode_req_pool`, on a PD-disaggregation decode server: it builds a GDN ReplaySSM
  fold pool, and the overlay's commit would take over there. The overlay has not proven that commit
  (the decode pool's slots are filled from a prefill server's transferred state; the CPU cycle test
  covers the non-disaggregated pool only), so it refuses; a DSPARK server in a non-static ragged mode
  is first told the static-only rule, which holds on every path.
- `_init_unified_mamba_pools` (`--enable-unified-memory`): SGLang's unified mamba pool turns ReplaySSM
  off without a word (its pool reports `replayssm_spec_fold = False` and keeps per-step snapshots), so
  the flag would have no effect; the overlay refuses and says so.

Both are refused at startup, naming the fix. Any other model or configuration returns and SGLang's code
runs unchanged. SGLang is imported lazily.
"""

from replayssm_overlay.errors import OverlayError
from replayssm_overlay.hooks.configurator import gdn_config, require_static_ragged_verify, speculative_algorithm

BUILDERS = ("pd_decode", "unified_memory")
SPEC_FLAG = "--enable-linear-replayssm-spec"


def _replayssm_spec_enabled() -> bool:
    from sglang.srt.runtime_context import get_exec

    return bool(get_exec().mamba.enable_linear_replayssm_spec)


def refuse_unserved_pool(configurator, builder: str) -> None:
    if builder not in BUILDERS:
        raise OverlayError(
            f"replayssm-overlay: unknown pool builder {builder!r} (known: {', '.join(BUILDERS)})",
            "the patched SGLang file and the installed overlay disagree: run `replayssm-overlay verify`",
        )
    if not _replayssm_spec_enabled() or gdn_config(configurator) is None:
        return
    algorithm = speculative_algorithm()
    if algorithm not in ("DFLASH", "DSPARK"):
        return
    if algorithm == "DSPARK":
        require_static_ragged_verify()
    if builder == "pd_decode":
        raise OverlayError(
            f"{algorithm} with {SPEC_FLAG} on a hybrid GDN model is not served on a PD-disaggregation "
            "decode server (--disaggregation-mode decode): the overlay's commit is proven for the "
            "non-disaggregated pool only, and stock SGLang would crash at the first commit",
            f"drop {SPEC_FLAG} on this decode server (SGLang's own per-step snapshot commit runs), or "
            "serve without PD disaggregation",
        )
    raise OverlayError(
        f"{algorithm} with {SPEC_FLAG} on a hybrid GDN model and --enable-unified-memory: SGLang's "
        "unified mamba pool turns ReplaySSM spec-verify off without saying so, so the flag would have no "
        "effect",
        f"drop --enable-unified-memory to serve with ReplaySSM, or drop {SPEC_FLAG} to serve the unified "
        "pool with SGLang's per-step snapshot commit",
    )
