"""The dashboard's pure parts: metrics text -> samples -> rates, the ring bound, SVG charts
(escaping, scaling) and body rendering as text, JSON and hex."""

from __future__ import annotations

import base64

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from txmq.dashboard.charts import Series, gauge_bar, line_chart
from txmq.dashboard.pages import render_body
from txmq.dashboard.samples import Ring, Sample, parse_sample, rates


def metrics_text(sent: int, received: int, pending: int) -> str:
    r = CollectorRegistry()
    c = Counter("txmq_messages_sent", "x", ["type"], registry=r)
    c.labels("NORMAL").inc(sent - 1)
    c.labels("TRANSACTION").inc(1)
    Counter("txmq_messages_received", "x", registry=r).inc(received)
    Gauge("txmq_transactions_pending", "x", registry=r).set(pending)
    return generate_latest(r).decode()


def test_samples_sum_counters_over_labels_and_rates_skip_restarts() -> None:
    a = parse_sample(metrics_text(10, 4, 3), 1_000, 0.5, 0.9)
    assert (a.sent, a.received, a.pending, a.disk_watermark) == (10, 4, 3, 0.9)
    b = parse_sample(metrics_text(30, 14, 0), 3_000, 0.5, 0.9)
    restarted = parse_sample(metrics_text(2, 1, 0), 5_000, 0.5, 0.9)
    down = Sample(time_ms=7_000, up=False, error="gone")
    later = parse_sample(metrics_text(12, 1, 0), 9_000, 0.5, 0.9)
    got = rates([a, b, restarted, down, later])
    assert [(r.time_ms, r.in_per_s, r.out_per_s) for r in got] == [(3_000, 10.0, 5.0)]


def test_ring_keeps_the_newest() -> None:
    ring = Ring(3)
    for t in range(5):
        ring.add(Sample(time_ms=t, up=True))
    assert [s.time_ms for s in ring.samples] == [2, 3, 4]
    assert ring.latest is not None and ring.latest.time_ms == 4


def test_chart_escapes_labels_and_scales_to_the_maximum() -> None:
    svg = line_chart(
        "<b>in</b>", [Series("a&b", "#123456", ((0, 0.0), (500, 4.0)))], now_ms=1000, span_ms=1000
    )
    assert "<b>" not in svg and "&lt;b&gt;" in svg and "a&amp;b 4" in svg
    assert "<polyline" in svg and ">4<" in svg  # the y axis tops out at the maximum
    assert "<polyline" not in line_chart(
        "x", [Series("s", "red", ((0, 1.0),))], now_ms=1, span_ms=1
    )
    assert 'aria-label="disk 95% of 90%"' in gauge_bar(0.95, 0.9)


def test_bodies_as_text_json_and_hex() -> None:
    b64 = base64.b64encode(b'{"a":[1,2]}').decode()
    assert render_body(b64, "json") == ('{\n  "a": [\n    1,\n    2\n  ]\n}', "")
    assert render_body(b64, "text")[0] == '{"a":[1,2]}'
    hexed, _ = render_body(base64.b64encode(b"\x00AB").decode(), "hex")
    assert hexed.startswith("00000000  00 41 42") and hexed.endswith(".AB")
    text, note = render_body(base64.b64encode(b"not json").decode(), "json")
    assert text == "not json" and note.startswith("not JSON")
