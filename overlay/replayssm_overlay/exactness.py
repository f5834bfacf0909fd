"""What commits DFLASH/DSPARK's accepted prefix on this node, and what the committed state is bitwise equal
to: one statement, computed from what the node knows, that `status --json` (`exactness`), the self-check
record, README.md and smoke_tests/README.md say alike.

What decides it: the release's protocol (`protocol.py`), the SSM state dtype (`--mamba-ssm-dtype`) and the
ring (conv) dtype of the serving process's pool (its self-check record), and the fold in use. The claims,
each backed by a test or a measurement:
- 0.5.19 (raw-window fold), float32 state: bitwise equal to the state stock SGLang commits with ReplaySSM
  off (its per-step snapshot path), whichever fold commits (the overlay's, checked before serving, or
  SGLang's own, both bitwise the decode recurrence: tests/cycle, tests/kernels, the H200 runs);
- 0.5.19, another state dtype: SGLang's own fold commits; the overlay claims nothing beyond SGLang's;
- 0.5.20 on (circular ring): SGLang's own MTP commit of that release, bitwise (tests/releases); that
  commit is within RING_ERROR_BOUND relative RMS of the recurrence run token by token, not bitwise;
- caveats on 0.5.19: with `--mamba-radix-cache-strategy extra_buffer` the overlay also commits the track
  slot, which 0.5.19's stock DFLASH with ReplaySSM off never does (it compares against the pre-verify
  length; 0.5.20 on, it does); activations the ring dtype cannot hold exactly (a float16 model on the default
  bfloat16 ring) are rounded into the ring before the fold, as in SGLang's own ReplaySSM, so that state is
  not the ReplaySSM-off one, and the self-check cannot see it (it draws its inputs in the ring dtype).
Standard library only.
"""

from __future__ import annotations

from replayssm_overlay.protocol import FOLD, MTP_COMMIT, RING

RING_ERROR_BOUND = 1e-3  # the ring's distance from the recurrence, any step (CPU harness; ~3e-4 on the H200)
OVERLAY_FOLDS = ("overlay-cuda", "overlay-triton")
TRACK_CAVEAT = ("with --mamba-radix-cache-strategy extra_buffer the overlay also commits the track slot, which stock "
                "DFLASH with ReplaySSM off never does")


def describe(protocol: str | None, *, fold: str | None = None, state_dtype: str | None = None,
             ring_dtype: str | None = None) -> dict:
    """{"protocol", "commit", "bitwise_equal_to" (or None: no bitwise claim), "statement", "caveats"}.
    `fold` is the fold in use (`fold.describe()["fold"]` or a self-check record's); None where unknown."""
    if protocol == RING:
        return _claim(RING, f"SGLang's own MTP commit ({MTP_COMMIT})", "sglang-mtp-commit",
                      f"bitwise equal to SGLang's own MTP commit of this release, which is within {RING_ERROR_BOUND:g} "
                      "relative RMS of the decode recurrence run token by token (not bitwise); the overlay's fold "
                      "kernels are not used", [])
    if protocol != FOLD:
        return _claim(protocol, "unknown", None,
                      "not a release whose GDN ReplaySSM protocol the overlay knows: no claim", [])
    caveats = [TRACK_CAVEAT, _rounding_caveat(ring_dtype)]
    if state_dtype not in (None, "float32"):
        return _claim(FOLD, "SGLang's fold (commit_gdn_replayssm_fold_after_verify)", None,
                      f"the SSM state is {state_dtype}: SGLang's own fold commits, and the overlay claims nothing "
                      "beyond it", caveats)
    who = (f"the overlay's fold ({fold})" if fold in OVERLAY_FOLDS
           else "SGLang's fold (commit_gdn_replayssm_fold_after_verify)" if fold == "sglang" else "the chosen fold")
    return _claim(FOLD, who, "replayssm-off-state",
                  "bitwise equal to the state stock SGLang commits with ReplaySSM off (its per-step snapshots), "
                  "with bfloat16 activations and a float32 state" + ("" if state_dtype else " (state dtype assumed "
                                                                     "float32: no serving process recorded it)"),
                  caveats)


def _rounding_caveat(ring_dtype: str | None) -> str:
    ring = ring_dtype or "the conv dtype (SGLANG_MAMBA_CONV_DTYPE, default bfloat16)"
    return (f"k and v are stored in the ring in {ring} before the fold, as in SGLang's own ReplaySSM: activations "
            "it cannot hold exactly (a float16 model on a bfloat16 ring) are rounded, so that state is not the "
            "ReplaySSM-off one, and the self-check cannot see it")


def _claim(protocol, commit: str, bitwise: str | None, statement: str, caveats: list) -> dict:
    return {"protocol": protocol, "commit": commit, "bitwise_equal_to": bitwise, "statement": statement,
            "caveats": caveats}
