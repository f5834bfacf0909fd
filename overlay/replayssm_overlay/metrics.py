"""What `replayssm-overlay status --json` knows about a serving node, as facts a fleet can watch:
`replayssm-overlay metrics` prints them as Prometheus text (for node_exporter's textfile collector) or
as JSON (`make fleet-status` reads that).

Why a separate view of the status: the failures that matter in production leave outputs correct and
only cost speed (a node whose self-check switched it to SGLang's fold, a commit shape the overlay's kernel
does not cover), and an alert needs each as one number. `facts(status)` reduces the status document to
them: what every live serving process of the inspected SGLang tree commits with (from its self-check record, so it is
the decision the
server made, not what this separate process would pick; on a ring release, 0.5.20 on, SGLang's own
MTP commit), the self-check outcomes, the commit shapes that fell back to SGLang's fold, the protocol and
what the commit is bitwise equal to (`exactness`), and the versions. `exposition(facts)` renders them; the
fold in use is one 0/1 gauge per kind, every known kind always present, so a switch to SGLang's fold is
`replayssm_overlay_fold_in_use{fold="sglang"} == 1`. Standard library only: it runs inside the serving
container next to SGLang, from a periodic job.
"""

from __future__ import annotations

from replayssm_overlay import fold, protocol, records
from replayssm_overlay.exactness import RING_COMMIT
from replayssm_overlay.promtext import Exposition

#: the kind reported when no live serving process has recorded one (no server started a GDN ReplaySSM
#: pool on this node, or its records are gone)
NO_FOLD = "none"
KINDS = (*fold.FOLDS, RING_COMMIT, NO_FOLD)


def _kind(record: dict) -> str:
    if record.get("protocol") == protocol.RING:
        return RING_COMMIT
    return (record.get("fold") or {}).get("fold") or "unknown"


def facts(status: dict) -> dict:
    """The watched facts of a `status --json` document (schema in `metrics --help`)."""
    live = [
        r
        for r in status.get("selfcheck") or []
        if r.get("alive") and "problem" not in r and r.get("scope", records.TREE) == records.TREE
    ]
    in_use = sorted({_kind(r) for r in live})
    outcomes: dict[str, int] = {}
    for record in live:
        outcomes[record.get("outcome") or "unknown"] = outcomes.get(record.get("outcome") or "unknown", 0) + 1
    warmups = [r["warmup"] for r in live if isinstance(r.get("warmup"), dict)]
    warmup_outcomes: dict[str, int] = {}
    for warmup in warmups:
        warmup_outcomes[warmup.get("outcome") or "unknown"] = (
            warmup_outcomes.get(warmup.get("outcome") or "unknown", 0) + 1
        )
    kernels = status.get("kernels") or {}
    shapes = sorted({f.get("shape") for f in kernels.get("fallbacks_recorded") or [] if f.get("shape")})
    return {
        "overlay_version": status.get("overlay_version"),
        "sglang_release": status.get("release"),
        "sglang_declared_version": status.get("declared_version"),
        "patch_state": status.get("state"),
        "unverified": bool(status.get("unverified")),
        "protocol": status.get("protocol"),
        "bitwise_equal_to": (status.get("exactness") or {}).get("bitwise_equal_to"),
        "exactness_row": (status.get("exactness") or {}).get("row"),
        "fold_in_use": in_use or [NO_FOLD],
        "fold_expected": kernels.get("fold"),
        "serving_processes": len(live),
        "selfcheck_outcomes": outcomes,
        "unreadable_records": sum(1 for r in status.get("selfcheck") or [] if "problem" in r),
        "fallback_shapes": shapes,
        "warmup_outcomes": warmup_outcomes,
        "warmup_compiles": sum(w.get("compiles") or 0 for w in warmups),
        "warmup_seconds_max": max((w.get("seconds") or 0 for w in warmups), default=0),
    }


def exposition(found: dict, labels: dict[str, str] | None = None) -> str:
    """Prometheus text of `facts(...)`, every sample carrying `labels` (e.g. the service)."""
    out = Exposition(labels)
    out.add(
        "replayssm_overlay_info",
        "gauge",
        "The overlay on this node: versions and patch state in the labels (value always 1).",
        1,
        overlay_version=found["overlay_version"] or "",
        sglang_release=found["sglang_release"] or "unknown",
        sglang_version=found["sglang_declared_version"] or "unknown",
        protocol=found["protocol"] or "unknown",
        bitwise_equal_to=found["bitwise_equal_to"] or "none",
        exactness_row=found.get("exactness_row") or "unknown",
        patch_state=found["patch_state"] or "",
        unverified=str(found["unverified"]).lower(),
    )
    for kind in sorted({*KINDS, *found["fold_in_use"]}):
        out.add(
            "replayssm_overlay_fold_in_use",
            "gauge",
            "1 for each fold a live serving process commits with (its self-check record); "
            f'fold="{RING_COMMIT}" on a ring release, fold="{NO_FOLD}" when no serving process has recorded one.',
            int(kind in found["fold_in_use"]),
            fold=kind,
        )
    out.add(
        "replayssm_overlay_serving_processes",
        "gauge",
        "Live serving processes that ran the self-check before serving.",
        found["serving_processes"],
    )
    for outcome, count in sorted(found["selfcheck_outcomes"].items()):
        out.add(
            "replayssm_overlay_selfcheck_processes",
            "gauge",
            "Live serving processes per self-check outcome (passed, mismatch, error, not-covered, sglang-fold).",
            count,
            outcome=outcome,
        )
    out.add(
        "replayssm_overlay_unreadable_records",
        "gauge",
        "Self-check records on this node that could not be read.",
        found["unreadable_records"],
    )
    out.add(
        "replayssm_overlay_fallback_shapes",
        "gauge",
        "Commit shapes live serving processes ran with SGLang's fold (the overlay's kernel does not cover them).",
        len(found["fallback_shapes"]),
    )
    for shape in found["fallback_shapes"]:
        out.add(
            "replayssm_overlay_fallback_shape",
            "gauge",
            "1 per commit shape that runs SGLang's fold, named in the label.",
            1,
            shape=shape,
        )
    for outcome, count in sorted(found["warmup_outcomes"].items()):
        out.add(
            "replayssm_overlay_warmup_processes",
            "gauge",
            "Live serving processes per warm-up outcome of SGLang's commit on their pool (compiled, pending, "
            "error, not-needed).",
            count,
            outcome=outcome,
        )
    out.add(
        "replayssm_overlay_warmup_compiles",
        "gauge",
        "Triton compiles the warm-ups of live serving processes ran (cache hits not counted).",
        found["warmup_compiles"],
    )
    out.add(
        "replayssm_overlay_warmup_seconds_max",
        "gauge",
        "The longest warm-up of a live serving process, in seconds.",
        found["warmup_seconds_max"],
    )
    return out.render()
