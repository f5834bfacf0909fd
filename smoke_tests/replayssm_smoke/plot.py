"""A small SVG of accept length per class (mean bar, p10-p90 whisker, threshold tick), written by hand:
the wheel may not depend on a plotting library."""

from __future__ import annotations

from xml.sax.saxutils import escape


def render(acceptance: dict[str, dict]) -> str:
    classes = sorted(acceptance)
    top = max(
        [1.0]
        + [
            v
            for s in acceptance.values()
            for v in (
                s.get("p90"),
                s.get("mean_accept_length"),
                (s.get("threshold") or {}).get("min_mean_accept_length"),
            )
            if isinstance(v, (int, float))
        ]
    )
    scale, left, row_h = 360.0 / top, 70, 28
    height = 40 + row_h * len(classes)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="480" height="{height}" font-family="sans-serif" '
        f'font-size="12">',
        '<text x="10" y="16">accept length per class (bar: mean, line: p10-p90, red tick: threshold)</text>',
    ]
    for i, cls in enumerate(classes):
        s, y = acceptance[cls], 30 + i * row_h
        mean = s.get("mean_accept_length") or 0.0
        color = "#c0392b" if s.get("passed") is False else "#2e86c1"
        parts.append(f'<text x="10" y="{y + 14}">{escape(cls)}</text>')
        parts.append(f'<rect x="{left}" y="{y + 3}" width="{mean * scale:.1f}" height="14" fill="{color}"/>')
        parts.append(f'<text x="{left + mean * scale + 4:.1f}" y="{y + 14}">{mean:.2f}</text>')
        if s.get("p10") is not None and s.get("p90") is not None:
            parts.append(
                f'<line x1="{left + s["p10"] * scale:.1f}" x2="{left + s["p90"] * scale:.1f}" '
                f'y1="{y + 10}" y2="{y + 10}" stroke="black"/>'
            )
        floor = (s.get("threshold") or {}).get("min_mean_accept_length")
        if floor is not None:
            x = left + floor * scale
            parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{y}" y2="{y + 20}" stroke="red" stroke-width="2"/>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
