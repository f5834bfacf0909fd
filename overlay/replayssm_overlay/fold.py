"""The one function through which the overlay folds an accepted prefix into the GDN state.

The commit of 0.5.19's raw-window fold pools calls `fold_accepted_prefix` (the circular-ring releases
commit with SGLang's own MTP commit instead: `hooks/ring_commit.py`); which kernel does the work is
decided here and nowhere else. `describe()` reports the choice for `replayssm-overlay status --json`.

Contract (the same as SGLang 0.5.19's `commit_gdn_replayssm_fold_after_verify`): `spec_state` is the
pool's all-layers speculative state; `state_batch_indices` are physical mamba slots, -1 for padded
rows; `accept_lens` count the accepted drafts plus the bonus token; `last_correct_step_indices` is
`accept_lens - 1`; the optional track pair stores the state after step `mamba_steps_to_track[i]` into
slot `mamba_track_indices[i]` (-1: no track). The temporal state of each active slot becomes, bitwise,
what SGLang's decode recurrence gives token by token over the accepted prefix, and the conv windows are
rolled back to the last accepted step (SGLang's conv scatter, for the active and the track slots).

Which fold, decided once per process (and logged once):
- default (`RSO_FOLD` unset or `auto`): the CUDA commit kernel (`kernels/gdn_fold.cu`, "overlay-cuda") from
  the prebuilt artifact folder (`replayssm_overlay.kernels.loader`) when it matches this node (GPU arch,
  checksums, kernel source) and the driver loads it; otherwise SGLang's own commit ("sglang"), which the
  node compiles when it builds its pool (`sglang_warmup.py`), so no request pays Triton's compile.
- `RSO_FOLD=triton`: the overlay's Triton kernel (`kernels/gdn_fold.py`, "overlay-triton"), the CUDA
  kernel's JIT twin, compiled by Triton on first use (the self-check before serving is that use).
- `RSO_FOLD=sglang`: SGLang's own commit.
The overlay's commit is a `kernels.commit_plan.CommitPlan` per (pool, batch size, track or not): checked
once, then one launch per call. A call the overlay's kernels do not cover (another head dim, a
layout, dtype or alignment they do not take, a driver call that launched nothing: `errors.NotCovered`,
caught in `covered` and nowhere else) is refused before the state is touched and runs SGLang's commit
for that call only; each such shape is logged once, counted in `describe()`, and recorded on the node
(`records.py`, kind "fallbacks") so that `replayssm-overlay status --json` lists it.
"""

from __future__ import annotations

import logging
import os
import threading

from replayssm_overlay import records
from replayssm_overlay.errors import NotCovered, OverlayError

ENV_FOLD = "RSO_FOLD"
_MODES = ("auto", "triton", "sglang")
_RETIRED = {
    "overlay": "RSO_FOLD=overlay was retired with the prebuilt Triton binaries; RSO_FOLD=triton is the "
    "overlay's Triton kernel, compiled by Triton, and auto the CUDA kernel"
}
#: every fold `chosen()` can name (`metrics.py` reports each as a 0/1 gauge, always present)
FOLDS = ("overlay-cuda", "overlay-triton", "sglang")

logger = logging.getLogger("replayssm_overlay.fold")
_lock = threading.Lock()
_choice = None  # (kind, reason, the loaded cuda_fold.CudaKernels or None), once decided


def _mode() -> str:
    mode = os.environ.get(ENV_FOLD, "auto").strip().lower() or "auto"
    if mode not in _MODES:
        retired = f" ({_RETIRED[mode]})" if mode in _RETIRED else ""
        raise OverlayError(
            f"{ENV_FOLD}={mode!r} is not a fold choice{retired}", f"set {ENV_FOLD} to one of {', '.join(_MODES)}"
        )
    return mode


def _decide():
    """(kind, reason, kernels): kind is 'overlay-cuda', 'overlay-triton' or 'sglang'."""
    mode = _mode()
    if mode == "sglang":
        return "sglang", f"{ENV_FOLD}=sglang", None
    if mode == "triton":
        return "overlay-triton", f"{ENV_FOLD}=triton: the overlay's Triton kernel, compiled by Triton", None
    from replayssm_overlay.kernels import loader

    artifacts, why = covered(loader.ArtifactSet.open)
    if artifacts is not None:
        cuda, why = _cuda_kernels(artifacts)
        if cuda is not None:
            return "overlay-cuda", f"the CUDA commit kernel from {artifacts.folder}", cuda
    return "sglang", f"no usable CUDA commit kernel ({why}); SGLang's fold commits", None


def _cuda_kernels(artifacts):
    """(the folder's CUDA commit kernel loaded on this process's GPU, "") or (None, why): the driver may refuse
    the binary (logged once), and SGLang's fold commits instead."""
    try:
        import torch

        kernels = artifacts.cuda_kernels()
        _, why = covered(kernels.loaded, torch.cuda.current_device())  # the driver refused the binary
    except Exception as err:  # nothing to load it with (no driver library, no CUDA device): SGLang's fold too
        why = f"{type(err).__name__}: {err}"
    if not why:
        return kernels, ""
    logger.warning("ReplaySSM GDN fold: the CUDA commit kernel is not used (%s); SGLang's fold commits", why)
    return None, f"it did not load: {why}"


