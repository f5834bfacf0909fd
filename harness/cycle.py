"""The verify -> commit cycle on SGLang 0.5.19's own code, checked bitwise against token-by-token decode.

One scenario: a real ReplaySSM pool with random pre-verify states; SGLang's verify kernels write the
ring for a random window; a commit (SGLang's own DFLASH/DSPARK method, or the overlay's hook directly)
folds each row's accepted prefix; then every active slot, every track slot and every other slot is
compared with `torch.equal` against the decode reference (untouched slots against their pre-verify
state). Run it in a process that imported the stock SGLang and the commit crashes; in one that imported
a patched copy, the overlay commits.
"""

import time
import traceback
from dataclasses import asdict, dataclass, field

import torch

from harness import stand_ins
from harness.context import TRACK_INTERVAL, published
from harness.gdn_pool import TinyGDN, build_pool
from harness.recurrence import (
    decode_reference,
    place_batch,
    random_weights,
    random_window,
    verify_ring_write,
)


@dataclass(frozen=True)
class Scenario:
    name: str
    algorithm: str  # DFLASH | DSPARK
    draft_tokens: int  # N: DFLASH block size, DSPARK gamma + 1
    commit_lens: tuple  # per row, accepted drafts + the bonus token (1..N)
    padded_rows: tuple = ()  # rows whose mamba slot is -1 (cuda-graph padding)
    seq_lens_pre: tuple | None = None  # pre-verify lengths; given => extra-buffer tracking is on

    @property
    def tracked(self) -> bool:
        return self.seq_lens_pre is not None

    def expected_track_steps(self, interval: int = TRACK_INTERVAL) -> list:
        """Per row, the accepted step after which the length is a multiple of `interval`, else -1."""
        if not self.tracked:
            return [-1] * len(self.commit_lens)
        return [
            next((j for j in range(n) if (pre + j + 1) % interval == 0), -1)
            for pre, n in zip(self.seq_lens_pre, self.commit_lens)
        ]


SCENARIOS = (
    Scenario("bonus only", "DFLASH", 4, (1, 1, 1)),
    Scenario("all accepted", "DFLASH", 4, (4, 4, 4)),
    Scenario("mixed lengths", "DSPARK", 4, (1, 4, 3, 2)),
    Scenario("padded rows", "DFLASH", 4, (3, 1, 2, 4), padded_rows=(1, 3)),
    Scenario("track crossing", "DFLASH", 6, (6, 2, 5), seq_lens_pre=(5, 13, 20)),
    Scenario("track crossing", "DSPARK", 6, (6, 2, 5), seq_lens_pre=(5, 13, 20)),
)


def sglang_commit(algorithm: str):
    """The commit method of whichever SGLang this process imported (stock, or a patched copy)."""
    if algorithm == "DFLASH":
        import inspect

        from sglang.srt.speculative.dflash_worker_v2 import DFlashWorkerV2

        method = DFlashWorkerV2._update_target_mamba_state_after_verify
        # 0.5.20 on, the method also takes the post-verify lengths (DFLASH passes pre + commit lengths)
        takes_post = "seq_lens_post_verify" in inspect.signature(method).parameters

        def commit(worker, batch, pre, post, commit_lens):
            extra = {"seq_lens_post_verify": post} if takes_post else {}
            method(worker, batch=batch, seq_lens_pre_verify=pre, commit_lens=commit_lens, **extra)

        return commit
    from sglang.srt.speculative.dspark_components.dspark_worker_v2 import DSparkWorkerV2

    def commit(worker, batch, pre, post, commit_lens):
        DSparkWorkerV2._commit_target_mamba_states_after_verify(
            worker, batch=batch, seq_lens_pre_verify=pre, seq_lens_post_verify=post, commit_lens=commit_lens
        )

    return commit


def hook_commit(algorithm: str):
    """The overlay's hook called directly, as the patched method's first line calls it."""
    from replayssm_overlay import hooks

    def commit(worker, batch, pre, post, commit_lens):
        if algorithm == "DFLASH":
            taken = hooks.dflash_commit(worker, batch, pre, commit_lens)
        else:
            taken = hooks.dspark_commit(worker, batch, pre, post, commit_lens)
        if not taken:
            raise AssertionError(f"the overlay declined a GDN ReplaySSM fold pool ({algorithm})")

    return commit


def dflash_track_steps(scenario: Scenario) -> dict:
    """The extra-buffer track steps for a tracked scenario: what SGLang's DFLASH method body computes
    (0.5.19 compares against the pre-verify lengths, so never a step), what the overlay computes, and
    the expected ones."""
    from replayssm_overlay.hooks.commit import steps_to_track

    pre = torch.tensor(scenario.seq_lens_pre, dtype=torch.int64)
    commit_lens = torch.tensor(scenario.commit_lens, dtype=torch.int32)
    backend = stand_ins.recording_backend()
    worker = stand_ins.spec_worker(pool=None, attn_backend=backend)
    batch = stand_ins.schedule_batch(
        torch.arange(len(pre)), pre.clone(), mamba_track_indices=torch.arange(len(pre), dtype=torch.int32)
    )
    with published("DFLASH"):
        sglang_commit("DFLASH")(worker, batch, pre, None, commit_lens)
        from sglang.srt.runtime_context import mamba_track_grid

        overlay = steps_to_track(pre, pre + commit_lens, commit_lens, mamba_track_grid(1))
    return {
        "scenario": scenario.name,
        "commit_lens": list(scenario.commit_lens),
        "seq_lens_pre": list(scenario.seq_lens_pre),
        "sglang_dflash_body": backend.calls[-1]["mamba_steps_to_track"].tolist(),
        "overlay": overlay.tolist(),
        "expected": scenario.expected_track_steps(),
    }


