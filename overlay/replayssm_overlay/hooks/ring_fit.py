"""The startup rule that the verify window fits the GDN ReplaySSM ring (SGLang 0.5.20 on).

Why: on the ring releases a GDN pool keeps a circular ring of L = `--linear-replayssm-cache-len` rows
(SGLang's default 16) whatever the verify window N is. The verify writes a window's rows at ring
positions `write_pos + t` only where that is below L, and the commit replays `write_pos` rows: a window
longer than the ring commits wrapped, stale rows, silently (measured on the CPU through SGLang's own
kernels, `harness.ring_fit`: relative RMS from the recurrence ~1.1-1.4 for N > L). SGLang enforces a ring
length that is a power of two and at least 2N only for KDA pools (`memory_pool.py`, "early-flush margin");
its GDN kernels assert only the power of two, at the first request; its flush rule
(`_advance_gdn_spec_cursors_kernel`: flush when `write_pos + 2N > L`) documents the same 2N as the
contract ("config enforces max_cache_len >= 2 * max_spec_len"). The overlay serves DFLASH/DSPARK there only
under that rule, SGLang's own, checked when the request pool is built, naming both flags and the
smallest ring that fits. 0.5.19 is not concerned: its fold window is sized to N. MTP/EAGLE are SGLang's
own business: the overlay never asks about them.
"""

from __future__ import annotations

from replayssm_overlay.errors import OverlayError

RING_FLAG = "--linear-replayssm-cache-len"
WINDOW_FLAGS = {  # the flag that sets the verify window N, per algorithm (SGLang's speculative_hook)
    "DFLASH": "--speculative-dflash-block-size (N; --speculative-num-draft-tokens must equal it)",
    "DSPARK": "--speculative-dspark-block-size (gamma; N = gamma + 1 = --speculative-num-draft-tokens)",
}


def smallest_ring(window: int) -> int:
    """The smallest ring length SGLang's rule allows for a verify window of `window` tokens."""
    length = 1
    while length < 2 * window:
        length *= 2
    return length


def fits(window: int, ring_len: int) -> bool:
    """SGLang's rule (its KDA pools'): a power of two, at least twice the longest verify window."""
    return ring_len > 0 and ring_len & (ring_len - 1) == 0 and ring_len >= 2 * window


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
    if ring_len >= 2 and fits(ring_len // 2, ring_len):  # a power of two: a shorter window fits it too
        fix += f", or lower {flag} so that N is at most {ring_len // 2}"
    raise OverlayError(
        f"{algorithm} with --enable-linear-replayssm-spec on a hybrid GDN model: {RING_FLAG} {ring_len} does "
        f"not fit the verify window of {window} tokens ({flag}): the GDN ReplaySSM ring must be a power of two "
        f"and at least twice the window (SGLang's rule for its ring; a shorter ring commits stale rows)",
        fix,
    )


def require_ring_fit(algorithm: str) -> None:
    """`check` on the published configuration: the window the pool is sized with (SGLang's
    `max_speculative_num_draft_tokens`) and `--linear-replayssm-cache-len`."""
    from sglang.srt.runtime_context import get_exec, max_speculative_num_draft_tokens

    window = max_speculative_num_draft_tokens()
    check(algorithm, None if window is None else int(window), int(get_exec().mamba.linear_replayssm_cache_len))
