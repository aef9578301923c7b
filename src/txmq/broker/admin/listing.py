"""Paged admin listings: TxnList, TopicList and GroupList answer one bounded page at a time.

Why: a listing that grows with the broker's state (pending transactions above all: a large
Spark sink batch leaves thousands) must not grow its reply without bound; at ~12,000 pending
transactions one TxnList reply passed gRPC's 4 MiB message limit and the command failed exactly
when an operator needed it.

Request: ``{"after"?: cursor, "limit"?: 1..ADMIN_PAGE_ROWS_MAX}``. Reply: the rows (under the
listing's usual name: ``transactions``, ``topics``, ``groups``) and ``"next"``: the cursor to
pass as ``after`` for the following page, or null after the last page. A page holds at most
``limit`` rows and at most ADMIN_PAGE_BYTES_MAX bytes of JSON rows (at least one row, so a page
always makes progress). Cursors are opaque strings: for transactions the section (pending,
then dead) and the half message's log offset, the order they are listed in; for topics and
groups the last name. A row added or decided between pages is listed once or not at all, never
twice. Clients follow the pages (txmq.client.admin.call_pages).
Must not: hold the coordinator's lock longer than one page takes, or change anything.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from txmq import limits
from txmq.broker.state.parts import Parts
from txmq.errors import BadRequestError

Row = dict[str, Any]
_PENDING, _DEAD = "p", "d"


def page_args(a: dict[str, Any]) -> tuple[str, int]:
    """(after, limit) of a listing request; raises BadRequestError naming the bad field."""
    after, limit = a.get("after") or "", a.get("limit", limits.ADMIN_PAGE_ROWS_MAX)
    if not isinstance(after, str):
        raise BadRequestError(f"after must be a cursor string, got {after!r}")
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise BadRequestError(f"limit must be an integer, got {limit!r}")
    if not 1 <= limit <= limits.ADMIN_PAGE_ROWS_MAX:
        raise BadRequestError(f"limit must be 1..{limits.ADMIN_PAGE_ROWS_MAX}, got {limit}")
    return after, limit


def take(rows: Iterable[tuple[str, Row]], limit: int) -> tuple[list[Row], str | None]:
    """The first page of ``(cursor, row)`` pairs: (rows, cursor of the last row taken, or None
    when nothing is left)."""
    out: list[Row] = []
    size = 0
    last = ""
    for cursor, row in rows:
        n = len(json.dumps(row))
        if out and (len(out) >= limit or size + n > limits.ADMIN_PAGE_BYTES_MAX):
            return out, last
        out.append(row)
        size += n
        last = cursor
    return out, None


def txn_page(parts: Parts, a: dict[str, Any]) -> dict[str, Any]:
    """Pending transactions in log order of their half message, then dead ones."""
    after, limit = page_args(a)
    section, offset = _PENDING, -1
    if after:
        section, _, raw = after.partition(":")
        if section not in (_PENDING, _DEAD) or not raw.lstrip("-").isdigit():
            raise BadRequestError(f"after {after!r} is not a TxnList cursor")
        offset = int(raw)

    def rows() -> Iterator[tuple[str, Row]]:
        # One row more than a page, so take() knows whether another page follows.
        if section == _PENDING:
            for row in parts.tx.listing(dead=False, after_offset=offset, count=limit + 1):
                yield f"{_PENDING}:{row['half_offset']}", row
        start = offset if section == _DEAD else -1
        for row in parts.tx.listing(dead=True, after_offset=start, count=limit + 1):
            yield f"{_DEAD}:{row['half_offset']}", row

    found, cursor = take(rows(), limit)
    return {"transactions": found, "next": cursor}


def named_page(items: Iterable[Row], key: str, a: dict[str, Any]) -> tuple[list[Row], str | None]:
    """A page of rows named by ``row[key]``, in name order, after the cursor (a name)."""
    after, limit = page_args(a)
    ordered = sorted((str(r[key]), r) for r in items if str(r[key]) > after)
    return take(ordered, limit)
