"""Which parity a reference allows: strict (every token equal) or tie-aware (a divergence at a near-tie
is reported, not failed), chosen from what the two servers report.

Why two modes: what the overlay guarantees depends on the release and the configuration, one row of the
overlay's table (`replayssm_overlay.exactness.ROWS`, the README's "What is bitwise where"), picked here
from the target's `/server_info` (its SGLang version, `--mamba-ssm-dtype` and `--linear-attn-*` flags).
Only on 0.5.19 with a float32 state is the committed state bitwise a ReplaySSM-off state, the one stock
SGLang commits when it verifies with the Triton recurrence: against a reference running the same
algorithm and draft length with `--enable-linear-replayssm-spec` off, a float32 state and a Triton verify
(`exactness.strict_against`), every token must match: strict. Everywhere else no such guarantee exists,
in stock SGLang either: on 0.5.20 on the commit is SGLang's MTP commit, within 1e-3 of the
recurrence, not bitwise; a reference that verifies with FlashInfer's MTP kernel commits FlashInfer's
state; and a reference without speculation decodes with another kernel (0.5.19's plain GDN decode on
CUDA runs `fused_recurrent_gated_delta_rule_packed_decode`, which rounds beta to bf16; about 1.6e-3
relative RMS from the verify recurrence after one window, measured on an H200). So those agree only up
to near-ties: tie-aware.
"""

from __future__ import annotations

from replayssm_overlay import exactness, protocol
from replayssm_overlay.patcher.releases import RING_RELEASES, SUPPORTED_RELEASES
from replayssm_overlay.verify_kernel import given_flags, stock_verify_kernel

STRICT, TIE_AWARE = exactness.STRICT, exactness.TIE_AWARE
CHOICES = ("auto", STRICT, TIE_AWARE)


def same_algorithm_replayssm_off(target: dict, reference: dict) -> bool:
    """Whether `reference` (a server summary) runs the target's algorithm and draft length with
    ReplaySSM spec-verify off: the only reference a bitwise guarantee can be about."""
    algorithm = (target.get("speculative_algorithm") or "").upper()
    return (
        bool(algorithm)
        and (reference.get("speculative_algorithm") or "").upper() == algorithm
        and reference.get("speculative_num_draft_tokens") == target.get("speculative_num_draft_tokens")
        and not reference.get("enable_linear_replayssm_spec")
    )


def target_row(target: dict) -> exactness.Row:
    """The row of the exactness table that the target server's summary falls in (its GPU unknown here:
    a flag combination that verifies with FlashInfer's MTP kernel on SM90/SM100 counts as doing so)."""
    version = str(target.get("sglang_version") or "")
    tree_protocol = (
        protocol.RING if version in RING_RELEASES else protocol.FOLD if version in SUPPORTED_RELEASES else None
    )
    return exactness.row_for(tree_protocol, target.get("mamba_ssm_dtype"), stock_verify_kernel(target))


def choose(requested: str, target: dict, reference: dict | None) -> tuple[str, str]:
    """(mode, why) for `--parity requested` (auto, strict or tie-aware); `reference` is the reference
    server's summary (or the golden file's recorded one), None if unknown."""
    if requested != "auto":
        return requested, f"--parity {requested}"
    if not (reference and reference.get("speculative_algorithm")):
        return TIE_AWARE, (
            "the reference decodes without speculation: plain and speculative decoding agree "
            "only up to near-ties in stock SGLang too"
        )
    if not same_algorithm_replayssm_off(target, reference):
        return TIE_AWARE, (
            f"the reference runs {reference['speculative_algorithm']} but not the target's "
            "algorithm and draft length with ReplaySSM off"
        )
    row = target_row(target)
    where = f'the target is row {row.key} of "What is bitwise where" (SGLang {target.get("sglang_version")})'
    if exactness.strict_against(row, reference):
        return STRICT, (
            f"the reference runs {reference['speculative_algorithm']} with "
            f"{reference.get('speculative_num_draft_tokens')} draft tokens and ReplaySSM off, verifying "
            f"with Triton ({given_flags(reference)}), and {where}: turning ReplaySSM on must change "
            "no token"
        )
    if row.parity == STRICT:
        return TIE_AWARE, (
            f"{where}, but the reference ({given_flags(reference)}, --mamba-ssm-dtype "
            f"{reference.get('mamba_ssm_dtype') or 'unset'}) may verify with FlashInfer's MTP kernel "
            f"or keep another state: strict parity needs {row.reference}"
        )
    return TIE_AWARE, (
        f"{where}: {row.statement.format(state=target.get('mamba_ssm_dtype'))}; strict parity: {row.reference}"
    )
