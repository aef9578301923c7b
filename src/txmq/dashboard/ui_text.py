"""Broker errors as sentences for the dashboard's banners (the sampler and the pages share it)."""

from __future__ import annotations

from txmq.errors import CODE_FORBIDDEN, CODE_UNAUTHORIZED, BrokerUnavailableError

# Status codes a broker with ACL answers when keys are missing or lack the right.
AUTH_CODES = (CODE_UNAUTHORIZED, CODE_FORBIDDEN)


def banner(exc: Exception) -> str:
    """A broker error as one readable sentence for the page's banner."""
    if isinstance(exc, BrokerUnavailableError):
        return f"Broker {exc.endpoints} is down (unreachable): {exc.reason}"
    if getattr(exc, "code", None) in AUTH_CODES:
        return f"The broker refused: {exc}. Sign in with an admin's keys to change anything."
    code = getattr(exc, "code", None)
    return f"The broker refused the request ({type(exc).__name__}, code {code}): {exc}"
