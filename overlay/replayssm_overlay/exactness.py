"""What commits DFLASH/DSPARK's accepted prefix on this node, what the committed state is bitwise equal to,
and which parity a reference server allows: ONE table (`ROWS`), which `status --json` (`exactness`), the
self-check record, the metrics (`bitwise_equal_to`), `replayssm-smoke --parity auto` and the README table
("What is bitwise where", `markdown_table()`) all read.

What picks the row: the release's protocol (`protocol.py`), the SSM state dtype (`--mamba-ssm-dtype`) and,
on 0.5.19, the kernel stock SGLang verifies with when ReplaySSM is off (`verify_kernel.py`). Each claim is
backed by a test or a measurement:
- 0.5.19 (raw-window fold), float32 state: the verify writes the window through SGLang's Triton
  recurrence and the fold (the overlay's, checked before serving, or SGLang's own) is bitwise that
  recurrence run token by token (tests/cycle, tests/kernels, the H200 runs). That is the state stock
  SGLang commits with ReplaySSM off where stock verifies with Triton; where its dispatcher picks
  FlashInfer's MTP kernel instead (a flashinfer decode or prefill backend on SM90/SM100 without
  `--linear-attn-verify-backend triton`), the ReplaySSM-off state is FlashInfer's and the claim names the
  Triton reference (notes/decisions.md, "FlashInfer verify: serve with the exact claim");
- 0.5.19, another state dtype: SGLang's own fold commits; the overlay claims nothing beyond SGLang's;
- 0.5.20 on (circular ring): SGLang's own MTP commit of that release, bitwise (tests/releases), whatever
  the linear-attention backends (the ring verify runs in their place); with a float32 state that commit
  is within RING_ERROR_BOUND relative RMS of the recurrence run token by token, not bitwise, so it is not
  the ReplaySSM-off state either; with a bfloat16 state that bound does not hold (RING_BF16_DISTANCE,
  measured on the CPU harness: a track slot against the recurrence on the same bfloat16 state), so no
  bound is claimed for a state other than float32;
- caveats on 0.5.19: with `--mamba-radix-cache-strategy extra_buffer` the overlay also commits the track
  slot, which 0.5.19's stock DFLASH with ReplaySSM off never does; k and v are stored in the ring in the
  conv dtype before the fold (`CONV_DTYPE_CAVEAT`).
Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass

from replayssm_overlay.protocol import FOLD, MTP_COMMIT, RING
from replayssm_overlay.verify_kernel import FLASHINFER, TRITON, stock_verify_kernel

RING_ERROR_BOUND = 1e-3  # the ring's distance from the recurrence, any step, float32 state (CPU harness; ~3e-4 H200)
RING_BF16_DISTANCE = 1.73e-3  # the largest distance measured with a bfloat16 state (harness.ring_state_dtype)
OVERLAY_FOLDS = ("overlay-cuda", "overlay-triton")
RING_COMMIT = "sglang-mtp-commit"  # what commits on a ring release, where a fold's name would stand (status, metrics)
STRICT, TIE_AWARE = "strict", "tie-aware"
SPEC_FLAG = "--enable-linear-replayssm-spec"
TRITON_VERIFY_FLAG = "--linear-attn-verify-backend triton"
SGLANG_FOLD = "SGLang's fold (commit_gdn_replayssm_fold_after_verify)"
TRACK_CAVEAT = (
    "with --mamba-radix-cache-strategy extra_buffer the overlay also commits the track slot, which stock "
    "DFLASH with ReplaySSM off never does"
)


@dataclass(frozen=True)
class Row:
    """One row of the table: a configuration class and everything said about it."""

    key: str  # stable id (status's `exactness.row`)
    releases: str  # as the README says them
    protocol: str | None
    state: str  # the SSM state dtypes the row covers, as the README says them
    stock_verify: str  # the kernel stock SGLang verifies with, ReplaySSM off ("any": the row does not depend on it)
    bitwise_equal_to: str | None  # the claim's id (metrics label), None: no bitwise claim
    statement: str  # "{state}" is filled in with the state dtype
    parity: str  # what `--parity auto` picks against a ReplaySSM-off reference of the same algorithm
    reference: str  # what that reference must run for strict parity, or why none allows it


ROWS = (
    Row(
        "fold-float32-triton-verify",
        "0.5.19",
        FOLD,
        "float32",
        TRITON,
        "replayssm-off-state",
        "bitwise equal to the state stock SGLang commits with ReplaySSM off (its per-step snapshots), with "
        "bfloat16 activations and a float32 state",
        STRICT,
        f"the same command line without {SPEC_FLAG}",
    ),
    Row(
        "fold-float32-flashinfer-verify",
        "0.5.19",
        FOLD,
        "float32",
        FLASHINFER,
        "replayssm-off-state-triton-verify",
        f"bitwise equal to the state stock SGLang commits with ReplaySSM off and {TRITON_VERIFY_FLAG} (the Triton "
        "recurrence's per-step snapshots), with bfloat16 activations and a float32 state; with these flags and "
        "ReplaySSM off stock SGLang verifies with FlashInfer's MTP kernel on SM90/SM100 instead, whose state "
        "is not that one",
        STRICT,
        f"the same command line without {SPEC_FLAG}, with {TRITON_VERIFY_FLAG}",
    ),
    Row(
        "fold-low-precision-state",
        "0.5.19",
        FOLD,
        "bfloat16, float16",
        "any",
        None,
        "the SSM state is {state}: SGLang's own fold commits, and the overlay claims nothing beyond it",
        TIE_AWARE,
        "none: no bitwise claim with this state",
    ),
    Row(
        "ring-float32",
        "0.5.20 on",
        RING,
        "float32",
        "any",
        RING_COMMIT,
        f"bitwise equal to SGLang's own MTP commit of this release ({MTP_COMMIT}), which is within "
        f"{RING_ERROR_BOUND:g} relative RMS of the decode recurrence run token by token (not bitwise), so "
        "turning ReplaySSM on can change tokens at near-ties; the overlay's fold kernels are not used",
        TIE_AWARE,
        "none: the ring commit is not the ReplaySSM-off state",
    ),
    Row(
        "ring-low-precision-state",
        "0.5.20 on",
        RING,
        "bfloat16, float16",
        "any",
        RING_COMMIT,
        f"bitwise equal to SGLang's own MTP commit of this release ({MTP_COMMIT}); with a {{state}} state no "
        f"bound on its distance from the decode recurrence is claimed (the {RING_ERROR_BOUND:g} bound holds with a "
        f"float32 state; a bfloat16 one measured {RING_BF16_DISTANCE:g}), so turning ReplaySSM on can change "
        "tokens at near-ties; the overlay's fold kernels are not used",
        TIE_AWARE,
        "none: the ring commit is not the ReplaySSM-off state",
    ),
    Row(
        "unknown-release",
        "any other",
        None,
        "any",
        "any",
        None,
        "not a release whose GDN ReplaySSM protocol the overlay knows: no claim",
        TIE_AWARE,
        "none: no claim",
    ),
)
ROW_BY_KEY = {row.key: row for row in ROWS}


def row_for(protocol: str | None, state_dtype: str | None = None, stock_verify: str | None = None) -> Row:
    """The row of a configuration; `state_dtype` None counts as float32 (SGLang's default under the spec
    flag), `stock_verify` None as Triton (SGLang's default flags)."""
    low_precision = (state_dtype or "float32") != "float32"
    if protocol == RING:
        return ROW_BY_KEY["ring-low-precision-state" if low_precision else "ring-float32"]
    if protocol != FOLD:
        return ROW_BY_KEY["unknown-release"]
    if low_precision:
        return ROW_BY_KEY["fold-low-precision-state"]
    return ROW_BY_KEY[f"fold-float32-{stock_verify or TRITON}-verify"]


def describe(
    protocol: str | None,
    *,
    fold: str | None = None,
    state_dtype: str | None = None,
    ring_dtype: str | None = None,
    stock_verify: str | None = None,
) -> dict:
    """{"row", "protocol", "commit", "bitwise_equal_to" (or None: no bitwise claim), "statement", "caveats",
    "parity", "strict_reference"}. `fold` is the fold in use (`fold.describe()["fold"]` or a self-check
    record's); `stock_verify` the record's `stock_verify_kernel`; None where unknown (no serving process
    recorded it: the statement says what it assumed)."""
    row = row_for(protocol, state_dtype, stock_verify)
    statement = row.statement.format(state=state_dtype)
    caveats = []
    if row.protocol == FOLD:
        caveats = [TRACK_CAVEAT, conv_dtype_caveat(ring_dtype)]
        assumed = [
            what for what, known in (("a float32 state", state_dtype), ("the Triton verify", stock_verify)) if not known
        ]
        if assumed and row.bitwise_equal_to:
            statement += f" (assumed: {' and '.join(assumed)}; no serving process recorded it)"
    return {
        "row": row.key,
        "protocol": protocol,
        "commit": _commit(row, fold),
        "bitwise_equal_to": row.bitwise_equal_to,
        "statement": statement,
        "caveats": caveats,
        "parity": row.parity,
        "strict_reference": row.reference,
    }


def _commit(row: Row, fold: str | None) -> str:
    if row.protocol == RING:
        return f"SGLang's own MTP commit ({MTP_COMMIT})"
    if row.protocol != FOLD:
        return "unknown"
    if row.bitwise_equal_to is None or fold == "sglang":
        return SGLANG_FOLD
    return f"the overlay's fold ({fold})" if fold in OVERLAY_FOLDS else "the chosen fold"


FLOAT16_EXACT_BFLOAT16_EXPONENT = -17  # float16 holds every bfloat16 value from 2^-17 to 65504 in magnitude exactly
CONV_DTYPE_CAVEAT = (
    "k and v are stored in the ring in {ring} before the fold, as in SGLang's own ReplaySSM: activations it "
    "cannot hold exactly are rounded, so that state is not the ReplaySSM-off one, and the self-check cannot "
    "see it: a float16 model on a bfloat16 ring, and with SGLANG_MAMBA_CONV_DTYPE=float16 the bfloat16 values "
    f"below 2^{FLOAT16_EXACT_BFLOAT16_EXPONENT} in magnitude (float16's subnormals keep fewer bits) or above "
    "65504: 8 to 11 of 2^20 SiLU outputs of N(0, 1) inputs"
)


def conv_dtype_caveat(ring_dtype: str | None) -> str:
    return CONV_DTYPE_CAVEAT.format(ring=ring_dtype or "the conv dtype (SGLANG_MAMBA_CONV_DTYPE, default bfloat16)")


def strict_against(row: Row, reference_arguments: dict) -> bool:
    """Whether a reference running the target's algorithm and draft length with ReplaySSM off, with these
    server arguments (`verify_kernel.FLAGS`, `mamba_ssm_dtype`), must match every token: the row allows
    strict parity, the reference keeps a float32 state (or SGLang's default) and verifies with Triton."""
    return (
        row.parity == STRICT
        and (reference_arguments.get("mamba_ssm_dtype") or "float32") == "float32"
        and stock_verify_kernel(reference_arguments) == TRITON
    )


def markdown_table() -> str:
    """The README's table ("What is bitwise where"), one line per row of `ROWS`."""
    head = (
        "| release | SSM state (`--mamba-ssm-dtype`) | stock's verify kernel, ReplaySSM off | the committed state "
        "| `bitwise_equal_to` | `--parity auto` against the same algorithm with ReplaySSM off |\n"
        "|---|---|---|---|---|---|\n"
    )
    lines = []
    for row in ROWS:
        verify = {TRITON: "Triton", FLASHINFER: "FlashInfer's MTP kernel"}.get(row.stock_verify, row.stock_verify)
        parity = f"strict: {row.reference}" if row.parity == STRICT else f"tie-aware ({row.reference})"
        lines.append(
            f"| {row.releases} | {row.state} | {verify} | {row.statement.format(state='bfloat16 or float16')} "
            f"| `{row.bitwise_equal_to or 'none'}` | {parity} |"
        )
    return head + "\n".join(lines) + "\n"
