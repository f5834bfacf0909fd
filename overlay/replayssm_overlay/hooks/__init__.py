"""The three entry points that the patched SGLang files call (the hook ABI).

The contract (who calls each function, its arguments, what its answer means, the marked lines that call
it) is written once, in `README.md` beside this file. Kept import-light: SGLang imports this module on
its start-up and commit paths; the implementations import torch, triton and sglang lazily.
"""


def keep_kda_only_guard(configurator) -> bool:
    """False lifts stock SGLang's KDA-only refusal, True keeps it (README.md)."""
    from replayssm_overlay.hooks.configurator import keep_kda_only_guard as impl

    return impl(configurator)


def dflash_commit(worker, batch, seq_lens_pre_verify, commit_lens, seq_lens_post_verify=None) -> bool:
    """True: the overlay committed DFLASH's accepted prefix; False: SGLang's body runs (README.md).
    `seq_lens_post_verify` is passed by the releases whose method has it (0.5.20 on)."""
    from replayssm_overlay.hooks.commit import dflash_commit as impl

    return impl(worker, batch, seq_lens_pre_verify, commit_lens, seq_lens_post_verify)


def dspark_commit(worker, batch, seq_lens_pre_verify, seq_lens_post_verify, commit_lens) -> bool:
    """True: the overlay committed DSPARK's accepted prefix; False: SGLang's body runs (README.md)."""
    from replayssm_overlay.hooks.commit import dspark_commit as impl

    return impl(worker, batch, seq_lens_pre_verify, seq_lens_post_verify, commit_lens)
