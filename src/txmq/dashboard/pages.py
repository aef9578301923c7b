"""The dashboard's read-only pages: overview, topics, consumer groups, transactions, messages.

Owns: what each page asks the broker (admin channel) and shapes for its template. Must not:
change anything on the broker (actions.py does, behind a confirmation).
"""

from __future__ import annotations

import base64
import json
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from txmq import limits
from txmq.dashboard.charts import Series, gauge_bar, line_chart
from txmq.dashboard.samples import rates
from txmq.dashboard.ui import Ui

BODY_VIEWS = ("text", "json", "hex")
CHART_SPAN_MS_MIN = 20_000


def render_body(body_base64: str, view: str) -> tuple[str, str]:
    """A body as text, pretty JSON or a hex dump; returns (rendered, note)."""
    raw = base64.b64decode(body_base64)
    note = ""
    if len(raw) > limits.DASHBOARD_BODY_BYTES_MAX:
        note = f"showing the first {limits.DASHBOARD_BODY_BYTES_MAX} of {len(raw)} bytes"
        raw = raw[: limits.DASHBOARD_BODY_BYTES_MAX]
    if view == "hex":
        rows = [
            f"{i:08x}  {raw[i : i + 16].hex(' '):<47}  "
            + "".join(chr(b) if 32 <= b < 127 else "." for b in raw[i : i + 16])
            for i in range(0, len(raw), 16)
        ]
        return "\n".join(rows), note
    text = raw.decode("utf-8", "replace")
    if view == "json":
        try:
            return json.dumps(json.loads(text), indent=2, ensure_ascii=False), note
        except ValueError as exc:
            return text, f"not JSON ({exc}); shown as text"
    return text, note


def member_view(ui: Ui, member: str, now_ms: int) -> dict[str, Any]:
    samples = ui.sampler.rings[member].samples
    latest = samples[-1] if samples else None
    # From the first sample kept to now (at least 20 s, at most the whole ring): a dashboard
    # started a moment ago fills its charts instead of drawing a sliver at the right edge.
    ring_ms = limits.DASHBOARD_SAMPLES_MAX * ui.sampler.period_ms
    first = samples[0].time_ms if samples else now_ms
    span = min(ring_ms, max(CHART_SPAN_MS_MIN, now_ms - first))
    rs = rates(samples)
    traffic = line_chart(
        f"{member}: messages per second",
        [
            Series("in/s", "#2e86de", tuple((r.time_ms, r.in_per_s) for r in rs)),
            Series("out/s", "#27ae60", tuple((r.time_ms, r.out_per_s) for r in rs)),
        ],
        now_ms=now_ms,
        span_ms=span,
        css_class="traffic",
    )
    up = [s for s in samples if s.measured]
    pending = line_chart(
        f"{member}: pending transactions",
        [
            Series("pending", "#e67e22", tuple((s.time_ms, s.pending) for s in up)),
            Series("dead", "#c0392b", tuple((s.time_ms, s.dead) for s in up)),
        ],
        now_ms=now_ms,
        span_ms=span,
        css_class="pending",
    )
    return {
        "endpoint": member,
        "sampled": latest is not None,
        "up": latest is not None and latest.up,
        "refused": latest is not None and latest.refused,
        "error": latest.error if latest else "",
        "disk": latest.disk_used_ratio if latest else 0.0,
        "watermark": latest.disk_watermark if latest else 1.0,
        "disk_bar": gauge_bar(latest.disk_used_ratio, latest.disk_watermark) if latest else "",
        "traffic": traffic,
        "pending": pending,
        "pending_now": latest.pending if latest else 0,
        "dead_now": latest.dead if latest else 0,
    }


async def overview(ui: Ui, request: Request) -> Response:
    now = time.time_ns() // 1_000_000
    members = [member_view(ui, m, now) for m in ui.link.members]
    return ui.render(request, "overview.html", page="overview", views=members, failed=False)


