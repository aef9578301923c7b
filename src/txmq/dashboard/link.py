"""The dashboard's calls to brokers: the admin client, run off the event loop, per member.

Owns: which members (``--endpoints`` HOST:PORT, comma-separated for a cluster) the dashboard
talks to, picking the member a page reads from, and passing admin credentials when a person
signed in. Must not: import broker internals (only the admin client, as the CLI does), retry
(a page shows the error), or keep state beyond the member list.

Credentials hook: a broker with ACL enabled refuses admin calls without an access key and a
signature. ``Credentials`` are handed to the admin client's ``call`` as ``credentials=`` once it
takes them (the security work adds them to clients); until then a signed-in session's calls
fail with a readable banner saying the admin client cannot send credentials.
"""

from __future__ import annotations

import asyncio
import inspect
from dataclasses import dataclass
from typing import Any

from txmq import limits
from txmq.cli import admin_client
from txmq.errors import BrokerUnavailableError, TxmqError, invariant


@dataclass(frozen=True)
class Credentials:
    access_key: str
    secret_key: str

    def __repr__(self) -> str:  # never print the secret in a log or a traceback
        return f"Credentials(access_key={self.access_key!r}, secret_key=***)"


class CredentialsUnsupportedError(TxmqError):
    """This build's admin client cannot sign calls yet."""


def _admin_takes_credentials() -> bool:
    return "credentials" in inspect.signature(admin_client.call).parameters


def call_blocking(
    endpoint: str, method: str, args: dict[str, Any], credentials: Credentials | None
) -> dict[str, Any]:
    """One admin call (blocking), with credentials when given."""
    timeout_s = limits.DASHBOARD_CALL_TIMEOUT_MS / 1000.0
    if credentials is None:
        reply = admin_client.call(endpoint, method, args, timeout_s=timeout_s)
    elif _admin_takes_credentials():
        signed_call: Any = admin_client.call  # typed once the admin client takes credentials
        reply = signed_call(endpoint, method, args, timeout_s=timeout_s, credentials=credentials)
    else:
        raise CredentialsUnsupportedError(
            "this txmq's admin client cannot send credentials yet; sign out to browse read-only"
        )
    invariant(isinstance(reply, dict), "the admin client returns a JSON object")
    return dict(reply)


def parse_members(endpoints: str) -> list[str]:
    members = [e.strip() for e in endpoints.split(",") if e.strip()]
    if not members:
        raise ValueError("--endpoints names no broker")
    return members


class Link:
    def __init__(self, members: list[str]) -> None:
        invariant(bool(members), "a dashboard watches at least one broker")
        self.members = members
        # The member that answered last: pages read from it, so one member down does not
        # blank every page of a cluster.
        self.preferred = members[0]

    async def call(
        self,
        method: str,
        args: dict[str, Any] | None = None,
        *,
        member: str | None = None,
        credentials: Credentials | None = None,
    ) -> dict[str, Any]:
        """Call ``method`` on ``member``, or on the preferred member and then the others.

        Raises:
            BrokerUnavailableError: no member answers (the last member's error).
            TxmqError: the broker refused the request.
        """
        order = (
            [member]
            if member
            else [self.preferred] + [m for m in self.members if m != self.preferred]
        )
        last: BrokerUnavailableError | None = None
        for m in order:
            try:
                reply = await asyncio.to_thread(call_blocking, m, method, args or {}, credentials)
            except BrokerUnavailableError as exc:
                last = exc
                continue
            self.preferred = m
            return reply
        invariant(last is not None, "every member was tried")
        assert last is not None
        raise last
