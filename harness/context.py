"""A published SGLang runtime config for the commit and configurator code paths, on the CPU.

SGLang 0.5.19 reads its flags from process-wide config bags (`get_spec()`, `get_exec()`, ...), which a
server publishes at start-up. `published(...)` installs them through SGLang's own test-scoped
`RuntimeContext.override_server_args` for the length of a block, with the fields these paths read, and
an attention-TP width (1 unless given; no process groups are built here).
"""

import contextlib
import os

TRACK_INTERVAL = 8  # --mamba-track-interval for the tracked scenarios (also the mamba cache chunk)


@contextlib.contextmanager
def published(
    algorithm: str,
    *,
    replayssm_spec: bool = True,
    ragged_verify_mode: str | None = None,
    track_interval: int = TRACK_INTERVAL,
    attn_tp_size: int = 1,
    **fields,
):
    """Publish a config with `--speculative-algorithm algorithm` and the ReplaySSM spec flag; optionally
    set `SGLANG_RAGGED_VERIFY_MODE` for the block. `attn_tp_size` is the attention-TP width the pool's
    head shards are cut for (rank 0 of it)."""
    from sglang.srt.runtime_context import get_context, get_parallel

    override = get_context().override_server_args(
        speculative_algorithm=algorithm,
        enable_linear_replayssm_spec=replayssm_spec,
        mamba_track_interval=track_interval,
        _mamba_cache_chunk_size=track_interval,
        **fields,
    )
    previous_mode = os.environ.get("SGLANG_RAGGED_VERIFY_MODE")
    if ragged_verify_mode is not None:
        os.environ["SGLANG_RAGGED_VERIFY_MODE"] = ragged_verify_mode
    override.install()
    try:
        with get_parallel().override(
            tp_size=attn_tp_size, attn_tp_size=attn_tp_size, moe_tp_size=attn_tp_size, attn_tp_rank=0
        ):
            yield
    finally:
        override.restore()
        if previous_mode is None:
            os.environ.pop("SGLANG_RAGGED_VERIFY_MODE", None)
        else:
            os.environ["SGLANG_RAGGED_VERIFY_MODE"] = previous_mode