async def listing(ui: Ui, request: Request, method: str, rows: str) -> dict[str, Any]:
    """One page of a paged admin listing (broker/admin/listing.py): the page the browser asked for
    with ``?after=``, and the cursor of the next page for a "next page" link (None at the end)."""
    after = request.query_params.get("after", "")
    args = {"after": after, "limit": limits.DASHBOARD_PAGE_ROWS_MAX}
    reply = await ui.call(request, method, args)
    return {rows: reply[rows], "next": reply.get("next"), "after": after}


async def topics(ui: Ui, request: Request) -> Response:
    async def load() -> dict[str, Any]:
        found = await listing(ui, request, "TopicList", "topics")
        rate = topic_rates(ui, found["topics"])
        for t in found["topics"]:
            t["rate"] = rate.get(t["name"])
        return {**found, "types": ["normal", "fifo", "delay", "transaction"]}

    return await ui.page(request, "topics.html", load)


def topic_rates(ui: Ui, listed: list[dict[str, Any]]) -> dict[str, float]:
    """Messages per second per topic, from the message counts of this and the last listing."""
    now = time.monotonic()
    out = {}
    for t in listed:
        before = ui.topic_counts.get(t["name"])
        if before is not None and now > before[0]:
            out[t["name"]] = max(0.0, (t["messages"] - before[1]) / (now - before[0]))
        ui.topic_counts[t["name"]] = (now, t["messages"])
    while len(ui.topic_counts) > limits.DASHBOARD_PAGE_ROWS_MAX * 10:
        ui.topic_counts.pop(next(iter(ui.topic_counts)))
    return out


async def groups(ui: Ui, request: Request) -> Response:
    async def load() -> dict[str, Any]:
        return await listing(ui, request, "GroupList", "groups")

    return await ui.page(request, "groups.html", load, page="consumer groups")


async def group(ui: Ui, request: Request) -> Response:
    name = request.path_params["name"]

    async def load() -> dict[str, Any]:
        detail = await ui.call(request, "GroupDetail", {"group": name, "max": 20})
        connected = await ui.call(request, "ClientList", {"group": name})
        return {"g": detail, "clients": connected["clients"]}

    names = {"group": name}
    return await ui.page(request, "group.html", load, names, page="consumer groups", name=name)


async def transactions(ui: Ui, request: Request) -> Response:
    async def load() -> dict[str, Any]:
        found = await listing(ui, request, "TxnList", "transactions")
        rows = found["transactions"]
        now = time.time_ns() // 1_000_000
        for r in rows:
            r["age_s"] = max(0, now - int(r.get("prepared_at_ms", now))) / 1000.0
        return {
            **found,
            "pending": [r for r in rows if not r.get("dead")],
            "dead": [r for r in rows if r.get("dead")],
        }

    return await ui.page(request, "transactions.html", load)


async def messages(ui: Ui, request: Request) -> Response:
    q = request.query_params
    view = q.get("view", "text") if q.get("view") in BODY_VIEWS else "text"
    query = {k: q.get(k, "").strip() for k in ("id", "key", "topic")}

    async def load() -> dict[str, Any]:
        found: list[dict[str, Any]] = []
        if query["id"]:
            found = [await ui.call(request, "MessageShow", {"id": query["id"]})]
        elif query["key"]:
            args: dict[str, Any] = {"key": query["key"], "max": 20}
            if query["topic"]:
                # The lookup itself finds nothing in a topic that does not exist; say so (404).
                await ui.call(request, "TopicDescribe", {"name": query["topic"]})
                args["topic"] = query["topic"]
            found = (await ui.call(request, "MessageFind", args))["messages"]
        for m in found:
            m["rendered"], m["note"] = render_body(m.get("body_base64", ""), view)
        return {"found": found, "searched": bool(query["id"] or query["key"])}

    names = {"message": query["id"], "topic": query["topic"]}
    return await ui.page(request, "messages.html", load, names, query=query, view=view)
