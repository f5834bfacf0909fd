"""The multi-step verify -> commit cycle on a GDN circular-ring pool (SGLang 0.5.20 and later), checked
step by step against SGLang's own MTP commit of the installed release (harness only).

One scenario runs a few to 40+ consecutive verify steps on one real `HybridReqToTokenPool`. Each step:
SGLang's ring verify appends the window (`harness.ring.ring_verify`); the pool is snapshotted; SGLang's
MTP commit (`spec_utils.commit_mamba_states_after_verify`, called as EAGLE/MTP calls it, with an
EAGLE-style `accept_index` whose unaccepted entries are -1) commits it and its result is kept; the pool
is put back; the commit under test (the DFLASH/DSPARK method of the SGLang this process imported, stock
or patched, or the overlay's hook directly) commits the same step; every state, conv, ring and cursor
tensor must then be bitwise equal to the MTP result. Alongside, the verify recurrence run token by
token (`harness.ring.recurrence_state`) is advanced from the same start state on the verify's own conv
outputs, and the relative RMS distance of the ring's state (materialized on copies,
`harness.ring.materialized_state`) and of every stored track slot from it is recorded per step. The ring is lossy by
design (bf16/TF32-style compact dots), so that distance is reported and bounded, not required to be 0.
"""

import random
import time
import traceback
from dataclasses import asdict, dataclass, field

import torch

from harness import ring, stand_ins
from harness.context import TRACK_INTERVAL, published
from harness.gdn_pool import TinyGDN, build_pool
from harness.recurrence import place_batch, random_weights, random_window

#: The tiny GDN for the ring: SGLang's ring verify needs K >= 32 (two 16-wide tl.dot halves).
RING_MODEL = TinyGDN(num_k_heads=1, num_v_heads=2, head_k_dim=32, head_v_dim=32)
#: Documented bound on the ring's relative RMS distance from the token-by-token recurrence, any step; `status`
#: states it (`replayssm_overlay.exactness.RING_ERROR_BOUND`, held equal by tests/releases; the harness runs
#: without the overlay importable too). Measured on CPU (interpreter, IEEE fp32 dots): see notes/perf.md; the
#: H200 with TF32 dots: ~3e-4 at 40 steps.
RING_ERROR_BOUND = 1e-3


@dataclass(frozen=True)
class RingScenario:
    name: str
    algorithm: str  # DFLASH | DSPARK
    draft_tokens: int  # N
    schedule: tuple  # per step, per row: commit length incl. the bonus (1..N)
    ring_len: int = 16  # L = --linear-replayssm-cache-len
    padded_rows: tuple = ()  # rows whose mamba slot is -1
    seq_lens_pre: tuple | None = None  # start lengths; given => extra-buffer tracking on

    @property
    def tracked(self) -> bool:
        return self.seq_lens_pre is not None


def _random_schedule(steps: int, rows: int, draft_tokens: int, seed: int) -> tuple:
    rng = random.Random(seed)
    return tuple(tuple(rng.randint(1, draft_tokens) for _ in range(rows)) for _ in range(steps))


RING_SCENARIOS = (
    # N=2, L=8: the cursors advance 1 a step and flush when write_pos + 2N > L (step 5), so the
    # bonus-only steps before and after a flush are both covered
    RingScenario("bonus only", "DFLASH", 2, ((1, 1),) * 6, ring_len=8),
    # flush at the third step, ring positions wrap past L=16 at the fifth
    RingScenario("all accepted", "DFLASH", 4, ((4, 4),) * 5),
    # the long run: 42 steps, several flushes and wraps, the distance from the recurrence over all
    RingScenario("mixed lengths", "DSPARK", 4, _random_schedule(42, 2, 4, seed=1)),
    RingScenario("padded rows", "DFLASH", 4, ((3, 1, 4),) * 3, padded_rows=(1,)),
    # extra-buffer tracking (interval 8): several rows cross a multiple of 8 within the window
    RingScenario("track crossing", "DFLASH", 4, ((4, 2, 3),) * 4, seq_lens_pre=(5, 13, 20)),
    RingScenario("track crossing", "DSPARK", 4, ((4, 2, 3),) * 4, seq_lens_pre=(5, 13, 20)),
    # L = N: write_pos + 2N > L after every commit, so every commit materializes (DFLASH's usual
    # block 16 with SGLang's default L 16)
    RingScenario("flush every commit (L = N)", "DFLASH", 16, ((16, 9),) * 2, ring_len=16),
)


def mtp_commit(worker, batch, commit_lens, draft_tokens: int) -> None:
    """SGLang's own MTP/EAGLE post-verify commit of the installed release, for a linear chain."""
    from sglang.srt.speculative.spec_utils import commit_mamba_states_after_verify

    bs = commit_lens.shape[0]
    steps = torch.arange(draft_tokens, dtype=torch.int32)
    accept_index = torch.where(
        steps[None, :] < commit_lens[:, None],
        torch.arange(bs, dtype=torch.int32)[:, None] * draft_tokens + steps[None, :],
        torch.full((bs, draft_tokens), -1, dtype=torch.int32),
    )
    commit_mamba_states_after_verify(
        worker.target_worker, batch, accept_lens=commit_lens, accept_index=accept_index, draft_token_num=draft_tokens
    )


