"""The node checks, once before it serves, that the fold it chose commits bitwise what SGLang would.

Why: the overlay's fold is bitwise because it writes out the reduction tree that SGLang's recurrence
(`fused_sigmoid_gating_delta_rule_update`, the kernel verify and decode run) has under the Triton
versions the overlay knows. Another Triton, driver or ptxas can change that kernel's tree, and the
overlay would then commit states that differ in their last bits from stock SGLang's. So when the
configurator lifts the KDA-only refusal (while the request pool is being built, before any request),
`check_before_serving` folds a small random window with the chosen fold and compares it with `torch.equal`
against that kernel replayed token by token on the same inputs. On a mismatch (or if the check cannot
run) the process switches to SGLang's own fold (`fold.fall_back_to_sglang`) and logs an error that says
why. The outcome is written as a small JSON record per process (`records.py`, kind "selfcheck"), which
`replayssm-overlay status --json` reads from another process (`read_records`).

Cost: two layers, a batch of eight rows (two of them padded: slot -1), a conv state of 576 elements per slot
(more than one 512-element conv unit), the pool's own per-rank head shape, dtypes and verify window, launched
through the server's own commit path (`kernels.commit_plan.CommitPlan`), so the prebuilt CUDA kernel is the
one that runs (`RSO_FOLD=triton`: the Triton twin, which Triton compiles here, before serving); the reference
compiles SGLang's recurrence twice (ring write and decode), cached by Triton. The CUDA kernel is launched
twice on the same window: on the grid serving picks for this batch, and on a pinned grid of
`cuda_fold.STRIDED_BLOCKS` blocks (`STAGING_GRID`), where every block walks several items and stages and
prefetches the next one while it folds (`has_next` in `gdn_fold.cu`), the path every batch with more items
than resident blocks runs; its cost (two more launches and compares) is recorded as `staging_seconds`.
A non-fp32 SSM state (`--mamba-ssm-dtype`) is not one the overlay's fold handles: SGLang's fold commits,
said once, and there is nothing to check. On the circular-ring releases (0.5.20 on,
`replayssm_overlay.protocol`) the commit is SGLang's own MTP commit and the overlay's fold never runs:
nothing is checked or compiled, and the record says what commits ("ring-commit").
Every record carries `commit`, `exactness` (`replayssm_overlay.exactness`) and `stock_verify_kernel`, the
kernel stock SGLang would verify with on this server's flags with ReplaySSM off (`verify_kernel.py`), and
`warmup`: SGLang's commit compiled on the pool that serves (`replayssm_overlay.sglang_warmup`), null until it
is arranged.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from replayssm_overlay import exactness, protocol, records

RECORD_SCHEMA = 2
REQUESTS = 8  # rows of the check's batch (a batch of 8): row 0 accepts the whole window, the others random prefixes
PADDED_ROWS = (3, 6)  # rows without a slot (-1), as a padded batch has them
LAYERS = 2  # layers of the check's pool: the kernels' layer strides are exercised
#: the check's conv state per slot: 576 elements, more than one of the CUDA kernel's 512-element conv units
CONV_DIM, CONV_WIDTH = 192, 3
STAGING_GRID = "strided"  # the CUDA kernel's pinned grid on which each block folds several items (has_next)

logger = logging.getLogger("replayssm_overlay.selfcheck")
_checked = {}  # (Geometry, stock verify kernel) -> its record: the check runs once per process and pool geometry
_warmup = {}  # this process's warm-up outcome (`sglang_warmup`), on every record


@dataclass(frozen=True)
class Geometry:
    """Per-rank shapes and dtypes of the GDN ReplaySSM pool, as the fold sees them."""

    num_v_heads: int  # HV
    num_k_heads: int  # H
    head_v_dim: int  # V
    head_k_dim: int  # K
    window: int | None  # verify window N (= ring length); None where no draft token count is published
    state_dtype: str  # "float32", "bfloat16", ...
    ring_dtype: str  # raw k/v ring dtype (the conv dtype)

    @classmethod
    def of_configurator(cls, configurator) -> Geometry:
        """From the configurator's `mamba2_cache_params` and the published window, as the pool sizes them."""
        from sglang.srt.runtime_context import max_speculative_num_draft_tokens

        params = configurator.mambaish_config.mamba2_cache_params
        hv, v, k = params.shape.temporal
        window = max_speculative_num_draft_tokens()
        return cls(
            num_v_heads=hv,
            num_k_heads=params.shape.num_k_heads_per_tp,
            head_v_dim=v,
            head_k_dim=k,
            window=None if window is None else int(window),
            state_dtype=_dtype_name(params.dtype.temporal),
            ring_dtype=_dtype_name(params.dtype.conv),
        )


