"""The startup rule that the verify window fits the GDN ReplaySSM ring (SGLang 0.5.20 on).

Why: on the ring releases a GDN pool keeps a circular ring of L = `--linear-replayssm-cache-len` rows
(SGLang's default 16) whatever the verify window N is. The verify writes a window's rows at ring
positions `write_pos + t` only where that is below L, and the commit replays `write_pos` rows: a window
longer than the ring commits wrapped, stale rows, silently (measured on the CPU through SGLang's own
kernels, `harness.ring_fit`: relative RMS from the recurrence ~1.1-1.4 for N > L). SGLang enforces a ring
length that is a power of two and at least 2N only for KDA pools (`memory_pool.py`, "early-flush margin");
its GDN kernels assert only the power of two, at the first request; its flush rule
(`_advance_gdn_spec_cursors_kernel`: flush when `write_pos + 2N > L`) documents the same 2N as the
contract ("config enforces max_cache_len >= 2 * max_spec_len"). With N <= L <= 2N that rule flushes at
every commit (a commit advances every row by at least one), so every verify starts at ring position 0 and
never overflows: a ring of exactly N holds the rows a ring of 2N holds. `harness.ring_length` runs both
through each ring release's own MTP commit and compares every step bit for bit (verify outputs, states,
tracks, cursors, padded rows, stale ring rows): equal for windows 8 and 16 on the CPU
(tests/releases/test_ring_length.py) and for 16 and 32 on an H100 under Triton 3.6.0 and 3.7.1
(`benchmarks/gpu_ring.py --pairs`, benchmarks/results/ring-pairs-h100.json). Three facts bound the rule:
SGLang's commit kernel (`gdn_replayssm_compact_commit_kernel`) reduces over the whole ring with `tl.dot`,
which Triton compiles on the GPU only for a ring of at least MIN_RING rows ("K >= 16"), so a shorter ring
fails at the first commit; a window that is not a power of two has no ring of exactly N, and its next power
of two flushes every commit where a ring of 2N defers (the states round differently: CPU, N=5); windows
above SHORT_RING_WINDOWS were not compared. So: a power of two, at least MIN_RING, and at least 2N or exactly
N for N in SHORT_RING_WINDOWS; checked when the request pool is built, naming both flags and the smallest
ring that fits. 0.5.19 is not concerned: its fold window is sized to N. MTP/EAGLE are SGLang's own
business: the overlay never asks about them.
"""

from __future__ import annotations

from replayssm_overlay.errors import OverlayError

RING_FLAG = "--linear-replayssm-cache-len"
WINDOW_FLAGS = {  # the flag that sets the verify window N, per algorithm (SGLang's speculative_hook)
    "DFLASH": "--speculative-dflash-block-size (N; --speculative-num-draft-tokens must equal it)",
    "DSPARK": "--speculative-dspark-block-size (gamma; N = gamma + 1 = --speculative-num-draft-tokens)",
}


MIN_RING = 16  # the shortest ring SGLang's commit kernel compiles for on the GPU (a tl.dot over the ring)
SHORT_RING_WINDOWS = (16, 32)  # windows whose ring of exactly N was shown to commit what a ring of 2N commits


def _power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def smallest_ring(window: int) -> int:
    """The smallest ring length the rule allows for a verify window of `window` tokens."""
    if window in SHORT_RING_WINDOWS:
        return window
    length = MIN_RING
    while length < 2 * window:
        length *= 2
    return length


def fits(window: int, ring_len: int) -> bool:
    """A power of two of at least MIN_RING, at least twice the longest verify window (SGLang's rule for its
    KDA pools), or exactly the window where that is one of SHORT_RING_WINDOWS."""
    return (
        _power_of_two(ring_len)
        and ring_len >= MIN_RING
        and (ring_len >= 2 * window or ring_len == window in SHORT_RING_WINDOWS)
    )


def _windows_that_fit(ring_len: int) -> str:
    """The windows a ring of `ring_len` that fits some window takes, in words."""
    if fits(ring_len, ring_len):
        return f"{ring_len} or at most {ring_len // 2}"
    return f"at most {ring_len // 2}"


def check(algorithm: str, window: int | None, ring_len: int) -> None:
    """Raise OverlayError unless a verify window of `window` tokens fits a ring of `ring_len` rows."""
    flag = WINDOW_FLAGS.get(algorithm, "--speculative-num-draft-tokens")
    if window is None or window < 1:
        raise OverlayError(
            f"{algorithm} with --enable-linear-replayssm-spec on a hybrid GDN model: no verify window is "
            f"published (speculative draft tokens: {window}), so it cannot be checked against {RING_FLAG}",
            f"set {flag}",
        )
    if fits(window, ring_len):
        return
    smallest = smallest_ring(window)
    fix = f"set {RING_FLAG} {smallest} (the smallest valid length for a window of {window})"
    if fits(ring_len // 2, ring_len):  # a ring that fits: a shorter window fits it too
        fix += f", or lower {flag} so that N is {_windows_that_fit(ring_len)}"
    if not _power_of_two(ring_len):
        why = "SGLang's ring kernels index the ring modulo a power of two"
    elif ring_len < window:
        why = "a ring shorter than the window commits stale rows"
    elif ring_len < MIN_RING:
        why = f"SGLang's commit kernel compiles on the GPU only for a ring of at least {MIN_RING}"
    else:
        why = "between N and 2N only those rings were shown to commit bitwise what a ring of 2N commits"
    windows = " or ".join(str(w) for w in SHORT_RING_WINDOWS)
    raise OverlayError(
        f"{algorithm} with --enable-linear-replayssm-spec on a hybrid GDN model: {RING_FLAG} {ring_len} does "
        f"not fit the verify window of {window} tokens ({flag}): the GDN ReplaySSM ring must be a power of two "
        f"of at least {MIN_RING}, and at least twice the window or exactly a window of {windows} ({why})",
        fix,
    )


def require_ring_fit(algorithm: str) -> None:
    """`check` on the published configuration: the window the pool is sized with (SGLang's
    `max_speculative_num_draft_tokens`) and `--linear-replayssm-cache-len`."""
    from sglang.srt.runtime_context import get_exec, max_speculative_num_draft_tokens

    window = max_speculative_num_draft_tokens()
    check(algorithm, None if window is None else int(window), int(get_exec().mamba.linear_replayssm_cache_len))