@dataclass
class RingResult:
    scenario: str
    algorithm: str
    draft_tokens: int
    ring_len: int
    steps: int
    committed_steps: int = 0
    error: str | None = None
    flushes: int = 0  # steps at which at least one row materialized its ring
    wraps: int = 0  # rows whose ring position wrapped past L
    tracked_steps: int = 0  # track slots stored
    equal_to_mtp: list = field(default_factory=list)  # per step: every tensor bitwise equal
    mismatched_tensors: list = field(default_factory=list)  # (step, name) pairs
    relative_rms: list = field(default_factory=list)  # per step, active rows
    track_relative_rms: list = field(default_factory=list)  # per stored track slot
    seconds: float = 0.0

    @property
    def bitwise_equal_to_mtp(self) -> bool:
        return self.committed_steps == self.steps and all(self.equal_to_mtp)

    def to_dict(self) -> dict:
        return {
            **asdict(self),
            "bitwise_equal_to_mtp": self.bitwise_equal_to_mtp,
            "max_relative_rms": max(self.relative_rms + self.track_relative_rms, default=None),
        }


def _error_line(error: BaseException) -> str:
    frame = traceback.extract_tb(error.__traceback__)[-1]
    return f"{type(error).__name__}: {error} (at {frame.filename.rsplit('/sglang/', 1)[-1]}:{frame.lineno})"


def _relative_rms(actual: torch.Tensor, expected: torch.Tensor) -> float:
    return float((actual.double() - expected.double()).norm() / expected.double().norm())


def run_ring_cycle(
    scenario: RingScenario, commit, *, model: TinyGDN = RING_MODEL, seed: int = 0, pool_builder=build_pool, on_step=None
) -> RingResult:
    """Run the scenario's steps, committing with `commit(worker, batch, pre, post, commit_lens)` (see
    `harness.cycle.sglang_commit` / `hook_commit`). A failing commit is recorded, never raised.
    `pool_builder` makes the request pool (the PD-decode pool: `harness.pd_decode`); `on_step(pool, slots,
    rows, outputs, track_slots)`, if given, sees each step after its commit (outputs: the verify's, per layer)."""
    started = time.monotonic()
    generator = torch.Generator().manual_seed(seed)
    bs, draft_tokens = len(scenario.schedule[0]), scenario.draft_tokens
    total_slots = 2 * bs + 2
    pool = pool_builder(model, slots=total_slots, draft_tokens=draft_tokens, ring_len=scenario.ring_len)
    result = RingResult(
        scenario=scenario.name,
        algorithm=scenario.algorithm,
        draft_tokens=draft_tokens,
        ring_len=scenario.ring_len,
        steps=len(scenario.schedule),
    )
    if not ring.is_ring_pool(pool):
        result.error = "the pool is not a GDN circular-ring pool (SGLang 0.5.19 uses the raw-window fold)"
        return result
    slots, track_slots = place_batch(pool, total_slots, bs, scenario.padded_rows, scenario.tracked, generator)
    weights = random_weights(model, generator)
    rows = torch.arange(1, bs + 1, dtype=torch.int64)  # req-pool rows (0 stays unused)
    pool.req_index_to_mamba_index_mapping[rows] = slots
    spec = pool.get_speculative_mamba2_params_all_layers()
    reference_temporal = spec.temporal.clone()
    pre = torch.tensor(scenario.seq_lens_pre or [16] * bs, dtype=torch.int64)
    active = [int(s) for s in slots if s >= 0]
    positions = torch.zeros(bs, dtype=torch.int64)  # cumulative ring position per row, for wraps
    for step, lens in enumerate(scenario.schedule):
        commit_lens = torch.tensor(lens, dtype=torch.int32)
        post = pre + commit_lens.to(pre.dtype)
        track_steps = torch.tensor(
            [next((j for j in range(n) if (p + j + 1) % TRACK_INTERVAL == 0), -1) for p, n in zip(pre.tolist(), lens)]
        )
        window = random_window(model, bs, draft_tokens, generator)
        outputs = []
        conv_outs = ring.ring_verify(model, pool, weights, window, slots, rows, outputs)
        before = ring.snapshot(pool)
        worker = stand_ins.spec_worker(pool, stand_ins.hybrid_backend(pool, slots), draft_tokens=draft_tokens)
        with published(scenario.algorithm, speculative_eagle_topk=1):
            mtp_commit(worker, stand_ins.schedule_batch(rows, pre.clone(), track_slots), commit_lens, draft_tokens)
            expected = ring.snapshot(pool)
            ring.restore(pool, before)
            try:
                commit(worker, stand_ins.schedule_batch(rows, pre.clone(), track_slots), pre, post, commit_lens)
            except Exception as error:  # the stock crash is a result here, not a harness failure
                result.error = _error_line(error)
                break
        result.committed_steps += 1
        now = ring.ring_tensors(pool)
        mismatched = [name for name, tensor in now.items() if not torch.equal(tensor, expected[name])]
        result.equal_to_mtp.append(not mismatched)
        if on_step is not None:
            on_step(pool, slots, rows, outputs, track_slots)
        result.mismatched_tensors += [(step, name) for name in mismatched]
        result.flushes += int(bool((now["replayssm_cache_base"] != before["replayssm_cache_base"]).any()))
        reference_tracked = ring.recurrence_state(
            model,
            reference_temporal,
            weights,
            conv_outs,
            window,
            slots,
            commit_lens,
            track_steps if scenario.tracked else None,
        )
        materialized = ring.materialized_state(pool, slots, rows)
        index = torch.tensor(active)
        result.relative_rms.append(_relative_rms(materialized[:, index], reference_temporal[:, index]))
        for i, state in reference_tracked.items():
            result.tracked_steps += 1
            result.track_relative_rms.append(_relative_rms(now["temporal"][:, int(track_slots[i])], state))
        positions += commit_lens.to(torch.int64)
        pre = post
    result.wraps = int((positions > scenario.ring_len).sum())
    result.seconds = round(time.monotonic() - started, 2)
    return result
