"""The post-verify commit of DFLASH and DSPARK on a GDN circular-ring pool (SGLang 0.5.20 and later).

From 0.5.20 on, a GDN pool under `--enable-linear-replayssm-spec` keeps a frozen checkpoint plus a
request-keyed circular ring and its cursors; SGLang commits it for MTP/EAGLE in
`spec_utils.commit_mamba_states_after_verify` (advance the cursors, materialize rows that must flush,
store track slots, roll back the conv windows), while its DFLASH and DSPARK commits still hand the pool
to the KDA-only backend method, which crashes. This module makes DFLASH/DSPARK commit exactly as SGLang
commits MTP, for whichever release is installed: it calls that release's own
`commit_mamba_states_after_verify` with the MTP inputs a linear chain gives (accept lengths = commit
lengths incl. the bonus, `accept_index[i, j] = i*N + j`, N = the verify window), and a view of the batch
whose `seq_lens` are the pre-verify lengths. So the ring bookkeeping, flush rule, conv rollback and track
slot are SGLang's code of that release, never a copy of it.
"""


class _PreVerifyBatch:
    """The worker's batch as SGLang's MTP commit reads it: `seq_lens` are the pre-verify lengths and
    `req_pool_indices` has one entry per committed request; every other attribute is the batch's."""

    def __init__(self, batch, seq_lens_pre_verify, request_count: int):
        self._batch = batch
        self.seq_lens = seq_lens_pre_verify
        self.req_pool_indices = batch.req_pool_indices[:request_count]

    def __getattr__(self, name):
        return getattr(self._batch, name)


def chain_accept_index(request_count: int, draft_tokens: int, device):
    """`accept_index` of a linear draft chain: row i, step j is flat verify token i*N + j."""
    import torch

    return torch.arange(request_count * draft_tokens, dtype=torch.int32, device=device).view(
        request_count, draft_tokens
    )


def commit_ring(worker, batch, seq_lens_pre_verify, commit_lens, draft_tokens: int) -> None:
    """Commit the verify step of `commit_lens.shape[0]` requests (commit lengths incl. the bonus; verify
    window `draft_tokens`) exactly as the installed SGLang's MTP commit does. Its post-verify lengths
    are pre + commit lengths, as both workers' are."""
    from sglang.srt.speculative.spec_utils import commit_mamba_states_after_verify

    request_count = commit_lens.shape[0]
    commit_mamba_states_after_verify(
        worker.target_worker,
        _PreVerifyBatch(batch, seq_lens_pre_verify, request_count),
        accept_lens=commit_lens,
        accept_index=chain_accept_index(request_count, draft_tokens, commit_lens.device),
        draft_token_num=draft_tokens,
    )