def _dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def check_before_serving(
    geometry: Geometry, *, seed: int | None = None, protocol_name: str | None = None, stock_verify: str | None = None
) -> dict:
    """Run the check for this process's pool geometry (once; a second pool of the same geometry gets the
    same record), act on it (SGLang's fold on anything but a pass), write the record and return it.
    `protocol_name`: the installed release's (`protocol.installed()` where not given); on a ring release
    nothing is checked. `stock_verify`: the kernel stock SGLang verifies with on this server's flags when
    ReplaySSM is off (`verify_kernel.stock_verify_kernel`), None where unknown; it picks the claim."""
    if (geometry, stock_verify) in _checked:
        return _checked[geometry, stock_verify]
    from replayssm_overlay import fold

    started = time.monotonic()
    protocol_name = protocol.installed() if protocol_name is None else protocol_name
    seed = int.from_bytes(os.urandom(4), "little") if seed is None else seed
    timing = {}
    if protocol_name == protocol.RING:
        outcome, detail = (
            "ring-commit",
            (
                "this release keeps a circular GDN ring, which SGLang's own MTP commit "
                f"({protocol.MTP_COMMIT}) commits; the overlay's fold never runs here, so "
                "nothing of it is checked"
            ),
        )
        used = {"fold": "none", "reason": "the overlay's fold kernels are not used on a circular-ring release"}
    else:
        outcome, detail = _check(geometry, seed, timing)
        if outcome == "passed":
            logger.info("replayssm-overlay: self-check passed: %s", detail)
        elif outcome in ("mismatch", "error"):
            logger.error("replayssm-overlay: self-check: %s; switching to SGLang's fold for this process", detail)
        if outcome != "passed" and fold.chosen()[0] != "sglang":
            fold.fall_back_to_sglang(f"self-check before serving: {detail}")  # logged once, with the reason
        used = fold.describe()
    claim = exactness.describe(
        protocol_name,
        fold=used["fold"],
        state_dtype=geometry.state_dtype,
        ring_dtype=geometry.ring_dtype,
        stock_verify=stock_verify,
    )
    record = {
        "schema": RECORD_SCHEMA,
        "pid": os.getpid(),
        "time": time.time(),
        "outcome": outcome,
        "detail": detail,
        "seed": seed,
        "geometry": asdict(geometry),
        "protocol": protocol_name,
        "fold": used,
        "stock_verify_kernel": stock_verify,
        "commit": claim["commit"],
        "exactness": claim,
        "seconds": round(time.monotonic() - started, 3),
        **timing,
        "warmup": dict(_warmup) or None,
    }
    records.write("selfcheck", record, logger)
    _checked[geometry, stock_verify] = record
    return record


def _check(geometry: Geometry, seed: int, timing: dict) -> tuple[str, str]:
    """(outcome, detail): passed, mismatch, error (the check could not run), not-covered (the overlay's
    fold does not take this pool) or sglang-fold (SGLang's fold is the one in use, or must be). `timing`
    gets the staging grid's cost where it ran."""
    from replayssm_overlay import fold

    kind, reason, kernels = fold.chosen()
    if geometry.state_dtype != "float32":
        return "sglang-fold", (
            f"the SSM state is {geometry.state_dtype} (--mamba-ssm-dtype); the overlay's "
            "fold reproduces the float32 recurrence only, so SGLang's fold commits"
        )
    if kind == "sglang":
        return "sglang-fold", f"SGLang's fold is in use ({reason}); nothing to check"
    try:
        mismatch, uncovered = fold.covered(_compare, geometry, kernels, seed, timing)
    except Exception as err:  # a check that cannot run proves nothing: do not serve the overlay's fold
        return "error", f"the check of the overlay's fold ({kind}) could not run ({type(err).__name__}: {err})"
    if uncovered:
        return "not-covered", f"the overlay's fold does not cover this pool ({uncovered}), so SGLang's fold commits"
    if mismatch:
        return "mismatch", f"the overlay's fold ({kind}) is not bitwise SGLang's recurrence: {mismatch}"
    return "passed", f"the overlay's fold ({kind}) equals SGLang's recurrence bitwise on a random window"


