"""The overlay's commit (fold + conv rollback, track slot included) as the server runs it: everything that
can be checked is checked once per (pool, batch size, track or not), then each commit is one launch.

Why: the commit runs eagerly once per verify step, after the host has read the accept lengths, so its
host time is on every request's critical path. A `CommitPlan` is made on the first commit of a batch
size: it checks the pool's shapes, strides and dtypes against what the kernels reproduce (raising
`gdn_fold.FoldShapeNotSupported`, `conv_rollback.ConvShapeNotSupported` or `loader.ArtifactRefused`
before anything is launched), computes every integer argument, and prepares the launch
(`launch.PrebuiltKernels` or `launch.JitKernels`). `CommitPlan.run` then launches the commit's one
kernel (fold, conv rollback and track slot: `gdn_fold.gdn_replayssm_fold_kernel`), with index tensors
that are what the prepared launch assumes, else copied for that call by `indices`: 1-D, contiguous, on the
pool's device, and int32 16-byte aligned for the Triton kernel's binaries (their specialization). The
server's track vectors are int64: a plan with a track slot also prepares the Triton kernel's launch for int64
track vectors (`readable` as int64: its own binary), so that they are read as given, not copied by two more
launches on every commit (where the folder has no such binary, they are copied). The CUDA
kernel's launch (`cuda_fold`, a `commit` attribute on the prepared launch) takes the index tensors
themselves, int32 or int64, and checks them in the same pass that reads their addresses. The plan holds
the pool object, so the id it is cached under stays unique while cached. Pools with other than one conv
state are refused (GDN pools have one).
"""

from __future__ import annotations

import torch

from replayssm_overlay.kernels import conv_rollback, gdn_fold, loader

FOLD_OPTIONS = dict(num_warps=gdn_fold.NUM_WARPS, num_stages=gdn_fold.NUM_STAGES)
_INT32, _INT64 = torch.int32, torch.int64
_INDEX_POSITIONS = tuple(list(gdn_fold.fold_signature("bf16")).index(name)  # what a commit passes the fold
                         for name in ("slots", "accept_lens", "track_slots", "track_steps"))


def readable(tensor, dtype, device_index: int) -> bool:
    """A prepared launch for index vectors of `dtype` can read `tensor` as is: of that dtype, 1-D, contiguous,
    16-byte aligned (the binaries' specialization), on the device."""
    return (tensor.dtype is dtype and not tensor.data_ptr() & 15 and tensor.ndim == 1 and tensor.is_contiguous()
            and tensor.get_device() == device_index)


def indices(tensor, device_index: int):
    """`tensor` if the prepared launch can read it as is (`readable` as int32), else an int32 contiguous copy
    (fresh, so aligned); FoldShapeNotSupported if it is not 1-D."""
    if readable(tensor, _INT32, device_index):
        return tensor
    if tensor.ndim != 1:
        raise gdn_fold.FoldShapeNotSupported(f"index tensor of shape {tuple(tensor.shape)} (need 1-D)")
    return tensor.to(device=torch.device("cpu") if device_index < 0 else torch.device("cuda", device_index),
                     dtype=_INT32, memory_format=torch.contiguous_format, copy=True)


class CommitPlan:
    """The prepared launch for one pool, batch size and track choice."""

    def __init__(self, spec_state, batch: int, has_track: bool, kernels, *, tree_numpy: bool | None = None):
        self.spec_state = spec_state
        self.batch = batch
        self.has_track = has_track
        state = spec_state.temporal
        pool = (state, spec_state.replayssm_rawv, spec_state.replayssm_rawk, spec_state.replayssm_g,
                spec_state.replayssm_beta)
        self._pool = pool
        self.device_index = state.get_device()
        fold_ints = gdn_fold.runtime_args(*pool)
        self.shape = describe_pool(spec_state)
        if len(spec_state.conv) != 1 or len(spec_state.intermediate_conv_window) != 1:
            raise conv_rollback.ConvShapeNotSupported(
                f"{len(spec_state.conv)} conv states (the commit's kernel rolls back exactly one, as GDN pools have)")
        conv_src, conv_dst, conv_ints = gdn_fold.conv_args(state, spec_state.conv[0], spec_state.intermediate_conv_window[0])
        head, ints = (*pool[:3], conv_src, conv_dst, *pool[3:]), (*fold_ints, *conv_ints)
        example = torch.zeros(batch, dtype=torch.int32, device=state.device)
        constexprs = gdn_fold.fold_constexprs(has_track, kernels.tree_numpy if tree_numpy is None else tree_numpy)

        def prepare(track_dtype):  # the launch for int32 slots and accept lengths and track vectors of track_dtype
            track = torch.zeros(batch, dtype=track_dtype, device=state.device)
            return kernels.prepare(gdn_fold.gdn_replayssm_fold_kernel, gdn_fold.fold_grid(state, batch),
                                   (*head, example, example, track, track, *ints), constexprs,
                                   FOLD_OPTIONS, self.device_index)

        fold = prepare(_INT32)
        self._commit = getattr(fold, "commit", None)  # the CUDA kernel's: index tensors only
        self._fold = self._fold_wide = None  # the Triton kernel's: int32 index vectors; int64 track vectors
        if self._commit is None:
            self._fold = fold.taking(*_INDEX_POSITIONS)
            if has_track:
                try:
                    self._fold_wide = prepare(_INT64).taking(*_INDEX_POSITIONS)
                except loader.ArtifactRefused:  # a folder without that binary (another provider's): copies, as before
                    pass

    def matches(self, spec_state) -> bool:
        """Still the pool this plan was made for (same tensor objects)."""
        return (spec_state.temporal is self._pool[0] and spec_state.replayssm_rawv is self._pool[1]
                and spec_state.replayssm_rawk is self._pool[2] and spec_state.replayssm_g is self._pool[3]
                and spec_state.replayssm_beta is self._pool[4])

    def run(self, slots, accept_lens, track_slots=None, track_steps=None) -> None:
        """Fold and roll back: one launch. Index tensors the launch cannot read as given are copied;
        FoldShapeNotSupported (before anything is launched) for one that is not 1-D."""
        if self._commit is not None:
            if self.has_track:
                return self._commit(slots, accept_lens, track_slots, track_steps)
            return self._commit(slots, accept_lens)
        device = self.device_index
        slots, accept_lens = indices(slots, device), indices(accept_lens, device)
        if self.has_track:
            if (self._fold_wide is not None and readable(track_slots, _INT64, device)
                    and readable(track_steps, _INT64, device)):
                self._fold_wide(slots, accept_lens, track_slots, track_steps)
            else:
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
