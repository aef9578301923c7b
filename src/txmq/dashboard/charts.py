"""Server-side SVG line charts for the overview page.

Why SVG drawn here and no JavaScript chart library: the data is a few hundred points the
dashboard already holds; an inline ``<svg>`` needs no asset, no build step and no script, prints
and screenshots as it looks, and its text is testable. Owns: scaling series to a fixed box and
writing the markup (every label escaped). Pure: values in, markup out.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape

from markupsafe import Markup

from txmq.errors import invariant

WIDTH, HEIGHT = 560, 160
PAD_LEFT, PAD_RIGHT, PAD_TOP, PAD_BOTTOM = 48, 12, 12, 24


@dataclass(frozen=True, slots=True)
class Series:
    label: str
    color: str  # a CSS colour name or #rrggbb, never user input
    points: tuple[tuple[int, float], ...]  # (time_ms, value), in time order


def _fmt(v: float) -> str:
    if v >= 1000:
        return f"{v / 1000:.1f}k"
    return f"{v:.0f}" if v == int(v) else f"{v:.1f}"


def _ago(span_ms: int) -> str:
    return f"{span_ms // 60_000} min" if span_ms >= 120_000 else f"{span_ms // 1000} s"


def line_chart(
    title: str, series: list[Series], *, now_ms: int, span_ms: int, css_class: str = ""
) -> Markup:
    """An SVG chart of ``series`` over the ``span_ms`` before ``now_ms`` (y from 0 to the max)."""
    invariant(span_ms > 0, "a chart spans a positive time")
    invariant(all(c.color.replace("#", "").isalnum() for c in series), "colours are constants")
    invariant(css_class.replace("-", "").isalnum() or not css_class, "classes are constants")
    top = max([v for s in series for _, v in s.points] + [1.0])
    plot_w, plot_h = WIDTH - PAD_LEFT - PAD_RIGHT, HEIGHT - PAD_TOP - PAD_BOTTOM
    start = now_ms - span_ms

    def xy(t: int, v: float) -> str:
        x = PAD_LEFT + plot_w * max(0.0, (t - start) / span_ms)
        y = PAD_TOP + plot_h * (1.0 - v / top)
        return f"{x:.1f},{y:.1f}"

    parts = [
        f'<svg class="chart {css_class}" role="img" aria-label="{escape(title)}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" '
        'xmlns="http://www.w3.org/2000/svg">',
        f"<title>{escape(title)}</title>",
        f'<rect x="{PAD_LEFT}" y="{PAD_TOP}" width="{plot_w}" height="{plot_h}" '
        'fill="#fafafa" stroke="#ccc"/>',
        f'<text x="{PAD_LEFT - 4}" y="{PAD_TOP + 10}" text-anchor="end">{_fmt(top)}</text>',
        f'<text x="{PAD_LEFT - 4}" y="{PAD_TOP + plot_h}" text-anchor="end">0</text>',
        f'<text x="{PAD_LEFT}" y="{HEIGHT - 6}">-{_ago(span_ms)}</text>',
        f'<text x="{WIDTH - PAD_RIGHT}" y="{HEIGHT - 6}" text-anchor="end">now</text>',
    ]
    for i, s in enumerate(series):
        pts = [(t, v) for t, v in s.points if t >= start]
        if len(pts) >= 2:
            path = " ".join(xy(t, v) for t, v in pts)
            parts.append(
                f'<polyline fill="none" stroke="{s.color}" stroke-width="2" points="{path}"/>'
            )
        last = f" {_fmt(pts[-1][1])}" if pts else ""
        parts.append(
            f'<text x="{PAD_LEFT + 8 + 150 * i}" y="{PAD_TOP + 14}" fill="{s.color}">'
            f"{escape(s.label)}{last}</text>"
        )
    parts.append("</svg>")
    return Markup("".join(parts))


def gauge_bar(used: float, watermark: float) -> Markup:
    """Disk usage as a horizontal bar with the watermark as a red line."""
    invariant(0.0 <= watermark <= 1.0, "a watermark is a ratio")
    used = min(max(used, 0.0), 1.0)
    w, h = 300, 18
    color = "#c0392b" if used > watermark else "#2e86de"
    return Markup(
        f'<svg class="gauge" role="img" aria-label="disk {used:.0%} of {watermark:.0%}" '
        f'viewBox="0 0 {w} {h}" width="{w}" height="{h}" xmlns="http://www.w3.org/2000/svg">'
        f'<rect width="{w}" height="{h}" fill="#eee"/>'
        f'<rect width="{w * used:.1f}" height="{h}" fill="{color}"/>'
        f'<line x1="{w * watermark:.1f}" x2="{w * watermark:.1f}" y1="0" y2="{h}" '
        'stroke="red" stroke-width="2"/></svg>'
    )