def _compare(geometry: Geometry, kernels, seed: int, timing: dict) -> str:
    """'' if the chosen fold, launched as the server's commit launches it (`kernels.commit_plan`), equals
    the token-by-token recurrence bitwise (and rolls the conv windows back), else what differs. The CUDA
    kernel runs on serving's grid and on STAGING_GRID (`timing["staging_seconds"]`: the latter's cost)."""
    import torch

    from replayssm_overlay import fold

    if not geometry.window or geometry.window < 1:
        raise ValueError(f"no verify window to check (speculative draft tokens: {geometry.window})")
    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    window = _verified_window(geometry, device, seed)
    expected, tracked = window.replayed()
    source = fold.kernel_source(kernels)
    differs = _commit_differs(window, source, expected, tracked)
    if differs or not hasattr(source, "pinned"):
        return differs
    started = time.monotonic()
    differs = _commit_differs(window, source.pinned(STAGING_GRID), expected, tracked)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    timing.update(staging_grid=STAGING_GRID, staging_seconds=round(time.monotonic() - started, 4))
    return f"on the pinned {STAGING_GRID} grid (each block stages its next item), {differs}" if differs else ""


def _commit_differs(window, source, expected, tracked) -> str:
    """'' if `source`'s commit of `window`, without and with a track slot, is the replayed state, else what
    differs."""
    import torch

    from replayssm_overlay.kernels import commit_plan

    for track in (False, True):  # both entry points of the commit (HAS_TRACK)
        pool = window.pool()
        track_slots, track_steps = window.track() if track else (None, None)
        commit_plan.CommitPlan(pool, REQUESTS, track, source).run(
            window.slots, window.accept_lens, track_slots, track_steps
        )
        state = pool.temporal
        for row, slot in enumerate(window.slots.tolist()):
            if slot < 0:
                continue
            if not torch.equal(state[:, slot], expected[:, slot]):
                return (
                    f"slot of request {row} (accepted {int(window.accept_lens[row])} of {window.rawk.shape[3]} "
                    f"tokens) differs after the fold, {_diff(state[:, slot], expected[:, slot])}"
                )
            last = int(window.accept_lens[row]) - 1
            if not torch.equal(pool.conv[0][:, slot], pool.intermediate_conv_window[0][:, row, last]):
                return f"the conv window of request {row} was not rolled back to its last accepted step"
        if track and not torch.equal(state[:, window.track_slot], tracked):
            return f"the track slot differs, {_diff(state[:, window.track_slot], tracked)}"
        untouched = window.untouched_slot(track)
        if not torch.equal(state[:, untouched], window.initial[:, untouched]):
            return "a slot no request commits was written"
    return ""


def _diff(got, want) -> str:
    differ = (got != want).sum().item()
    return f"{differ} of {got.numel()} values, max |delta| {(got - want).abs().max().item():.3g}"


