"""The pool builders that stock SGLang runs without its KDA-only guard: served, or refused at startup.

Only `KVCacheConfigurator._build_hybrid_req_pool` refuses DFLASH/DSPARK with `--enable-linear-replayssm-spec`
on a non-KDA model. Two other builders make the request pool of a hybrid GDN model without asking:

- `_build_hybrid_mamba_decode_req_pool`, on a PD-disaggregation decode server: it builds the same GDN
  ReplaySSM pool by the same `_init_mamba_pool` (a `HybridMambaDecodeReqToTokenPool`), and stock SGLang
  crashes at its first DFLASH/DSPARK commit. The overlay serves it under the rules of the hybrid pool
  (`hooks.configurator.admit`: DSPARK static only, the verify window fitting the ring from 0.5.20 on,
  the node's self-check): the commit cycle on that very pool, built by each release's own builder, is
  bitwise equal to token-by-token decode on 0.5.19 and to the release's MTP commit from 0.5.20 on
  (`harness.pd_decode`, tests/cycle, tests/releases).
- `_init_unified_mamba_pools` (`--enable-unified-memory`): SGLang's unified mamba pool turns ReplaySSM
  off without a word (its pool reports `replayssm_spec_fold = False` and keeps per-step snapshots), so
  the flag would have no effect; the overlay refuses at startup and says so, naming the fix (a DSPARK
  server in a non-static ragged mode is first told the static-only rule, which holds on every path).

Any other model or configuration returns and SGLang's code runs unchanged. SGLang is imported lazily.
"""

from replayssm_overlay.errors import OverlayError
from replayssm_overlay.hooks.configurator import admit, gdn_config, require_static_ragged_verify, speculative_algorithm

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
    model_config = gdn_config(configurator) if _replayssm_spec_enabled() else None
    if model_config is None:
        return
    algorithm = speculative_algorithm()
    if algorithm not in ("DFLASH", "DSPARK"):
        return
    if builder == "pd_decode":
        admit(configurator, algorithm, model_config)
        return
    if algorithm == "DSPARK":
        require_static_ragged_verify()
    raise OverlayError(
        f"{algorithm} with {SPEC_FLAG} on a hybrid GDN model and --enable-unified-memory: SGLang's "
        "unified mamba pool turns ReplaySSM spec-verify off without saying so, so the flag would have no "
        "effect",
        f"drop --enable-unified-memory to serve with ReplaySSM, or drop {SPEC_FLAG} to serve the unified "
        "pool with SGLang's per-step snapshot commit",
    )
