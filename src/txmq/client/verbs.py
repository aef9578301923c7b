"""What the front ends (the CLI, the dashboard) share about the operator verbs.

Owns: reading a reset target (``--to``, the dashboard's "to" field) into the GroupReset
request's fields, and saying it back in words; naming the members a cluster-wide verb failed
on. Pure.
Must not: call a broker.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Final

from txmq.errors import BadRequestError

# An integer of this many digits or more is a time in ms since the epoch (from 2001-09-09 on); a
# shorter one is an offset (no queue holds 10^12 messages).
EPOCH_MS_DIGITS: Final = 13


def reset_target(raw: str, *, naive: dt.tzinfo | None = None) -> dict[str, Any]:
    """``earliest``, ``latest``, an ISO-8601 time, ms since the epoch or an offset, as the
    GroupReset request's ``to`` and ``at_ms``/``offset``. A time without a zone is in
    ``naive`` (None: this machine's local time).

    Raises:
        BadRequestError: none of those.
    """
    text = raw.strip()
    if text in ("earliest", "latest"):
        return {"to": text}
    if text.isdigit():
        if len(text) >= EPOCH_MS_DIGITS:
            return {"to": "time", "at_ms": int(text)}
        return {"to": "offset", "offset": int(text)}
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise BadRequestError(
            f"--to {raw[:64]!r} is not earliest, latest, an ISO-8601 time such as "
            "2026-12-06T10:00:00Z, ms since the epoch (13 digits or more) or an offset"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=naive) if naive is not None else when.astimezone()
    return {"to": "time", "at_ms": int(when.timestamp() * 1000)}


def said(target: dict[str, Any]) -> str:
    """A reset target in words: "earliest", "offset 42", "the first message stored at or
    after 2026-12-06T09:00:00.000+00:00"."""
    if target["to"] == "time":
        at = dt.datetime.fromtimestamp(target["at_ms"] / 1000, dt.UTC)
        return f"the first message stored at or after {at.isoformat(timespec='milliseconds')}"
    if target["to"] == "offset":
        return f"offset {target['offset']}"
    return str(target["to"])


def failed_members(reply: Any) -> str:
    """The members a cluster-wide verb (GroupReset, GroupDelete) failed on, from its reply's
    ``failed``, as "b1: why; b2: why" by name; "" when it failed on none."""
    failed = reply.get("failed") if isinstance(reply, dict) else None
    return "; ".join(f"{b}: {why}" for b, why in sorted(failed.items())) if failed else ""
