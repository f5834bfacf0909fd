"""The configurator rule: which DFLASH/DSPARK + `--enable-linear-replayssm-spec` models the overlay takes.

Stock SGLang (every supported release) refuses DFLASH and DSPARK with ReplaySSM spec-verify on every non-KDA
model, because their commit only knows the KDA fold. The patched
`KVCacheConfigurator._build_hybrid_req_pool` asks `keep_kda_only_guard` only when that refusal is about
to be raised, and the answer (the same on every release) is:

- hybrid GDN model (Qwen3-Next / Qwen3.5 lineage) + DFLASH: lift the refusal (the overlay commits);
- hybrid GDN model + DSPARK with `SGLANG_RAGGED_VERIFY_MODE=static`: lift it;
- hybrid GDN model + DSPARK in `compact` or `cap-accept` mode: refuse with an OverlayError naming the
  variable, because GDN's verify kernels only take the dense `[bs, N]` window;
- anything else (no GDN model, another algorithm): keep SGLang's own error.

Before lifting it, on SGLang 0.5.19 (the raw-window fold, `replayssm_overlay.protocol`) the node checks the
fold it will commit with (`replayssm_overlay.selfcheck`: bitwise against SGLang's recurrence on a random
window, or SGLang's fold for a non-fp32 state), and where SGLang's fold can commit (it is the fold, or the
CUDA kernel's per-call fallback) compiles it on the pool once built (`replayssm_overlay.sglang_warmup`); on
the circular-ring releases (0.5.20 on) the commit is SGLang's own MTP commit, so nothing of the overlay's is
checked, and the verify window must fit the ring (`hooks/ring_fit.py`: refused otherwise, naming both flags).
The record and the INFO line carry the claim (`replayssm_overlay.exactness`), which on 0.5.19 depends on the
kernel stock SGLang would verify with on these flags with ReplaySSM off (`stock_verify`, from the published
`--linear-attn-*` flags and the GPU).
The commit path is imported here, so an overlay whose commit cannot import never lifts the refusal
(`hooks/__init__.py`).

SGLang is imported lazily: this module is loaded on SGLang's start-up path.
"""

import logging

from replayssm_overlay.errors import OverlayError
from replayssm_overlay.hooks import commit as _commit_path  # noqa: F401 (imported to fail here, at startup)

logger = logging.getLogger(__name__)

RAGGED_MODE_VARIABLE = "SGLANG_RAGGED_VERIFY_MODE"
RAGGED_MODE_ALLOWED = "static"


def gdn_config(configurator):
    """The hybrid GDN text config of the configurator's model, or None."""
    known = getattr(configurator, "hybrid_gdn_config", None)
    if known is not None:
        return known
    from sglang.srt.configs.hybrid_arch import hybrid_gdn_config

    return hybrid_gdn_config(configurator.model_config)


def speculative_algorithm() -> str:
    from sglang.srt.runtime_context import get_spec

    return (get_spec().speculative_algorithm or "").upper()


def _ragged_verify_mode() -> str:
    from sglang.srt.speculative.ragged_verify import read_ragged_verify_mode

    return read_ragged_verify_mode().value


def require_static_ragged_verify() -> None:
    mode = _ragged_verify_mode()
    if mode != RAGGED_MODE_ALLOWED:
        raise OverlayError(
            f"DSPARK with --enable-linear-replayssm-spec on a hybrid GDN model needs "
            f"{RAGGED_MODE_VARIABLE}={RAGGED_MODE_ALLOWED}; got {RAGGED_MODE_VARIABLE}={mode}. "
            "GDN's verify kernels take only the dense [bs, N] window, not a ragged layout.",
            f"set {RAGGED_MODE_VARIABLE}={RAGGED_MODE_ALLOWED} (or unset it: static is the default), "
            "or drop --enable-linear-replayssm-spec",
        )


def keep_kda_only_guard(configurator) -> bool:
    model_config = gdn_config(configurator)
    if model_config is None:
        return True
    algorithm = speculative_algorithm()
    if algorithm not in ("DFLASH", "DSPARK"):
        return True
    admit(configurator, algorithm, model_config)
    return False


def admit(configurator, algorithm: str, model_config) -> None:
    """What the overlay requires before it serves DFLASH/DSPARK on this hybrid GDN model's pool (an
    OverlayError names the fix), then the node's self-check and one INFO line. Every pool builder the
    overlay serves calls it (the hybrid pool's guard, the PD-decode pool: `hooks/unserved_pools.py`)."""
    if algorithm == "DSPARK":
        require_static_ragged_verify()
    from replayssm_overlay import protocol, selfcheck, sglang_warmup

    installed = protocol.installed()
    if installed == protocol.RING:
        from replayssm_overlay.hooks.ring_fit import require_ring_fit

        require_ring_fit(algorithm)
    record = selfcheck.check_before_serving(
        selfcheck.Geometry.of_configurator(configurator), protocol_name=installed, stock_verify=stock_verify()
    )
    sglang_warmup.warm_before_serving()  # where SGLang's fold can commit: compiled on the pool, not at a request
    logger.info(
        "replayssm-overlay: allowing %s + --enable-linear-replayssm-spec on hybrid GDN model %s; %s commits "
        "the accepted prefix: %s",
        algorithm,
        type(model_config).__name__,
        record["commit"],
        record["exactness"]["statement"],
    )


def stock_verify() -> str:
    """The kernel stock SGLang verifies with on this server's published flags with ReplaySSM off
    (`replayssm_overlay.verify_kernel`), on this process's GPU."""
    from sglang.srt.runtime_context import get_exec

    from replayssm_overlay.verify_kernel import FLAGS, stock_verify_kernel

    mamba = get_exec().mamba
    return stock_verify_kernel({name: getattr(mamba, name, None) for name in FLAGS}, _sm_major())


def _sm_major() -> int | None:
    import torch

    return torch.cuda.get_device_capability()[0] if torch.cuda.is_available() else None
