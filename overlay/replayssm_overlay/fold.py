"""The one function through which the overlay folds an accepted prefix into the GDN state.

Every commit path of the overlay calls `fold_accepted_prefix`; which kernel does the work is decided
here and nowhere else. `describe()` reports the choice for `replayssm-overlay status --json`.

Contract (the same as SGLang 0.5.19's `commit_gdn_replayssm_fold_after_verify`): `spec_state` is the
pool's all-layers speculative state; `state_batch_indices` are physical mamba slots, -1 for padded
rows; `accept_lens` count the accepted drafts plus the bonus token; `last_correct_step_indices` is
`accept_lens - 1`; the optional track pair stores the state after step `mamba_steps_to_track[i]` into
slot `mamba_track_indices[i]` (-1: no track). The temporal state of each active slot becomes, bitwise,
what SGLang's decode recurrence gives token by token over the accepted prefix, and the conv windows are
rolled back to the last accepted step (SGLang's conv scatter, for the active and the track slots).

Which fold, decided once per process (and logged once):
- `RSO_FOLD=sglang`: SGLang's own fold.
- default (`RSO_FOLD` unset or `auto`): the overlay's fold from prebuilt artifacts
  (`replayssm_overlay.kernels.loader`) when they match this node (Triton version, Python, GPU arch,
  checksums); otherwise SGLang's fold, which Triton compiles on first use.
- `RSO_FOLD=overlay`: the overlay's fold, prebuilt when the artifacts match, else compiled by Triton on
  first use (JIT).
A call whose shapes or arguments the overlay's kernels do not cover (another head dim, a specialization
that was not prebuilt) runs SGLang's fold instead, and that switch is logged once with its reason.
"""

from __future__ import annotations

import logging
import os
import threading

ENV_FOLD = "RSO_FOLD"
_MODES = ("auto", "overlay", "sglang")

logger = logging.getLogger("replayssm_overlay.fold")
_lock = threading.Lock()
_choice = None  # (kind, reason, prebuilt (knorm, fold) launchers or None), once decided


def _mode() -> str:
    from replayssm_overlay.errors import OverlayError

    mode = os.environ.get(ENV_FOLD, "auto").strip().lower() or "auto"
    if mode not in _MODES:
        raise OverlayError(f"{ENV_FOLD}={mode!r} is not a fold choice", f"set {ENV_FOLD} to one of {', '.join(_MODES)}")
    return mode


def _decide():
    """(kind, reason, kernels): kind is 'overlay-prebuilt', 'overlay-jit' or 'sglang'."""
    mode = _mode()
    if mode == "sglang":
        return "sglang", f"{ENV_FOLD}=sglang", None
    from replayssm_overlay.kernels import loader

    artifacts, why = loader.open_or_explain()
    if artifacts is not None:
        from replayssm_overlay.kernels import gdn_fold

        try:
            pair = (artifacts.kernel(gdn_fold.gdn_replayssm_knorm_kernel),
                    artifacts.kernel(gdn_fold.gdn_replayssm_fold_kernel))
            return "overlay-prebuilt", f"prebuilt fold kernels from {artifacts.folder}", pair
        except loader.ArtifactRefused as err:
            why = err.what
    if mode == "overlay":
        return "overlay-jit", f"{ENV_FOLD}=overlay; no usable prebuilt kernels ({why}): Triton compiles them", None
    return "sglang", f"no usable prebuilt overlay kernels ({why}); {ENV_FOLD}=overlay would JIT-compile them", None


def chosen():
    """(kind, reason, prebuilt launchers or None): the fold this process uses, decided once."""
    global _choice
    if _choice is None:
        with _lock:
            if _choice is None:
                _choice = _decide()
                logger.info("ReplaySSM GDN fold: %s (%s)", _choice[0], _choice[1])
    return _choice


def fall_back_to_sglang(reason: str) -> None:
    """Use SGLang's fold from now on in this process (a call it does not cover, or the self-check)."""
    global _choice
    with _lock:
        _choice = ("sglang", reason, None)
    logger.warning("ReplaySSM GDN fold: switching to SGLang's fold: %s", reason)


def _overlay_fold(kernels, *, spec_state, state_batch_indices, accept_lens, mamba_track_indices,
                  mamba_steps_to_track, null_block_id) -> None:
    from replayssm_overlay.kernels import gdn_fold

    gdn_fold.fold_all_layers(
        spec_state.temporal, spec_state.replayssm_rawv, spec_state.replayssm_rawk, spec_state.replayssm_g,
        spec_state.replayssm_beta, state_batch_indices, accept_lens, mamba_track_indices, mamba_steps_to_track,
        null_id=null_block_id, kernels=kernels,
    )


def _conv_rollback(spec_state, state_batch_indices, last_correct_step_indices, mamba_track_indices,
                   mamba_steps_to_track) -> None:
    from sglang.kernels.ops.mamba.mamba_state_scatter_triton import fused_conv_window_scatter_with_mask

    track = mamba_track_indices is not None and mamba_steps_to_track is not None
    for conv, windows in zip(spec_state.conv, spec_state.intermediate_conv_window):
        fused_conv_window_scatter_with_mask(conv, windows, state_batch_indices, last_correct_step_indices)
        if track:
            fused_conv_window_scatter_with_mask(conv, windows, mamba_track_indices, mamba_steps_to_track)


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
    kind, _reason, kernels = chosen()
    if kind != "sglang":
        from replayssm_overlay.kernels import gdn_fold, loader

        refusals = (gdn_fold.FoldShapeNotSupported, loader.ArtifactRefused)
        try:
            _overlay_fold(kernels, spec_state=spec_state, state_batch_indices=state_batch_indices,
                          accept_lens=accept_lens, mamba_track_indices=mamba_track_indices,
                          mamba_steps_to_track=mamba_steps_to_track, null_block_id=null_block_id)
        except refusals as err:  # raised before the state is touched
            fall_back_to_sglang(f"the overlay's fold does not cover this call: {err}")
        else:
            _conv_rollback(spec_state, state_batch_indices, last_correct_step_indices, mamba_track_indices,
                           mamba_steps_to_track)
            return
    from sglang.kernels.ops.attention.fla.gdn_replayssm_spec_fold import commit_gdn_replayssm_fold_after_verify

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
    """Which fold the commit path uses on this node, and why. Cheap (imports no torch or triton): once
    decided (by the self-check when a server builds its pool, or the first commit) it reports that
    decision; before, what the settings and artifact folder point to (the node checks -- Triton
    version, GPU arch, checksums -- run at that decision)."""
    if _choice is not None:
        return {"fold": _choice[0], "reason": _choice[1], "decided": True}
    try:
        mode = _mode()
    except Exception as err:  # an invalid RSO_FOLD: the first commit would refuse with this
        return {"fold": "invalid", "reason": str(err), "decided": False}
    if mode == "sglang":
        return {"fold": "sglang", "reason": f"{ENV_FOLD}=sglang", "decided": False}
    from replayssm_overlay.kernels import loader

    folder = loader.artifact_dir()
    if (folder / "manifest.json").is_file():
        return {"fold": "overlay-prebuilt", "decided": False,
                "reason": f"prebuilt kernels in {folder}, checked against this node when a server builds its pool"}
    why = f"no prebuilt kernels in {folder}"
    if mode == "overlay":
        return {"fold": "overlay-jit", "reason": f"{ENV_FOLD}=overlay and {why}", "decided": False}
    return {"fold": "sglang", "reason": why, "decided": False}
