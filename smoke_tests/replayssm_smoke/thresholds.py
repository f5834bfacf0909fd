"""Per-model gates from a thresholds YAML (built in, or --thresholds FILE), validated before any request.

The profile is picked by glob on the served model's path/name (first match wins) and, optionally, the
speculative algorithm. A profile may also hold the model's measured accept length per class
(`baseline_accept_length`): not a gate, the reference the fleet's alerts compare the periodic smoke and
the live traffic with (`prom.py`, deploy/monitoring). A user file that sets thresholds for a class with no prompts is
an error: a gate
that silently checks nothing must not read as a pass. PyYAML is imported when a file is read, not with
the module, so `replayssm-smoke --help` works without it and a run without it is a clear exit 2.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import sys
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from .errors import SmokeEnvironmentError

BUILTIN = "builtin:thresholds.yaml"
CLASS_KEYS = {"min_mean_accept_length", "min_p10_accept_length"}
PROFILE_KEYS = {
    "name",
    "match",
    "algorithms",
    "how_measured",
    "acceptance",
    "metrics_max_relative_diff",
    "tie_margin",
    "baseline_accept_length",
}


@dataclass(frozen=True)
class Profile:
    name: str
    match: tuple[str, ...]
    algorithms: tuple[str, ...] | None
    how_measured: str
    acceptance: dict[str, dict[str, float]] = field(default_factory=dict)
    metrics_max_relative_diff: float | None = None
    tie_margin: float | None = None
    baseline_accept_length: dict[str, float] = field(default_factory=dict)

    def matches(self, names: list[str], algorithm: str | None) -> bool:
        if self.algorithms is not None and (algorithm or "").upper() not in self.algorithms:
            return False
        return any(fnmatch.fnmatch(n.lower(), pat.lower()) for n in names if n for pat in self.match)


def _number(value, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise SmokeEnvironmentError(
            f"{where}: expected a non-negative number, got {value!r}", "fix the thresholds file"
        )
    return float(value)


def _profile(source: str, index: int, raw) -> Profile:
    where = f"{source}: profiles[{index}]"
    if not isinstance(raw, dict):
        raise SmokeEnvironmentError(f"{where}: expected a mapping", "see the built-in thresholds.yaml for the layout")
    unknown = set(raw) - PROFILE_KEYS
    if unknown:
        raise SmokeEnvironmentError(f"{where}: unknown key(s) {sorted(unknown)}", f"allowed: {sorted(PROFILE_KEYS)}")
    match = raw.get("match")
    if not isinstance(match, list) or not match or not all(isinstance(m, str) for m in match):
        raise SmokeEnvironmentError(f"{where}: 'match' must be a non-empty list of globs", 'use ["*"] for a default')
    algorithms = raw.get("algorithms")
    if algorithms is not None and (not isinstance(algorithms, list) or not all(isinstance(a, str) for a in algorithms)):
        raise SmokeEnvironmentError(f"{where}: 'algorithms' must be a list of names", "e.g. [DFLASH, DSPARK]")
    acceptance_raw = raw.get("acceptance") or {}
    if not isinstance(acceptance_raw, dict):
        raise SmokeEnvironmentError(
            f"{where}: 'acceptance' must map class -> gates", "e.g. code: {min_mean_accept_length: 2.0}"
        )
    acceptance = {}
    for cls, gates in acceptance_raw.items():
        if not isinstance(gates, dict) or not gates or set(gates) - CLASS_KEYS:
            raise SmokeEnvironmentError(
                f"{where}: acceptance.{cls} must set some of {sorted(CLASS_KEYS)}",
                "e.g. code: {min_mean_accept_length: 2.0}",
            )
        acceptance[str(cls)] = {k: _number(v, f"{where}: acceptance.{cls}.{k}") for k, v in gates.items()}
    baseline_raw = raw.get("baseline_accept_length") or {}
    if not isinstance(baseline_raw, dict):
        raise SmokeEnvironmentError(
            f"{where}: 'baseline_accept_length' must map class -> accept length",
            "e.g. baseline_accept_length: {code: 3.1, prose: 2.4}",
        )
    baseline = {str(cls): _number(v, f"{where}: baseline_accept_length.{cls}") for cls, v in baseline_raw.items()}
    diff, tie = raw.get("metrics_max_relative_diff"), raw.get("tie_margin")
    return Profile(
        name=str(raw.get("name") or f"profiles[{index}]"),
        match=tuple(match),
        algorithms=tuple(a.upper() for a in algorithms) if algorithms is not None else None,
        how_measured=str(raw.get("how_measured") or "not stated"),
        acceptance=acceptance,
        metrics_max_relative_diff=None if diff is None else _number(diff, f"{where}: metrics_max_relative_diff"),
        tie_margin=None if tie is None else _number(tie, f"{where}: tie_margin"),
        baseline_accept_length=baseline,
    )


def load_profiles(path: str | None) -> tuple[str, list[Profile]]:
    source = path or BUILTIN
    try:
        import yaml
    except ImportError:
        raise SmokeEnvironmentError(
            f"PyYAML is not installed in this Python ({sys.executable}); replayssm-smoke needs it to read {source}",
            f"{sys.executable} -m pip install 'PyYAML>=5.1' (a dependency of sglang-replayssm-overlay; "
            "installing the wheel without --no-deps brings it)",
        ) from None
    try:
        if path is None:
            text = resources.files(__package__).joinpath("data", "thresholds.yaml").read_text(encoding="utf-8")
        else:
            text = Path(path).read_text(encoding="utf-8")
        doc = yaml.safe_load(text)
    except (OSError, UnicodeDecodeError) as exc:
        raise SmokeEnvironmentError(
            f"cannot read thresholds file {source}: {exc}", "check the --thresholds path"
        ) from None
    except yaml.YAMLError as exc:
        raise SmokeEnvironmentError(f"{source}: not valid YAML: {exc}", "fix the thresholds file") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("profiles"), list) or not doc["profiles"]:
        raise SmokeEnvironmentError(
            f"{source}: expected a top-level 'profiles' list", "see the built-in thresholds.yaml"
        )
    return source, [_profile(source, i, raw) for i, raw in enumerate(doc["profiles"])]


def select_profile(source: str, profiles: list[Profile], names: list[str], algorithm: str | None) -> Profile:
    for profile in profiles:
        if profile.matches(names, algorithm):
            return profile
    raise SmokeEnvironmentError(
        f"{source}: no profile matches model {names[0]!r} with algorithm {algorithm!r}",
        'add a catch-all profile (match: ["*"]) or one for this model',
    )


def check_classes(source: str, profile: Profile, prompt_classes: set[str], user_file: bool) -> Profile:
    """Refuse user thresholds for classes without prompts; drop such classes from the built-in file."""
    empty = sorted(set(profile.acceptance) - prompt_classes)
    if empty and user_file:
        raise SmokeEnvironmentError(
            f"{source}: profile {profile.name!r} sets thresholds for class(es) {empty} but no prompt has that class",
            "add prompts of that class (--add-prompts) or remove those thresholds",
        )
    kept = {cls: gates for cls, gates in profile.acceptance.items() if cls in prompt_classes}
    baseline = {cls: value for cls, value in profile.baseline_accept_length.items() if cls in prompt_classes}
    return dataclasses.replace(profile, acceptance=kept, baseline_accept_length=baseline)


def require_baseline(source: str, profile: Profile, prompt_classes: set[str], model: str) -> None:
    """Refuse a profile without a baseline accept length for every class the prompts have: the fleet's
    acceptance alerts compare with it, and a class without one would be watched by nothing."""
    missing = sorted(prompt_classes - set(profile.baseline_accept_length))
    if missing:
        raise SmokeEnvironmentError(
            f"{source}: profile {profile.name!r} (model {model!r}) has no baseline_accept_length for class(es) "
            f"{missing}: the acceptance alerts have nothing to compare with",
            "measure it on a node known to be good (replayssm-smoke --target URL --json; each class's "
            "acceptance.<class>.mean_accept_length) and add baseline_accept_length: {<class>: <value>, ...} to "
            "that profile, or use a thresholds file whose profile for this model has one",
        )
