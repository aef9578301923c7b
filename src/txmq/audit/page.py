"""The report's HTML page: the verdict, the counts, a chart of rows and messages per minute, and
the first examples of each kind. One self-contained file: inline CSS, the chart as inline SVG
drawn here (no script, no asset; it prints as it looks, and its text is testable).

Owns: the markup, every value escaped. Pure: a result in, text out (the command writes it).
"""

from __future__ import annotations

from html import escape
from typing import Any, Final

from txmq.audit.result import KIND_MEANING, KINDS, AuditResult, Bucket
from txmq.audit.spec import iso_ms

WIDTH, HEIGHT = 760, 220
PAD_LEFT, PAD_RIGHT, PAD_TOP, PAD_BOTTOM = 56, 16, 16, 36
DB_COLOR, TOPIC_COLOR = "#1f6feb", "#d9480f"
_STYLE: Final = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; }
th, td { border: 1px solid #ccc; padding: 2px 8px; text-align: left; }
td.n { text-align: right; }
.ok { color: #1a7f37; } .bad { color: #cf222e; }
.legend span { margin-right: 1.5em; }
"""


def chart(buckets: list[Bucket], width_minutes: int) -> str:
    """An SVG line chart of rows (database) and messages (topic) per bucket."""
    title = f"rows and messages per {width_minutes} minute" + ("s" if width_minutes > 1 else "")
    plot_w, plot_h = WIDTH - PAD_LEFT - PAD_RIGHT, HEIGHT - PAD_TOP - PAD_BOTTOM
    parts = [
        f'<svg class="chart" role="img" aria-label="{escape(title)}" viewBox="0 0 {WIDTH} '
        f'{HEIGHT}" width="{WIDTH}" height="{HEIGHT}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{escape(title)}</title>",
        f'<rect x="{PAD_LEFT}" y="{PAD_TOP}" width="{plot_w}" height="{plot_h}" '
        'fill="none" stroke="#ccc"/>',
    ]
    if not buckets:
        parts.append(f'<text x="{PAD_LEFT + 8}" y="{PAD_TOP + 20}">nothing in the window</text>')
        return "\n".join([*parts, "</svg>"])
    top = max(1, *(max(b.db_rows, b.messages) for b in buckets))
    span = max(1, len(buckets) - 1)

    def xy(i: int, v: int) -> str:
        x = PAD_LEFT + plot_w * i / span
        y = PAD_TOP + plot_h * (1.0 - v / top)
        return f"{x:.1f},{y:.1f}"

    for color, name, values in (
        (DB_COLOR, "database rows", [b.db_rows for b in buckets]),
        (TOPIC_COLOR, "committed messages", [b.messages for b in buckets]),
    ):
        points = " ".join(xy(i, v) for i, v in enumerate(values))
        parts.append(
            f'<polyline class="series" data-series="{escape(name)}" fill="none" '
            f'stroke="{color}" stroke-width="1.5" points="{points}"/>'
        )
    first, last = iso_ms(buckets[0].start_ms) or "", iso_ms(buckets[-1].start_ms) or ""
    parts += [
        f'<text x="{PAD_LEFT - 6}" y="{PAD_TOP + 10}" text-anchor="end">{top}</text>',
        f'<text x="{PAD_LEFT - 6}" y="{PAD_TOP + plot_h}" text-anchor="end">0</text>',
        f'<text x="{PAD_LEFT}" y="{HEIGHT - 12}">{escape(first[:16])} UTC</text>',
        f'<text x="{WIDTH - PAD_RIGHT}" y="{HEIGHT - 12}" text-anchor="end">'
        f"{escape(last[:16])} UTC</text>",
        "</svg>",
    ]
    return "\n".join(parts)


def page(result: AuditResult, parquet: dict[str, str]) -> str:
    """The whole HTML page; ``parquet`` names each kind's Parquet directory (relative)."""
    verdict = (
        '<p class="ok"><b>CONSISTENT</b>: the database and the topic agree.</p>'
        if result.consistent
        else f'<p class="bad"><b>INCONSISTENT</b>: {sum(result.counts.values())} discrepancies.</p>'
    )
    src, window = result.source, result.window.as_json()
    facts = [
        ("table", f"{src['table']} ({src['jdbc_url']}), key {src['key']}"),
        ("topic", f"{src['topic']}, matched on {src['match']}"),
        ("window", f"{window['since'] or 'beginning'} .. {window['until'] or 'now'}"),
        ("grace", f"{window['grace_ms'] // 1000} s"),
        ("rows in the database", str(result.db_rows)),
        ("committed messages", str(result.messages)),
        ("messages without a join value", str(result.unkeyed_messages)),
        ("audited at", iso_ms(result.now_ms) or ""),
    ]
    counts = [
        [kind, str(result.counts[kind]), KIND_MEANING[kind], parquet.get(kind, "")]
        for kind in KINDS
    ]
    body = [
        "<h1>txmq audit</h1>",
        verdict,
        _table(["", ""], [list(f) for f in facts]),
        "<h2>Discrepancies</h2>",
        _table(["kind", "count", "meaning", "every one of them"], counts),
        "<h2>Rows and messages over time</h2>",
        chart(result.buckets, result.bucket_minutes),
        f'<p class="legend"><span style="color:{DB_COLOR}">&#9632; database rows</span>'
        f'<span style="color:{TOPIC_COLOR}">&#9632; committed messages</span></p>',
    ]
    for kind in KINDS:
        items = result.examples[kind]
        if items:
            body.append(f"<h2>{escape(kind)}: first {len(items)} of {result.counts[kind]}</h2>")
            columns = list(items[0])
            body.append(_table(columns, [[item.get(c) for c in columns] for item in items]))
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>txmq audit: {escape(src['table'])} vs {escape(src['topic'])}</title>"
        f"<style>{_STYLE}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )


def _table(columns: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    lines = [f"<table><tr>{head}</tr>" if any(columns) else "<table>"]
    for row in rows:
        cells = "".join(
            f'<td class="n">{v}</td>'
            if isinstance(v, int) and not isinstance(v, bool)
            else f"<td>{escape('' if v is None else str(v))}</td>"
            for v in row
        )
        lines.append(f"<tr>{cells}</tr>")
    lines.append("</table>")
    return "\n".join(lines)
