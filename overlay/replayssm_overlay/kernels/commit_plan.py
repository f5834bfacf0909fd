"""The overlay's commit (fold + conv rollback, track slot included) as the server runs it: everything that
can be checked is checked once per (pool, batch size, track or not), then each commit is one launch.

Why: the commit runs eagerly once per verify step, after the host has read the accept lengths, so its
host time is on every request's critical path. A `CommitPlan` is made on the first commit of a batch
size: it checks the pool's shapes, strides and dtypes against what the kernels reproduce (raising
`errors.NotCovered` before anything is launched),
computes every integer argument, and prepares the launch (`cuda_fold.CudaKernels`, the served default, or
`launch.JitKernels`, the Triton twin). `CommitPlan.run` then launches the commit's one kernel (fold, conv
rollback and track slot). The CUDA kernel's launch (`cuda_fold`, a `commit` attribute on the prepared
launch) takes the index tensors themselves, int32 or int64, and checks them in the same pass that reads
their addresses; the Triton kernel's takes int32 index vectors, 1-D and contiguous on the pool's device,
and `indices` copies any other for that call (the server's int64 track vectors among them). The plan holds
the pool object, so the id it is cached under stays unique while cached. Pools with other than one conv
state are refused (GDN pools have one).
"""

from __future__ import annotations

import torch

from replayssm_overlay.errors import NotCovered
from replayssm_overlay.kernels import gdn_fold

FOLD_OPTIONS = dict(num_warps=gdn_fold.NUM_WARPS, num_stages=gdn_fold.NUM_STAGES)
_INT32 = torch.int32
_INDEX_POSITIONS = tuple(
    list(gdn_fold.fold_signature("bf16")).index(name)  # what a commit passes the fold
    for name in ("slots", "accept_lens", "track_slots", "track_steps")
)


def indices(tensor, device_index: int):
    """`tensor` if a launch for int32 index vectors can read it as is (int32, 1-D, contiguous, 16-byte aligned,
    on the device), else an int32 contiguous copy (fresh, so aligned); NotCovered if it is not 1-D."""
    if (
        tensor.dtype is _INT32
        and not tensor.data_ptr() & 15
        and tensor.ndim == 1
        and tensor.is_contiguous()
        and tensor.get_device() == device_index
    ):
        return tensor
    if tensor.ndim != 1:
        raise NotCovered(f"index tensor of shape {tuple(tensor.shape)} (need 1-D)")
    return tensor.to(
        device=torch.device("cpu") if device_index < 0 else torch.device("cuda", device_index),
        dtype=_INT32,
        memory_format=torch.contiguous_format,
        copy=True,
    )


class CommitPlan:
    """The prepared launch for one pool, batch size and track choice."""

    def __init__(self, spec_state, batch: int, has_track: bool, kernels, *, tree_numpy: bool | None = None):
        self.spec_state = spec_state
        self.batch = batch
        self.has_track = has_track
        state = spec_state.temporal
        pool = (
            state,
            spec_state.replayssm_rawv,
            spec_state.replayssm_rawk,
            spec_state.replayssm_g,
            spec_state.replayssm_beta,
        )
        self._pool = pool
        self.device_index = state.get_device()
        fold_ints = gdn_fold.runtime_args(*pool)
        self.shape = describe_pool(spec_state)
        if len(spec_state.conv) != 1 or len(spec_state.intermediate_conv_window) != 1:
            raise NotCovered(
                f"{len(spec_state.conv)} conv states (the commit's kernel rolls back exactly one, as GDN pools have)"
            )
        conv_src, conv_dst, conv_ints = gdn_fold.conv_args(
            state, spec_state.conv[0], spec_state.intermediate_conv_window[0]
        )
        head, ints = (*pool[:3], conv_src, conv_dst, *pool[3:]), (*fold_ints, *conv_ints)
        example = torch.zeros(batch, dtype=torch.int32, device=state.device)
        constexprs = gdn_fold.fold_constexprs(has_track, kernels.tree_numpy if tree_numpy is None else tree_numpy)
        fold = kernels.prepare(
            gdn_fold.gdn_replayssm_fold_kernel,
            gdn_fold.fold_grid(state, batch),
            (*head, example, example, example, example, *ints),
            constexprs,
            FOLD_OPTIONS,
            self.device_index,
        )
        self._commit = getattr(fold, "commit", None)  # the CUDA kernel's: index tensors only
        self._fold = None if self._commit is not None else fold.taking(*_INDEX_POSITIONS)  # the Triton kernel's

    def matches(self, spec_state) -> bool:
        """Still the pool this plan was made for (same tensor objects)."""
        return (
            spec_state.temporal is self._pool[0]
            and spec_state.replayssm_rawv is self._pool[1]
            and spec_state.replayssm_rawk is self._pool[2]
            and spec_state.replayssm_g is self._pool[3]
            and spec_state.replayssm_beta is self._pool[4]
        )

    def run(self, slots, accept_lens, track_slots=None, track_steps=None) -> None:
        """Fold and roll back: one launch. Index tensors the launch cannot read as given are copied;
        NotCovered (before anything is launched) for one that is not 1-D."""
        if self._commit is not None:
            if self.has_track:
                return self._commit(slots, accept_lens, track_slots, track_steps)
            return self._commit(slots, accept_lens)
        device = self.device_index
        slots, accept_lens = indices(slots, device), indices(accept_lens, device)
        if self.has_track:
            self._fold(slots, accept_lens, indices(track_slots, device), indices(track_steps, device))
        else:
            self._fold(slots, accept_lens, slots, accept_lens)


def describe_pool(spec_state) -> dict:
    """The pool's geometry, for logs and `status --json` (no tensor contents)."""
    state, rawk = spec_state.temporal, spec_state.replayssm_rawk
    out = {"layers": state.shape[0], "slots": state.shape[1]}
    if state.dim() == 5 and rawk.dim() == 5:
        out.update(HV=state.shape[2], H=rawk.shape[2], V=state.shape[3], K=state.shape[4], window=rawk.shape[3])
    out["dtypes"] = [str(t.dtype).rpartition(".")[2] for t in (state, spec_state.replayssm_rawv, rawk)]
    return out