def chosen():
    """(kind, reason, the loaded cuda_fold.CudaKernels or None): the fold this process uses, decided once."""
    global _choice
    if _choice is None:
        with _lock:
            if _choice is None:
                _choice = _decide()
                logger.info("ReplaySSM GDN fold: %s (%s)", _choice[0], _choice[1])
    return _choice


def fall_back_to_sglang(reason: str) -> None:
    """SGLang's commit for every call of this process from now on (the node's self-check before serving
    found the overlay's fold wrong or unchecked: `selfcheck.py`); logged once, with the reason."""
    global _choice
    with _lock:
        _choice = ("sglang", reason, None)
        _plans.clear()
    logger.warning("ReplaySSM GDN fold: switching to SGLang's commit for this process: %s", reason)


def kernel_source(kernels):
    """The launch source of the chosen overlay fold: the CUDA kernel (a `cuda_fold.CudaKernels`), or the
    Triton kernel through Triton's JIT (None)."""
    from replayssm_overlay.kernels import launch

    return launch.JitKernels() if kernels is None else kernels


def covered(step, *args) -> tuple:
    """(step(*args), "") or (None, why the overlay does not cover it): the one place an `errors.NotCovered`
    (raised before anything touched the state) is caught. Serving then runs SGLang's commit for that call
    (`fold_accepted_prefix`), the fold choice falls back to SGLang's (`_decide`, `_cuda_kernels`), the
    self-check reports "not-covered" (`selfcheck.py`)."""
    try:
        return step(*args), ""
    except NotCovered as err:
        return None, err.what


class _Refusal:
    """A cached "not ours" for one (pool, batch size, track) key: its calls run SGLang's commit."""

    def __init__(self, shape: str, reason: str, spec_state):
        self.shape = shape
        self.reason = reason
        self.spec_state = spec_state  # held, so the id in the key stays this pool's

    def matches(self, spec_state) -> bool:
        return spec_state is self.spec_state


_plans = {}  # (id(spec_state), batch, has_track) -> CommitPlan or _Refusal
_fallbacks = {}  # shape key -> {"shape", "reason", "calls"}: the calls SGLang's commit ran instead
MAX_PLANS = 256  # batch sizes x track choice x pools; beyond, the oldest plan is dropped


def _note_fallback(shape: str, reason: str) -> None:
    """Count one call of `shape` that SGLang's commit runs; log the first one and record it on disk."""
    with _lock:
        entry = _fallbacks.get(shape)
        if entry is None:
            entry = _fallbacks[shape] = {"shape": shape, "reason": reason, "calls": 0}
            logger.warning("ReplaySSM GDN fold: SGLang's commit runs the calls of shape %s: %s", shape, reason)
            _record_fallbacks()
        entry["calls"] += 1


def _record_fallbacks() -> None:
    """Best effort (a commit never fails over its report): this process's fallbacks record."""
    records.write(
        "fallbacks",
        {"pid": os.getpid(), "shapes": [{"shape": e["shape"], "reason": e["reason"]} for e in _fallbacks.values()]},
        logger,
    )


def recorded_fallbacks(sglang_dir=None) -> list:
    """The shapes live serving processes recorded (records of processes that are gone are left out; with
    `sglang_dir`, only those of processes that imported that SGLang tree)."""
    return [
        dict(entry, pid=record["pid"])
        for record in records.read("fallbacks", sglang_dir=sglang_dir)
        if record.get("alive") and record["scope"] == records.TREE and isinstance(record.get("shapes"), list)
        for entry in record["shapes"]
        if isinstance(entry, dict)
    ]


def _plan(key, spec_state, batch, has_track, kernels):
    """The plan for `key`, made and cached on first use; a _Refusal if the overlay does not cover it."""
    from replayssm_overlay.kernels import commit_plan

    with _lock:
        plan = _plans.get(key)
        if plan is not None and plan.matches(spec_state):
            return plan
        plan, why = covered(commit_plan.CommitPlan, spec_state, batch, has_track, kernel_source(kernels))
        if plan is None:
            plan = _Refusal(_shape_key(spec_state, batch, has_track), why, spec_state)
        if len(_plans) >= MAX_PLANS:
            _plans.pop(next(iter(_plans)))
        _plans[key] = plan
        return plan


def _shape_key(spec_state, batch, has_track) -> str:
    from replayssm_overlay.kernels import commit_plan

    try:
        shape = commit_plan.describe_pool(spec_state)
    except Exception as err:  # a pool we cannot even describe: its type says enough
        shape = {"pool": type(spec_state).__name__, "error": type(err).__name__}
    parts = [f"{k}={v}" for k, v in shape.items() if k != "slots"]
    return " ".join(parts + [f"B={batch}", f"track={has_track}"])


