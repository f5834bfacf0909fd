"""The overlay's commit (fold + conv rollback, track slot included) as the server runs it: everything that
can be checked is checked once per (pool, batch size, track or not), then each commit is two launches.

Why: the commit runs eagerly once per verify step, after the host has read the accept lengths, so its
host time is on every request's critical path. A `CommitPlan` is made on the first commit of a batch
size: it checks the pool's shapes, strides and dtypes against what the kernels reproduce (raising
`gdn_fold.FoldShapeNotSupported`, `conv_rollback.ConvShapeNotSupported` or `loader.ArtifactRefused`
before anything is launched), computes every integer argument, and prepares the launches
(`launch.PrebuiltKernels` or `launch.JitKernels`). `CommitPlan.run` then launches the commit's one kernel (fold, conv
rollback and track slot; `gdn_fold.gdn_replayssm_fold_kernel`) with index tensors that `indices` has
made what the prepared launch assumes (int32, 1-D, contiguous, 16-byte aligned, on the pool's device:
as given, or copied once). The plan holds the pool object, so the id it is cached under stays unique while cached.
Pools with other than one conv state are refused (GDN pools have one).

`norm` selects where k is normalized (`gdn_fold.NORM_NAMES`) for benchmarks; the server's plans use
`gdn_fold.NORM`. The two-launch variants allocate their scratch on each call.
"""

from __future__ import annotations

from replayssm_overlay.kernels import conv_rollback, gdn_fold

FOLD_OPTIONS = dict(num_warps=gdn_fold.NUM_WARPS, num_stages=gdn_fold.NUM_STAGES)


def indices(tensor, device_index: int):
    """`tensor` if a prepared launch can read it as is, else an int32 contiguous copy (fresh, so aligned)."""
    import torch

    if (tensor.dtype is torch.int32 and tensor.dim() == 1 and tensor.stride(0) == 1 and not tensor.data_ptr() & 15
            and tensor.get_device() == device_index):
        return tensor
    if tensor.dim() != 1:
        raise gdn_fold.FoldShapeNotSupported(f"index tensor of shape {tuple(tensor.shape)} (need 1-D)")
    return tensor.to(device=torch.device("cpu") if device_index < 0 else torch.device("cuda", device_index),
                     dtype=torch.int32, memory_format=torch.contiguous_format, copy=True)


class CommitPlan:
    """Prepared launches for one pool, batch size and track choice."""

    def __init__(self, spec_state, batch: int, has_track: bool, kernels, *, norm: int = gdn_fold.NORM,
                 tree_numpy: bool | None = None):
        import torch

        self.spec_state = spec_state
        self.batch = batch
        self.has_track = has_track
        self.norm = norm
        state = spec_state.temporal
        pool = (state, spec_state.replayssm_rawv, spec_state.replayssm_rawk, spec_state.replayssm_g,
                spec_state.replayssm_beta)
        self._pool = pool
        self.device_index = state.get_device()
        fold_ints = gdn_fold.runtime_args(*pool)
        self.shape = describe_pool(spec_state)
        if tree_numpy is None:
            tree_numpy = kernels.tree_numpy
        example = torch.zeros(batch, dtype=torch.int32, device=state.device)
        examples = (example, example, example, example)
        constexprs = gdn_fold.fold_constexprs(has_track, norm, tree_numpy)
        self._knorm = None
        if norm != gdn_fold.NORM_IN_FOLD.value:
            scratch = gdn_fold.knorm_scratch(state, pool[2], batch)
            grid, args = gdn_fold.knorm_launch_args(state, pool[2], example, example, scratch)
            self._knorm = kernels.prepare(gdn_fold.gdn_replayssm_knorm_kernel, grid, args,
                                          dict(K=gdn_fold.SUPPORTED_K, NULL_ID=-1, FRONT=constexprs["FRONT"],
                                               TREE_NUMPY=tree_numpy), dict(num_warps=1, num_stages=1),
                                          self.device_index)
            self._knorm_ints = args[4:]
        if len(spec_state.conv) != 1 or len(spec_state.intermediate_conv_window) != 1:
            raise conv_rollback.ConvShapeNotSupported(
                f"{len(spec_state.conv)} conv states (the commit's kernel rolls back exactly one, as GDN pools have)")
        conv_src, conv_dst, conv_ints = gdn_fold.conv_args(state, spec_state.conv[0], spec_state.intermediate_conv_window[0])
        self._head = (*pool[:3],)
        self._tail = (conv_src, conv_dst, *pool[3:])
        self._ints = (*fold_ints, *conv_ints)
        self._fold = kernels.prepare(gdn_fold.gdn_replayssm_fold_kernel, gdn_fold.fold_grid(state, batch),
                                     (*self._head, state, *self._tail, *examples, *self._ints), constexprs, FOLD_OPTIONS,
                                     self.device_index)

    def matches(self, spec_state) -> bool:
        """Still the pool this plan was made for (same tensor objects)."""
        pool = (spec_state.temporal, spec_state.replayssm_rawv, spec_state.replayssm_rawk, spec_state.replayssm_g,
                spec_state.replayssm_beta)
        return all(a is b for a, b in zip(pool, self._pool))

    def run(self, slots, accept_lens, track_slots=None, track_steps=None) -> None:
        """Fold and roll back; the index tensors as `indices` returns them."""
        if not self.has_track:
            track_slots, track_steps = slots, accept_lens
        scratch = self._pool[0]
        if self._knorm is not None:
            scratch = gdn_fold.knorm_scratch(self._pool[0], self._pool[2], self.batch)
            self._knorm(self._pool[2], slots, accept_lens, scratch, *self._knorm_ints)
        self._fold(*self._head, scratch, *self._tail, slots, accept_lens, track_slots, track_steps, *self._ints)


def describe_pool(spec_state) -> dict:
    """The pool's geometry, for logs and `status --json` (no tensor contents)."""
    state, rawk = spec_state.temporal, spec_state.replayssm_rawk
    out = {"layers": state.shape[0], "slots": state.shape[1]}
    if state.dim() == 5 and rawk.dim() == 5:
        out.update(HV=state.shape[2], H=rawk.shape[2], V=state.shape[3], K=state.shape[4], window=rawk.shape[3])
    out["dtypes"] = [str(t.dtype).rpartition(".")[2] for t in (state, spec_state.replayssm_rawv, rawk)]
    return out
