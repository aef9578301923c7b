"""The official RocketMQ client signs its requests with the time in UTC, as the broker expects.

rocketmq-python-client 5.1.2 writes ``datetime.now()``, the *local* time, with a "Z" suffix into
``x-mq-date-time`` (``rocketmq/v5/util/signature.py``), the date its signature covers. A broker
with an ACL accepts a date within 15 minutes of its clock in UTC (docs/security.md), so outside
UTC every call of that client would be refused. The Node.js client sends UTC already.

Owns: ``sign_in_utc`` (give that module a ``datetime`` whose ``now()`` is UTC). One choice for
the process, made by txmq's commands that run the official client (``txmq send``/``consume``).
Must not: change the clock of anything else in the process (only that module sees it).
"""

from __future__ import annotations

from datetime import UTC, datetime

from txmq.errors import invariant


class _UtcNow:
    """``datetime`` as the official client's signature module uses it: ``now()`` only."""

    @staticmethod
    def now() -> datetime:
        return datetime.now(UTC)


def sign_in_utc() -> None:
    """Signatures the official client computes from now on carry the time in UTC."""
    from rocketmq.v5.util import signature

    invariant(
        signature.datetime in (datetime, _UtcNow),
        "rocketmq-python-client dates its signatures with datetime.now() (5.1.2 does)",
    )
    signature.datetime = _UtcNow
