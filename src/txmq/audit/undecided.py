"""Transactions of the audited topic still undecided, or dead, on the broker (every member of a
cluster), prepared in the window: their count, and the first few with their join value.

Owns: following each member's TxnList pages (pending in log order, then dead) while keeping
only a bounded list, and fetching those transactions' half messages (MessageShow) to take the
join value the way the Spark job does (``Match.value_of``). Must not: change a transaction.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from txmq import limits
from txmq.audit.result import OpenTransaction
from txmq.audit.spec import Match, Window
from txmq.client.admin import call, members
from txmq.errors import NotFoundError, RemoteProtocolError


@dataclass
class OpenTransactions:
    """``undecided`` and ``dead`` are complete counts; ``first`` the first few, oldest first
    on each broker."""

    undecided: int = 0
    dead: int = 0
    first: list[OpenTransaction] = field(default_factory=list)


def open_transactions(
    endpoints: str,
    topic: str,
    match: Match,
    window: Window,
    *,
    keep: int = limits.AUDIT_TXN_LOOKUPS_MAX,
) -> OpenTransactions:
    """Every member's open transactions of ``topic`` prepared in ``window``.

    Raises:
        BrokerUnavailableError: a member does not answer (an audit that cannot see every
            broker's transactions must not call the topic consistent).
        TxmqError: a member refused the listing.
    """
    out = OpenTransactions()
    for member in members(endpoints):
        address, name = str(member["endpoint"]), str(member["name"])
        for row in _listing(address):
            if row.get("topic") != topic or not window.holds(int(row["prepared_at_ms"])):
                continue
            dead = bool(row.get("dead"))
            out.undecided += 1
            out.dead += int(dead)
            if len(out.first) < keep:
                txn = _open(row, name, dead)
                out.first.append(_with_key(address, txn, match))
    return out


def _listing(address: str) -> Iterator[dict[str, Any]]:
    """Rows of TxnList, page after page (bounded by ADMIN_PAGES_MAX)."""
    after = ""
    for _ in range(limits.ADMIN_PAGES_MAX):
        reply = call(address, "TxnList", {"after": after})
        yield from reply["transactions"]
        cursor = reply.get("next")
        if not cursor:
            return
        if cursor == after:
            raise RemoteProtocolError(f"TxnList repeated its page cursor {after!r}")
        after = str(cursor)
    raise RemoteProtocolError(f"TxnList had more than {limits.ADMIN_PAGES_MAX} pages")


def _open(row: dict[str, Any], broker: str, dead: bool) -> OpenTransaction:
    return OpenTransaction(
        transaction_id=str(row["transaction_id"]),
        message_id=str(row.get("message_id", "")),
        broker=broker,
        state=str(row.get("state", "")),
        dead=dead,
        checks=int(row.get("checks", 0)),
        prepared_at_ms=int(row["prepared_at_ms"]),
    )


def _with_key(address: str, txn: OpenTransaction, match: Match) -> OpenTransaction:
    """The transaction with its half message's join value; unchanged when retention already
    deleted the half message (a dead transaction may outlive it)."""
    import dataclasses

    if not txn.message_id:
        return txn
    try:
        shown = call(address, "MessageShow", {"id": txn.message_id})
    except NotFoundError:
        return txn
    body = base64.b64decode(str(shown.get("body_base64", "")))
    keys = [str(k) for k in shown.get("keys", [])]
    properties = {str(k): str(v) for k, v in dict(shown.get("properties", {})).items()}
    return dataclasses.replace(txn, key=match.value_of(keys, properties, body))