def fold_accepted_prefix(
    *,
    spec_state,
    state_batch_indices,
    accept_lens,
    last_correct_step_indices=None,
    mamba_track_indices=None,
    mamba_steps_to_track=None,
    null_block_id: int = -1,
) -> None:
    """Commit the accepted prefixes (see the module docstring). `last_correct_step_indices` must be
    `accept_lens - 1` (the contract of SGLang's commit); None: computed here only if SGLang's commit runs
    (the overlay's conv rollback reads `accept_lens - 1` on the GPU)."""
    kind, _reason, kernels = chosen()
    has_track = not (mamba_track_indices is None or mamba_steps_to_track is None)
    if kind != "sglang":
        batch = state_batch_indices.numel()  # 1-D (else refused by the run); len() costs 1 us more
        if batch == 0:
            return
        key = (id(spec_state), batch, has_track)
        plan = _plans.get(key)
        if plan is None or not plan.matches(spec_state):
            plan = _plan(key, spec_state, batch, has_track, kernels)
        if null_block_id != -1:
            _note_fallback(
                _shape_key(spec_state, batch, has_track),
                f"null block id {null_block_id} (the kernels are built for -1)",
            )
        elif isinstance(plan, _Refusal):
            _note_fallback(plan.shape, plan.reason)
        else:  # an index tensor it cannot take (not 1-D), a launch the driver refused: not covered
            _, why = covered(plan.run, state_batch_indices, accept_lens, mamba_track_indices, mamba_steps_to_track)
            if not why:
                return
            _note_fallback(_shape_key(spec_state, batch, has_track), why)
    sglang_commit(
        spec_state,
        state_batch_indices,
        accept_lens,
        last_correct_step_indices,
        mamba_track_indices,
        mamba_steps_to_track,
        null_block_id,
    )


def sglang_commit(
    spec_state,
    state_batch_indices,
    accept_lens,
    last_correct_step_indices,
    mamba_track_indices,
    mamba_steps_to_track,
    null_block_id,
) -> None:
    """SGLang's own commit, as the overlay's contract calls it (the fallback of every call the overlay's
    kernel does not take, and what `sglang_warmup` compiles before serving)."""
    from sglang.kernels.ops.attention.fla.gdn_replayssm_spec_fold import commit_gdn_replayssm_fold_after_verify

    if last_correct_step_indices is None:
        last_correct_step_indices = accept_lens.to(dtype=state_batch_indices.dtype) - 1
    commit_gdn_replayssm_fold_after_verify(
        spec_state=spec_state,
        state_batch_indices=state_batch_indices,
        accept_lens=accept_lens,
        last_correct_step_indices=last_correct_step_indices,
        mamba_track_indices=mamba_track_indices,
        mamba_steps_to_track=mamba_steps_to_track,
        null_block_id=null_block_id,
    )


def fallbacks() -> list:
    """The shapes whose calls ran SGLang's commit instead of the overlay's, with the reason and count."""
    with _lock:
        return [dict(entry) for entry in _fallbacks.values()]


def describe() -> dict:
    """Which fold the commit path uses on this node, and why. Cheap (imports no torch or triton): once
    decided (by the self-check when a server builds its pool, or the first commit) it reports that
    decision; before, what the settings and artifact folder point to (the node checks -- GPU arch,
    checksums, kernel source, the driver's load -- run at that decision). `fallbacks`: the shapes this
    process ran SGLang's commit for; `fallbacks_recorded`: those of every live serving
    process on this node (`records.py`), which is what `status --json` shows."""
    return {**_describe_choice(), "fallbacks_recorded": recorded_fallbacks()}


def _has_cuda(folder) -> bool:
    from replayssm_overlay.kernels import artifact_format

    try:
        return bool((artifact_format.read_manifest(folder).get("cuda") or {}).get("file"))
    except (OSError, ValueError):
        return False


def _describe_choice() -> dict:
    if _choice is not None:
        return {"fold": _choice[0], "reason": _choice[1], "decided": True, "fallbacks": fallbacks()}
    try:
        mode = _mode()
    except Exception as err:  # an invalid RSO_FOLD: the first commit would refuse with this
        return {"fold": "invalid", "reason": str(err), "decided": False}
    if mode == "sglang":
        return {"fold": "sglang", "reason": f"{ENV_FOLD}=sglang", "decided": False}
    if mode == "triton":
        return {"fold": "overlay-triton", "reason": f"{ENV_FOLD}=triton", "decided": False}
    from replayssm_overlay.kernels import loader

    folder = loader.artifact_dir()
    if _has_cuda(folder):
        return {
            "fold": "overlay-cuda",
            "decided": False,
            "reason": f"the CUDA commit kernel in {folder}, checked against this node when a server builds its pool",
        }
    return {"fold": "sglang", "reason": f"no prebuilt CUDA commit kernel in {folder}", "decided": False}