@dataclass
class _Window:
    """LAYERS layers after SGLang's verify wrote the ring of every request row that has a slot: the batch's
    REQUESTS rows hold the slots 0.. in order, except the PADDED_ROWS (slot -1, nothing accepted, as a
    padded batch passes them); the next slot is the track slot, the last one nobody's."""

    inputs: dict  # the recurrence's per-token inputs: q, k, v [layers, B, N, heads, dim], a, b [layers, B, N, HV]
    A_log: object  # [layers, HV]
    dt_bias: object  # [layers, HV]
    initial: object  # [layers, S, HV, V, K] pre-verify state
    rawv: object
    rawk: object
    g: object
    beta: object
    slots: object  # [B] int32, -1 for the padded rows
    accept_lens: object  # [B] int32, 0 for the padded rows
    conv_windows: object  # [layers, B, N, CONV_DIM, CONV_WIDTH] per-step conv windows, random

    def pool(self):
        """A fresh pool (the pre-verify state, the ring, zero conv states) shaped like the server's."""
        import types

        import torch

        conv = torch.zeros(
            LAYERS, self.initial.shape[1], CONV_DIM, CONV_WIDTH, dtype=self.rawk.dtype, device=self.initial.device
        )
        return types.SimpleNamespace(
            temporal=self.initial.clone(),
            replayssm_rawv=self.rawv,
            replayssm_rawk=self.rawk,
            replayssm_g=self.g,
            replayssm_beta=self.beta,
            conv=[conv],
            intermediate_conv_window=[self.conv_windows],
        )

    @property
    def track_slot(self) -> int:
        return REQUESTS - len(PADDED_ROWS)

    def untouched_slot(self, track: bool) -> int:
        return self.track_slot + 1 if track else self.track_slot

    def track(self):
        """Row 0 stores its state after step N//2 into the track slot; the others store nothing. int64, as
        the server passes them (so the check launches what serving launches)."""
        import torch

        device = self.slots.device
        steps = torch.full((REQUESTS,), -1, dtype=torch.int64, device=device)
        slots = torch.full((REQUESTS,), -1, dtype=torch.int64, device=device)
        steps[0], slots[0] = int(self.accept_lens[0]) // 2, self.track_slot
        return slots, steps

    def replayed(self):
        """(state after SGLang's recurrence ran token by token over each accepted prefix, the track slot's
        state: row 0's after its track step). Every step runs every row that has a slot (the recurrence
        compiles once per batch size, a constexpr): a row past its accepted prefix writes a scratch slot that
        only this replay has, one past the pool's."""
        import torch

        fsg = _recurrence_module()
        scratch = self.initial.shape[1]
        state = torch.cat([self.initial, self.initial[:, :1]], dim=1)
        lens = self.accept_lens.tolist()
        rows = [i for i, n in enumerate(lens) if n > 0]
        idx = torch.tensor(rows, device=state.device)
        track_step = lens[0] // 2
        tracked = None
        for t in range(max(lens)):
            slots = torch.tensor(
                [int(self.slots[i]) if t < lens[i] else scratch for i in rows], dtype=torch.int32, device=state.device
            )
            for layer in range(LAYERS):
                inputs = {name: tensor[layer] for name, tensor in self.inputs.items()}
                q, k, v = _packed_qkv(*(inputs[name][idx, t] for name in ("q", "k", "v")))
                fsg.fused_sigmoid_gating_delta_rule_update(
                    A_log=self.A_log[layer],
                    a=inputs["a"][idx, t].contiguous(),
                    dt_bias=self.dt_bias[layer],
                    softplus_beta=1.0,
                    softplus_threshold=20.0,
                    q=q,
                    k=k,
                    v=v,
                    b=inputs["b"][idx, t].contiguous(),
                    initial_state_source=state[layer],
                    initial_state_indices=slots,
                    cu_seqlens=torch.arange(len(rows) + 1, dtype=torch.int32, device=state.device),
                    use_qk_l2norm_in_kernel=True,
                )
            if t == track_step:
                tracked = state[:, int(self.slots[0])].clone()
        return state[:, :scratch], tracked


#: SGLang's recurrence module, wherever the release keeps it (`protocol.KERNEL_PACKAGES`), oldest package
#: first (the first one that imports)
RECURRENCE_MODULES = tuple(reversed(protocol.kernel_module_names("fused_sigmoid_gating_recurrent")))


def _recurrence_module():
    """SGLang's recurrence (`fused_sigmoid_gating_delta_rule_update`), by its full module name (a GPU
    check that loads SGLang's kernel files by path registers them under the first name)."""
    import importlib

    for name in RECURRENCE_MODULES[:-1]:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError:
            continue
    return importlib.import_module(RECURRENCE_MODULES[-1])


def _packed_qkv(q, k, v):
    """q, k [T, H, K] and v [T, HV, V] as views into one row-major [T, conv_dim] tensor, the layout the
    GDN layer hands the kernel (its strides pick the kernel's specialization)."""
    import torch

    T = q.shape[0]
    mixed = torch.cat([q.reshape(T, -1), k.reshape(T, -1), v.reshape(T, -1)], dim=1)
    qs, ks, vs = torch.split(mixed, [q[0].numel(), k[0].numel(), v[0].numel()], dim=1)
    return qs.view(1, T, *q.shape[1:]), ks.view(1, T, *k.shape[1:]), vs.view(1, T, *v.shape[1:])