@dataclass
class CycleResult:
    scenario: str
    algorithm: str
    draft_tokens: int
    commit_lens: list
    padded_rows: list
    track_steps: list
    committed: bool
    error: str | None = None
    checks: dict = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def bitwise_equal(self) -> bool:
        return self.committed and bool(self.checks) and all(self.checks.values())

    def to_dict(self) -> dict:
        return {**asdict(self), "bitwise_equal": self.bitwise_equal}


def _error_line(error: BaseException) -> str:
    frame = traceback.extract_tb(error.__traceback__)[-1]
    return f"{type(error).__name__}: {error} (at {frame.filename.rsplit('/sglang/', 1)[-1]}:{frame.lineno})"


def run_cycle(
    scenario: Scenario, commit, *, model: TinyGDN = TinyGDN(), seed: int = 0, pool_builder=build_pool
) -> CycleResult:
    """Verify, commit with `commit` (see `sglang_commit` / `hook_commit`), compare. Never raises for a
    failing commit: the error is recorded in the result. `pool_builder` makes the request pool (the PD-decode
    pool: `harness.pd_decode`)."""
    started = time.monotonic()
    generator = torch.Generator().manual_seed(seed)
    bs, draft_tokens = len(scenario.commit_lens), scenario.draft_tokens
    total_slots = 2 * bs + 2  # active rows, their track slots, and spare slots that must stay untouched
    pool = pool_builder(model, slots=total_slots, draft_tokens=draft_tokens)
    slots, track_slots = place_batch(pool, total_slots, bs, scenario.padded_rows, scenario.tracked, generator)
    weights = random_weights(model, generator)
    window = random_window(model, bs, draft_tokens, generator)
    commit_lens = torch.tensor(scenario.commit_lens, dtype=torch.int32)
    track_steps = scenario.expected_track_steps()

    spec = pool.get_speculative_mamba2_params_all_layers()
    before_temporal, before_conv = spec.temporal.clone(), spec.conv[0].clone()
    verify_ring_write(model, pool, weights, window, slots)

    pre = torch.tensor(scenario.seq_lens_pre or [16] * bs, dtype=torch.int64)
    req_rows = torch.arange(bs, dtype=torch.int64)
    pool.req_index_to_mamba_index_mapping[req_rows] = slots
    worker = stand_ins.spec_worker(pool, stand_ins.hybrid_backend(pool, slots))
    batch = stand_ins.schedule_batch(req_rows, pre.clone(), mamba_track_indices=track_slots)
    result = CycleResult(
        scenario=scenario.name,
        algorithm=scenario.algorithm,
        draft_tokens=draft_tokens,
        commit_lens=list(scenario.commit_lens),
        padded_rows=list(scenario.padded_rows),
        track_steps=track_steps,
        committed=False,
    )
    try:
        with published(scenario.algorithm, speculative_eagle_topk=1):
            commit(worker, batch, pre, pre + commit_lens.to(pre.dtype), commit_lens)
        result.committed = True
    except Exception as error:  # the stock crash is a result here, not a harness failure
        result.error = _error_line(error)
    if result.committed:
        reference = decode_reference(
            model,
            before_temporal,
            before_conv,
            weights,
            window,
            slots,
            commit_lens,
            torch.tensor(track_steps) if scenario.tracked else None,
        )
        result.checks = _compare(spec, before_temporal, before_conv, reference, slots, track_slots, track_steps)
    result.seconds = round(time.monotonic() - started, 2)
    return result


def _compare(spec, before_temporal, before_conv, reference, slots, track_slots, track_steps) -> dict:
    temporal, conv = spec.temporal, spec.conv[0]
    active = [int(s) for s in slots if s >= 0]
    written_tracks = {}
    if track_slots is not None:
        written_tracks = {int(track_slots[i]): i for i, step in enumerate(track_steps) if step >= 0}
    others = [s for s in range(temporal.shape[1]) if s not in active and s not in written_tracks]
    return {
        "state == decode": all(torch.equal(temporal[:, s], reference.temporal[:, s]) for s in active),
        "conv == decode": all(torch.equal(conv[:, s], reference.conv[:, s]) for s in active),
        "track slots == decode at track step": all(
            torch.equal(temporal[:, s], reference.tracked[row][0])
            and torch.equal(conv[:, s], reference.tracked[row][1])
            for s, row in written_tracks.items()
        ),
        "other slots untouched": all(
            torch.equal(temporal[:, s], before_temporal[:, s]) and torch.equal(conv[:, s], before_conv[:, s])
            for s in others
        ),
        "state moved": all(not torch.equal(temporal[:, s], before_temporal[:, s]) for s in active),
    }
