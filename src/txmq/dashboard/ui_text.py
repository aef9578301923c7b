"""The dashboard's words: broker errors as sentences, the fixed banners a redirect may name, and
the HTTP status each broker error answers with (the sampler and the pages share them).

A redirect after an action carries a banner *code* (``?done=topic-deleted``, ``?error=...``),
never a text: a page shows only the sentences below for a code, and nothing for an unknown
one, so a link cannot make the dashboard say anything.
"""

from __future__ import annotations

from typing import Final

from txmq.errors import (
    CODE_FORBIDDEN,
    CODE_UNAUTHORIZED,
    BadRequestError,
    BrokerUnavailableError,
    ConsumerGroupNotFoundError,
    InvalidTransactionIdError,
    MessageNotFoundError,
    NotFoundError,
    TopicNotFoundError,
    TxmqError,
)

# Status codes a broker with ACL answers when keys are missing or lack the right.
AUTH_CODES = (CODE_UNAUTHORIZED, CODE_FORBIDDEN)

DONE: Final[dict[str, str]] = {
    "topic-created": "The topic was created.",
    "topic-deleted": "The topic was deleted: it left routing, its messages age out with retention.",
    "topic-grown": "The topic grew: every broker has the new queues, producers and consumers "
    "use them now.",
    "group-reset": "The group's position moved on every broker: its consumers read from there now.",
    "group-redriven": "The dead letters went back to their topics, for this group only.",
    "group-deleted": "The group was deleted on every broker; its dead letters stay in its DLQ.",
    "txn-commit": "The transaction was committed: consumers receive its message.",
    "txn-rollback": "The transaction was rolled back: its message is discarded.",
    "signed-in": "Signed in.",
    "signed-out": "Signed out.",
}
ERRORS: Final[dict[str, str]] = {
    "confirm-invalid": (
        "The confirmation was not valid (expired, used already, or not from this browser's "
        "session): nothing was changed. Try again."
    ),
    "form-invalid": "The form was not valid: a topic needs a name, a known type and a number "
    "of queues; a transaction is committed or rolled back.",
    "reset-invalid": "The reset form was not valid: reset to earliest, latest, a time (ISO-8601, "
    "UTC without a zone, or ms since the epoch) or an offset, and a queue is a number.",
    "redrive-invalid": "The re-drive form was not valid: at most a whole number (1 or more) of "
    "dead letters.",
    "sign-in-needed": "This broker checks keys (ACL): sign in with an admin's keys to see it.",
    "sign-out-invalid": "The sign-out form was not this session's: still signed in.",
}


def banner(exc: Exception) -> str:
    """A broker error as one readable sentence for the page's banner."""
    if isinstance(exc, BrokerUnavailableError):
        return f"Broker {exc.endpoints} is down (unreachable): {exc.reason}"
    if getattr(exc, "code", None) in AUTH_CODES:
        return f"The broker refused your keys: {exc}. Sign in again with an admin's keys."
    code = getattr(exc, "code", None)
    return f"The broker refused the request ({type(exc).__name__}, code {code}): {exc}"


def http_status(exc: Exception) -> int:
    """The HTTP status a page answers with when the broker answered ``exc``."""
    if isinstance(exc, BrokerUnavailableError):
        return 503
    if isinstance(exc, (NotFoundError, InvalidTransactionIdError)):
        return 404
    if getattr(exc, "code", None) in AUTH_CODES:
        return 403
    if isinstance(exc, BadRequestError):
        return 400
    return 502


def missing(
    exc: TxmqError,
    *,
    topic: str = "",
    group: str = "",
    message: str = "",
    transaction: str = "",
) -> str | None:
    """The dashboard's own sentence for a name the broker does not know (it says only what
    the page asked for, once), or None when ``exc`` is not about a missing name."""
    if isinstance(exc, TopicNotFoundError) and topic:
        return f"Topic {topic!r} does not exist on this broker."
    if isinstance(exc, ConsumerGroupNotFoundError) and group:
        return f"Consumer group {group!r} does not exist on this broker."
    if isinstance(exc, MessageNotFoundError) and message:
        return f"No message with id {message!r} on this broker."
    if isinstance(exc, InvalidTransactionIdError) and transaction:
        return f"Transaction {transaction!r} is unknown to this broker (or decided and expired)."
    if isinstance(exc, NotFoundError):
        return f"Not found: {exc}"
    return None
