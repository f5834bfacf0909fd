"""`--prom-out FILE`: a run's result as Prometheus text, for node_exporter's textfile collector.

Why: the periodic smoke on each node (deploy role `sglang_monitor`) is watched by alerts, not read by
people. The file holds the outcome, when it ran and how long it took, the accept length per class next to
the thresholds profile's baseline for that class (the alerts compare the two; no baseline, no series, and
an alert says the baseline is missing), the exactness checks and their divergences, and which gates
failed. A failed or stopped run (exit 1 or 2) writes the file too, with `replayssm_smoke_success 0`; the last
success time is carried over from the file the previous run left, so it always says when the node last passed,
and so are the baselines when the run stopped before it chose a thresholds profile (the dead-draft alerts
compare with them: a run that cannot run must not resolve one). Written atomically (`cliutil.atomic_write`: a
temp name the collector ignores, then a rename).
"""

from __future__ import annotations

import re
from pathlib import Path

from replayssm_overlay.cliutil import atomic_write
from replayssm_overlay.promtext import Exposition, value_of

LAST_SUCCESS = "replayssm_smoke_last_success_timestamp_seconds"
BASELINE = "replayssm_smoke_accept_length_baseline"
_BASELINE_SAMPLE = re.compile(BASELINE + r'\{(?:.*,)?class="((?:[^"\\]|\\.)*)"[^}]*\}\s+(\S+)$')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}
EXACTNESS_HELP = "1 if the exactness check of the last run passed, per check (teacher_forced, parity when run)."
DIVERGENCES_HELP = (
    "Divergences of the last run: teacher-forced violations and ties, parity prompts that failed or diverged at a tie."
)


def _previous(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""


def _previous_baselines(text: str) -> dict[str, float]:
    """class -> baseline in the exposition a previous run left."""
    found = {}
    for line in text.splitlines():
        match = _BASELINE_SAMPLE.match(line)
        if match:
            found[re.sub(r'\\[\\"n]', lambda m: _UNESCAPE[m.group(0)], match.group(1))] = float(match.group(2))
    return found


def exposition(
    doc: dict, finished: float, last_success: float | None, labels: dict[str, str], previous: str = ""
) -> str:
    """Prometheus text of report.json `doc` (a finished or stopped run) that ended at `finished`; `previous`
    is the exposition the run before left (its baselines stay when this run chose no profile)."""
    out = Exposition(labels)
    target = doc.get("target") or {}
    th = doc.get("thresholds") or {}
    out.add(
        "replayssm_smoke_info",
        "gauge",
        "The last smoke run: server, profile and tool in the labels (always 1).",
        1,
        model=target.get("served_model_name") or target.get("model_path") or "",
        algorithm=target.get("speculative_algorithm") or "",
        sglang_version=target.get("sglang_version") or "",
        profile=th.get("profile") or "",
        tool_version=doc.get("tool_version") or "",
    )
    out.add(
        "replayssm_smoke_success", "gauge", "1 if the last smoke run passed every gate, else 0.", int(doc["passed"])
    )
    out.add(
        "replayssm_smoke_exit_code",
        "gauge",
        "Exit code of the last run: 0 pass, 1 a gate failed, 2 error.",
        doc["exit_code"],
    )
    out.add(
        "replayssm_smoke_last_run_timestamp_seconds", "gauge", "When the last smoke run ended (Unix time).", finished
    )
    if doc["passed"]:
        last_success = finished
    if last_success is not None:
        out.add(LAST_SUCCESS, "gauge", "When a smoke run last passed (Unix time); absent until one has.", last_success)
    out.add("replayssm_smoke_duration_seconds", "gauge", "How long the last smoke run took.", doc["duration_s"])
    for gate in doc.get("gates") or []:
        if gate["passed"] is not None:
            out.add(
                "replayssm_smoke_gate_passed",
                "gauge",
                "1 per gate of the last run that passed, 0 if it failed.",
                int(gate["passed"]),
                gate=gate["name"],
            )
    for cls, stats in sorted((doc.get("acceptance") or {}).items()):
        if stats.get("mean_accept_length") is not None:
            out.add(
                "replayssm_smoke_accept_length",
                "gauge",
                "Mean accept length per request of the class in the last run (bonus token included).",
                stats["mean_accept_length"],
                **{"class": cls},
            )
            out.add(
                "replayssm_smoke_accept_length_p10",
                "gauge",
                "10th percentile of the class's accept lengths.",
                stats["p10"],
                **{"class": cls},
            )
    baselines = th.get("baseline_accept_length") if th.get("profile") else _previous_baselines(previous)
    for cls, value in sorted((baselines or {}).items()):
        out.add(
            BASELINE,
            "gauge",
            "The thresholds profile's measured accept length for the class (what the alerts compare with).",
            value,
            **{"class": cls},
        )
    _exactness(out, doc.get("exactness") or {})
    return out.render()


def _exactness(out: Exposition, exactness: dict) -> None:
    tf, parity = exactness.get("teacher_forced"), exactness.get("parity") or {}
    if tf:
        out.add("replayssm_smoke_exactness_passed", "gauge", EXACTNESS_HELP, int(tf["passed"]), check="teacher_forced")
        out.add(
            "replayssm_smoke_checked_tokens",
            "gauge",
            "Tokens the teacher-forced check re-scored.",
            tf["checked_tokens"],
        )
        out.add(
            "replayssm_smoke_divergences",
            "gauge",
            DIVERGENCES_HELP,
            len(tf["violations"]),
            kind="teacher_forced_violation",
        )
        out.add("replayssm_smoke_divergences", "gauge", DIVERGENCES_HELP, len(tf["ties"]), kind="teacher_forced_tie")
    if parity.get("passed") is not None:
        out.add("replayssm_smoke_exactness_passed", "gauge", EXACTNESS_HELP, int(parity["passed"]), check="parity")
        out.add("replayssm_smoke_divergences", "gauge", DIVERGENCES_HELP, len(parity["failing"]), kind="parity_failing")
        out.add(
            "replayssm_smoke_divergences",
            "gauge",
            DIVERGENCES_HELP,
            len(parity["diverged_at_tie"]),
            kind="parity_at_tie",
        )


def write(path: str, doc: dict, finished: float, labels: dict[str, str]) -> None:
    """Replace `path` with the run's metrics, keeping the last success time (and, when the run chose no
    profile, the baselines) its previous content held."""
    previous = _previous(Path(path))
    atomic_write(Path(path), exposition(doc, finished, value_of(previous, LAST_SUCCESS), labels, previous))
