"""Charts as inline SVG, drawn on the server: no JavaScript, no library, no network.

`bar_chart(points, ...)` draws one bar per (label, value) point, oldest left, on a fixed
viewBox (`WIDTH` x `HEIGHT`, scaled by CSS): a y axis from 0 to a rounded-up maximum with
three grid lines, the first, middle and last labels under the x axis, and a `<title>` per
bar (the browser shows it on hover, screen readers read it). Every piece of text is
escaped here, so the result is safe to insert into a page unescaped. At most `MAX_POINTS`
points are drawn (the newest); a chart with no non-zero value says so instead of drawing
a flat line.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

WIDTH = 640
HEIGHT = 180
PAD_LEFT = 56
PAD_BOTTOM = 22
PAD_TOP = 20
MAX_POINTS = 240


@dataclass(frozen=True)
class Point:
    label: str  # the x value as shown (a time, usually)
    value: float


def nice_ceiling(x: float) -> float:
    """The smallest of 1, 2, 2.5, 5 times a power of ten that is >= x (1 for x <= 0)."""
    if x <= 0:
        return 1.0
    scale = 10.0 ** math.floor(math.log10(x))
    for m in (1.0, 2.0, 2.5, 5.0):
        if m * scale >= x:
            return m * scale
    return 10.0 * scale


def human(x: float) -> str:
    """A short number: 1.5k, 12M, 0.25."""
    for div, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"{x / div:.3g}{suffix}"
    return f"{x:.3g}"


def bar_chart(points: Sequence[Point], *, title: str, unit: str, css_class: str = "chart") -> str:
    """The SVG markup of a bar chart of `points` (see the module docstring)."""
    pts = list(points)[-MAX_POINTS:]
    plot_w = WIDTH - PAD_LEFT - 4
    plot_h = HEIGHT - PAD_TOP - PAD_BOTTOM
    top = nice_ceiling(max((p.value for p in pts), default=0.0))
    parts = [
        f'<svg class="{escape(css_class)}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{escape(title)}</title>",
    ]
    parts.extend(_grid(top, unit, plot_w, plot_h))
    if not pts or all(p.value <= 0 for p in pts):
        parts.append(
            f'<text class="empty" x="{PAD_LEFT + plot_w / 2:.1f}" y="{PAD_TOP + plot_h / 2:.1f}" '
            'text-anchor="middle">no data in this window</text>'
        )
    step = plot_w / max(len(pts), 1)
    bar_w = max(step * 0.8, 1.0)
    for i, p in enumerate(pts):
        h = plot_h * max(p.value, 0.0) / top
        x = PAD_LEFT + i * step + (step - bar_w) / 2
        y = PAD_TOP + plot_h - h
        parts.append(
            f'<rect class="bar" x="{x:.1f}" y="{y:.1f}" width="{bar_w:.1f}" height="{h:.1f}">'
            f"<title>{escape(p.label)}: {escape(human(p.value))} {escape(unit)}</title></rect>"
        )
    parts.extend(_x_labels(pts, step))
    parts.append("</svg>")
    return "".join(parts)


def _grid(top: float, unit: str, plot_w: float, plot_h: float) -> list[str]:
    out = []
    for frac in (0.0, 0.5, 1.0):
        y = PAD_TOP + plot_h * (1 - frac)
        out.append(f'<line class="grid" x1="{PAD_LEFT}" x2="{PAD_LEFT + plot_w}" y1="{y:.1f}" y2="{y:.1f}"/>')
        out.append(
            f'<text class="axis" x="{PAD_LEFT - 4}" y="{y + 4:.1f}" text-anchor="end">'
            f"{escape(human(top * frac))}</text>"
        )
    out.append(f'<text class="axis unit" x="4" y="11" text-anchor="start">{escape(unit)}</text>')
    return out


def _x_labels(pts: Sequence[Point], step: float) -> list[str]:
    if not pts:
        return []
    out = []
    y = HEIGHT - 6
    for i, anchor in ((0, "start"), (len(pts) // 2, "middle"), (len(pts) - 1, "end")):
        x = PAD_LEFT + i * step + (step / 2 if anchor == "middle" else 0 if anchor == "start" else step)
        out.append(
            f'<text class="axis" x="{x:.1f}" y="{y}" text-anchor="{anchor}">{escape(pts[i].label)}</text>'
        )
    return out
