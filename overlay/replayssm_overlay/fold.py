"""The one function through which the overlay folds an accepted prefix into the GDN state.

Every commit path of the overlay calls `fold_accepted_prefix`; which kernel does the work is decided
here and nowhere else, so swapping SGLang's fold for the overlay's own (prebuilt for sm_90) is a change
to this module alone. `describe()` reports the choice for `replayssm-overlay status --json` and the log.

Contract (the same as SGLang 0.5.19's `commit_gdn_replayssm_fold_after_verify`): `spec_state` is the
pool's all-layers speculative state; `state_batch_indices` are physical mamba slots, -1 for padded
rows; `accept_lens` count the accepted drafts plus the bonus token; `last_correct_step_indices` is
`accept_lens - 1`; the optional track pair stores the state after step `mamba_steps_to_track[i]` into
slot `mamba_track_indices[i]` (-1: no track). The temporal state of each active slot becomes, bitwise,
what SGLang's decode recurrence gives token by token over the accepted prefix, and the conv windows are
rolled back to the last accepted step.
"""


def fold_accepted_prefix(
    *,
    spec_state,
    state_batch_indices,
    accept_lens,
    last_correct_step_indices,
    mamba_track_indices=None,
    mamba_steps_to_track=None,
    null_block_id: int = -1,
) -> None:
    from sglang.kernels.ops.attention.fla.gdn_replayssm_spec_fold import (
        commit_gdn_replayssm_fold_after_verify,
    )

    commit_gdn_replayssm_fold_after_verify(
        spec_state=spec_state,
        state_batch_indices=state_batch_indices,
        accept_lens=accept_lens,
        last_correct_step_indices=last_correct_step_indices,
        mamba_track_indices=mamba_track_indices,
        mamba_steps_to_track=mamba_steps_to_track,
        null_block_id=null_block_id,
    )


def describe() -> dict:
    """Which fold the commit path uses on this node, and why (cheap: imports no torch or triton)."""
    return {"fold": "sglang", "reason": "the overlay's own fold kernels are not part of this build"}
