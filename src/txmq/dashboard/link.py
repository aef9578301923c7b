"""The dashboard's calls to brokers: the admin client, run off the event loop, per member.

Owns: which members (``--endpoints`` HOST:PORT, comma-separated for a cluster) the dashboard
talks to, picking the member a page reads from, and whose keys sign each call. Must not: import
broker internals (only the admin client, as the CLI does), retry (a page shows the error), or
keep state beyond the member list.

Keys: the dashboard process has its own ``ClientSecurity`` (``txmq dashboard --access-key
--secret-key --tls --ca-file``, or the TXMQ_* variables): it signs the sampler's and the pages'
reads. A person who signed in on the page has their ``Credentials`` sign everything they do.
A change (create or delete a topic, decide a transaction) is never signed with the process's
keys: without a person's admin keys it goes unsigned, so a broker with ACL refuses it and the
dashboard is read-only; a broker without ACL accepts it.
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


@dataclass(frozen=True)
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
    write: bool,
) -> dict[str, Any]:
    """One admin call (blocking), signed as the module docstring says."""
    timeout_s = limits.DASHBOARD_CALL_TIMEOUT_MS / 1000.0
    if write and credentials is None:
        security = dataclasses.replace(security, access_key="", secret_key="")
    reply = admin.call(
        endpoint, method, args, timeout_s=timeout_s, security=security, credentials=credentials
    )
    invariant(isinstance(reply, dict), "the admin client returns a JSON object")
    return dict(reply)


def parse_members(endpoints: str) -> list[str]:
    members = [e.strip() for e in endpoints.split(",") if e.strip()]
    if not members:
        raise ValueError("--endpoints names no broker")
    return members


class Link:
    def __init__(self, members: list[str], security: ClientSecurity | None = None) -> None:
        invariant(bool(members), "a dashboard watches at least one broker")
        self.members = members
        self.security = security if security is not None else ClientSecurity()
        # The member that answered last: pages read from it, so one member down does not
        # blank every page of a cluster.
        self.preferred = members[0]

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
        write: bool = False,
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
                reply = await asyncio.to_thread(
                    call_blocking,
                    m,
                    method,
                    args or {},
                    security=self.security,
                    credentials=credentials,
                    write=write,
                )
            except BrokerUnavailableError as exc:
                last = exc
                continue
            self.preferred = m
            return reply
        invariant(last is not None, "every member was tried")
        assert last is not None
        raise last
