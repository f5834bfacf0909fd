"""The three entry points that the patched SGLang files call (the hook ABI).

The patcher inserts a few marked lines into each SGLang file that call exactly these functions, by these
names and with these arguments; everything else lives in this package, where it is tested. Changing a
name or signature here means changing the patcher's inserted lines in the same commit.

Kept import-light: SGLang imports this module on its start-up and commit paths; the implementations
import torch, triton and sglang lazily.
"""


def keep_kda_only_guard(configurator) -> bool:
    """Asked by `KVCacheConfigurator._build_hybrid_req_pool` only when stock 0.5.19 is about to refuse
    DFLASH/DSPARK + `--enable-linear-replayssm-spec` on a non-KDA model. False lifts the refusal for a
    hybrid GDN model (DFLASH, or DSPARK in static ragged-verify mode); True keeps SGLang's own error;
    raises OverlayError for GDN + DSPARK in a non-static mode."""
    from replayssm_overlay.hooks.configurator import keep_kda_only_guard as impl

    return impl(configurator)


def dflash_commit(worker, batch, seq_lens_pre_verify, commit_lens) -> bool:
    """Called first in `DFlashWorkerV2._update_target_mamba_state_after_verify`. True: the overlay
    committed the accepted prefix (GDN ReplaySSM fold pool) and SGLang's body must not run. False: not
    ours (KDA, ReplaySSM off, no mamba pool); SGLang's own code runs untouched."""
    from replayssm_overlay.hooks.commit import dflash_commit as impl

    return impl(worker, batch, seq_lens_pre_verify, commit_lens)


def dspark_commit(worker, batch, seq_lens_pre_verify, seq_lens_post_verify, commit_lens) -> bool:
    """Called first in `DSparkWorkerV2._commit_target_mamba_states_after_verify`; same contract as
    `dflash_commit`."""
    from replayssm_overlay.hooks.commit import dspark_commit as impl

    return impl(worker, batch, seq_lens_pre_verify, seq_lens_post_verify, commit_lens)
