"""The dashboard's calls to brokers: the admin client, run off the event loop, per member.

Owns: which members (``--endpoints`` ``HOST:P1;HOST:P2``, as every command takes them; commas
accepted too) the dashboard talks to, picking the member a page reads from, and whose keys sign
each call. Must not: import broker internals (only the admin client, as the CLI does), retry (a
page shows the error), or keep state beyond the member list.

Keys: the dashboard process has its own ``ClientSecurity`` (``txmq dashboard --access-key
--secret-key --tls --ca-file``, or the TXMQ_* variables). Its TLS settings serve every call; its
keys sign only the sampler's calls (``own_keys``: the overview's charts, finding a cluster's
members). Whatever a person sees or does on a page is signed with the ``Credentials`` they
signed in with, or goes unsigned: so a broker with ACL shows a visitor exactly what their own
keys may read, and the dashboard's keys never read or change anything for anyone.
"""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass
from typing import Any

from txmq import limits
from txmq.client import admin
from txmq.errors import BrokerUnavailableError, invariant
from txmq.protocol.client_security import ClientSecurity


@dataclass(frozen=True, slots=True)
class Credentials:
    access_key: str
    secret_key: str = dataclasses.field(repr=False)


def call_blocking(
    endpoint: str,
    method: str,
    args: dict[str, Any],
    *,
    security: ClientSecurity,
    credentials: Credentials | None,
    own_keys: bool,
) -> dict[str, Any]:
    """One admin call (blocking), signed as the module docstring says."""
    timeout_s = limits.DASHBOARD_CALL_TIMEOUT_MS / 1000.0
    if credentials is None and not own_keys:
        security = dataclasses.replace(security, access_key="", secret_key="")
    reply = admin.call(
        endpoint, method, args, timeout_s=timeout_s, security=security, credentials=credentials
    )
    invariant(isinstance(reply, dict), "the admin client returns a JSON object")
    return dict(reply)


def parse_members(endpoints: str) -> list[str]:
    """``HOST:P1;HOST:P2`` (or commas) -> the member list, each once, in order."""
    members = [e.strip() for e in endpoints.replace(",", ";").split(";") if e.strip()]
    if not members:
        raise ValueError("names no broker (expected HOST:PORT[;HOST:PORT...])")
    return list(dict.fromkeys(members))


class Link:
    def __init__(self, members: list[str], security: ClientSecurity | None = None) -> None:
        invariant(bool(members), "a dashboard watches at least one broker")
        self.members = members
        self.security = security if security is not None else ClientSecurity()
        # The member that answered last: pages read from it, so one member down does not
        # blank every page of a cluster.
        self.preferred = members[0]

    @property
    def has_keys(self) -> bool:
        """The dashboard was given keys of its own (for the sampler)."""
        return bool(self.security.access_key)

    def add_member(self, endpoint: str) -> bool:
        """Watch one more member (found in the cluster's ClusterInfo); False when already
        watched or at DASHBOARD_MEMBERS_MAX."""
        if endpoint in self.members or len(self.members) >= limits.DASHBOARD_MEMBERS_MAX:
            return False
        self.members.append(endpoint)
        return True

    async def call(
        self,
        method: str,
        args: dict[str, Any] | None = None,
        *,
        member: str | None = None,
        credentials: Credentials | None = None,
        own_keys: bool = False,
    ) -> dict[str, Any]:
        """Call ``method`` on ``member``, or on the preferred member and then the others;
        signed with ``credentials``, else with the dashboard's keys when ``own_keys``, else
        unsigned.

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
                reply = await asyncio.to_thread(
                    call_blocking,
                    m,
                    method,
                    args or {},
                    security=self.security,
                    credentials=credentials,
                    own_keys=own_keys,
                )
            except BrokerUnavailableError as exc:
                last = exc
                continue
            self.preferred = m
            return reply
        invariant(last is not None, "every member was tried")
        assert last is not None
        raise last
