"""Prometheus text exposition (format 0.0.4), written the same way by `replayssm-overlay metrics` and
`replayssm-smoke --prom-out`.

Both write files that node_exporter's textfile collector serves, so both need the same escaping, the same
HELP/TYPE header per family and the same value formatting; a hand-written line that escaped a label
differently would make the collector drop the whole file. Standard library only (the smoke suite imports
it without torch or Triton). `value_of` reads one sample back, for a job that carries a value over from
its previous file (the smoke's last success time).
"""

from __future__ import annotations

import math
import re

_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
TYPES = ("gauge", "counter", "untyped")


def _escape_label(value) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _format_value(value) -> str:
    value = float(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(int(value)) if value.is_integer() and abs(value) < 2**53 else repr(value)


def parse_labels(pairs: list[str] | None) -> dict[str, str]:
    """KEY=VALUE strings (command-line `--label` options) as a label mapping; ValueError names a bad one."""
    labels = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not _LABEL.match(key) or key.startswith("__"):
            raise ValueError(f"{pair!r} is not KEY=VALUE with a Prometheus label name as KEY")
        labels[key] = value
    return labels


class Exposition:
    """Metric families in the order first added; `render()` is the text a scrape (or a .prom file) holds.

    `constant` labels go on every sample (e.g. the service a node job reports on)."""

    def __init__(self, constant: dict[str, str] | None = None) -> None:
        self.constant = dict(constant or {})
        self._families: dict[str, tuple[str, str, list]] = {}

    def add(self, name: str, metric_type: str, help_text: str, value, **labels) -> None:
        """One sample of family `name` (gauge, counter or untyped); the family's first HELP text is kept."""
        if not _NAME.match(name) or metric_type not in TYPES:
            raise ValueError(f"bad metric {name!r} of type {metric_type!r}")
        family = self._families.setdefault(name, (metric_type, help_text, []))
        if family[0] != metric_type:
            raise ValueError(f"{name} added as {family[0]} and as {metric_type}")
        bad = [key for key in labels if not _LABEL.match(key)]
        if bad:
            raise ValueError(f"bad label name(s) {bad} on {name}")
        family[2].append(({**self.constant, **labels}, value))

    def render(self) -> str:
        lines = []
        for name, (metric_type, help_text, samples) in self._families.items():
            lines.append(f"# HELP {name} {help_text.replace(chr(92), chr(92) * 2).replace(chr(10), ' ')}")
            lines.append(f"# TYPE {name} {metric_type}")
            for labels, value in samples:
                inner = ",".join(f'{key}="{_escape_label(val)}"' for key, val in sorted(labels.items()))
                lines.append(f"{name}{{{inner}}} {_format_value(value)}" if inner else f"{name} {_format_value(value)}")
        return "\n".join(lines) + "\n" if lines else ""


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{[^}]*\})?\s+(\S+)")


def value_of(text: str, name: str) -> float | None:
    """The value of the first sample of `name` in exposition `text`, or None (absent or unparsable)."""
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match and match.group(1) == name:
            try:
                return float(match.group(2))
            except ValueError:
                return None
    return None