def _verified_window(geometry: Geometry, device, seed: int) -> _Window:
    """Fresh random inputs for REQUESTS rows on LAYERS layers; SGLang's verify kernel writes the ring
    (cache_ring) of the rows that have a slot."""
    import torch

    HV, H, V, K, N = (
        geometry.num_v_heads,
        geometry.num_k_heads,
        geometry.head_v_dim,
        geometry.head_k_dim,
        geometry.window,
    )
    raw = getattr(torch, geometry.ring_dtype)
    gen = torch.Generator(device="cpu").manual_seed(seed)

    def randn(*shape, scale=1.0, dtype=torch.float32):
        return (torch.randn(*shape, generator=gen) * scale).to(dtype).to(device)

    real = [row for row in range(REQUESTS) if row not in PADDED_ROWS]
    slot_count = len(real) + 2
    inputs = {
        "q": randn(LAYERS, REQUESTS, N, H, K, dtype=raw),
        "k": randn(LAYERS, REQUESTS, N, H, K, dtype=raw),
        "v": randn(LAYERS, REQUESTS, N, HV, V, dtype=raw),
        "a": randn(LAYERS, REQUESTS, N, HV, dtype=raw),
        "b": randn(LAYERS, REQUESTS, N, HV, dtype=raw),
    }
    lens = [N] + [1 + int(torch.randint(N, (1,), generator=gen)) for _ in range(REQUESTS - 1)]
    slots = [-1] * REQUESTS
    for slot, row in enumerate(real):
        slots[row] = slot
    window = _Window(
        inputs=inputs,
        A_log=randn(LAYERS, HV, scale=0.5),
        dt_bias=randn(LAYERS, HV, scale=0.5),
        initial=randn(LAYERS, slot_count, HV, V, K, scale=0.5),
        rawv=torch.zeros(LAYERS, slot_count, HV, N, V, dtype=raw, device=device),
        rawk=torch.zeros(LAYERS, slot_count, H, N, K, dtype=raw, device=device),
        g=torch.zeros(LAYERS, slot_count, HV, N, device=device),
        beta=torch.zeros(LAYERS, slot_count, HV, N, device=device),
        slots=torch.tensor(slots, dtype=torch.int32, device=device),
        accept_lens=torch.tensor(
            [0 if row in PADDED_ROWS else n for row, n in enumerate(lens)], dtype=torch.int32, device=device
        ),
        conv_windows=randn(LAYERS, REQUESTS, N, CONV_DIM, CONV_WIDTH, dtype=raw),
    )
    rows = torch.tensor(real, device=device)
    tokens = len(real) * N
    for layer in range(LAYERS):
        per_token = {name: inputs[name][layer][rows].reshape(tokens, *inputs[name].shape[3:]) for name in inputs}
        q, k, v = _packed_qkv(per_token["q"], per_token["k"], per_token["v"])
        _recurrence_module().fused_sigmoid_gating_delta_rule_update(
            A_log=window.A_log[layer],
            a=per_token["a"],
            dt_bias=window.dt_bias[layer],
            softplus_beta=1.0,
            softplus_threshold=20.0,
            q=q,
            k=k,
            v=v,
            b=per_token["b"],
            initial_state_source=window.initial[layer].clone(),
            initial_state_indices=window.slots[rows],
            cu_seqlens=torch.arange(0, tokens + 1, N, dtype=torch.int32, device=device),
            use_qk_l2norm_in_kernel=True,
            is_kda=False,
            disable_state_update=True,
            cache_ring=True,
            replayssm_rawv=window.rawv[layer],
            replayssm_rawk=window.rawk[layer],
            replayssm_g=window.g[layer],
            replayssm_beta=window.beta[layer],
        )
    return window


def note_warmup(outcome: dict) -> None:
    """`sglang_warmup`'s outcome on this process's record (`warmup`), rewritten; kept for a record written
    later."""
    _warmup.clear()
    _warmup.update(outcome)
    for record in _checked.values():
        record["warmup"] = dict(outcome)
    if _checked:
        records.write("selfcheck", list(_checked.values())[-1], logger)


def read_records(folder: Path | None = None, sglang_dir: Path | None = None) -> list:
    """Every process's self-check record (`records.read`, scoped to `sglang_dir`), newest first."""
    return sorted(records.read("selfcheck", folder, sglang_dir), key=lambda r: r.get("time", 0), reverse=True)
