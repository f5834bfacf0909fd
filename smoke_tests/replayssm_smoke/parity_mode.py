"""Which parity a reference allows: strict (every token equal) or tie-aware (a divergence at a near-tie
is reported, not failed), chosen from what the two servers report.

Why two modes: the overlay's guarantee is that the state it commits is bitwise the state stock SGLang's
speculative decoding commits with ReplaySSM off (its per-step snapshot path). Against a reference that
runs the same algorithm and draft length with `--enable-linear-replayssm-spec` off, every token must
therefore match: strict. Against a reference without speculation no such guarantee exists, in stock
SGLang either: 0.5.19's plain GDN decode on CUDA runs the packed kernel
`fused_recurrent_gated_delta_rule_packed_decode`, which rounds beta to bf16, and its state after one
window differs from the verify recurrence's by about 1.6e-3 relative RMS (measured on an H200), so
speculative and plain decoding agree only up to near-ties: tie-aware.
"""

from __future__ import annotations

STRICT, TIE_AWARE = "strict", "tie-aware"
CHOICES = ("auto", STRICT, TIE_AWARE)


def same_algorithm_replayssm_off(target: dict, reference: dict) -> bool:
    """Whether `reference` (a server summary) runs the target's algorithm and draft length with
    ReplaySSM spec-verify off: the reference the overlay's bitwise guarantee is about."""
    algorithm = (target.get("speculative_algorithm") or "").upper()
    return (
        bool(algorithm)
        and (reference.get("speculative_algorithm") or "").upper() == algorithm
        and reference.get("speculative_num_draft_tokens") == target.get("speculative_num_draft_tokens")
        and not reference.get("enable_linear_replayssm_spec")
    )


def choose(requested: str, target: dict, reference: dict | None) -> tuple[str, str]:
    """(mode, why) for `--parity requested` (auto, strict or tie-aware); `reference` is the reference
    server's summary (or the golden file's recorded one), None if unknown."""
    if requested != "auto":
        return requested, f"--parity {requested}"
    if reference and same_algorithm_replayssm_off(target, reference):
        return STRICT, (f"the reference runs {reference['speculative_algorithm']} with "
                        f"{reference.get('speculative_num_draft_tokens')} draft tokens and ReplaySSM off: "
                        "turning ReplaySSM on must change no token")
    if reference and reference.get("speculative_algorithm"):
        return TIE_AWARE, (f"the reference runs {reference['speculative_algorithm']} but not the target's "
                           "algorithm and draft length with ReplaySSM off")
    return TIE_AWARE, ("the reference decodes without speculation: plain and speculative decoding agree "
                       "only up to near-ties in stock SGLang too")
