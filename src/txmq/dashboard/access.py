"""Whether the brokers the dashboard watches check keys (an ACL), learnt by asking.

Owns: one verdict per member, from an *unsigned* ``Status`` call: answered means the broker is
open (no ACL); ``UNAUTHORIZED`` means it has an ACL. A member is asked when its verdict is
unknown and again after it was seen down (it may have restarted with or without
``--acl-file``); in between the sampler's own calls serve. One refusal is logged by the broker
per question, not one per sample.
The dashboard as a whole is open only when some member is known open and none is known to
check keys; until then (a broker not yet reached) it asks for a sign-in: it fails closed.
Must not: sign its question (a broker with ACL would then answer, and look open).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from txmq.dashboard.link import Link
from txmq.errors import CODE_UNAUTHORIZED, TxmqError

log = logging.getLogger("txmq.dashboard")
ASK_AGAIN_S = 1.0


class BrokerAccess:
    def __init__(self, link: Link) -> None:
        self.link = link
        self.acl: dict[str, bool] = {}  # member -> it checks keys
        self.stale: set[str] = set()  # seen down since its verdict: ask again
        self._asking = asyncio.Lock()
        self._asked_at = -ASK_AGAIN_S

    def verdict(self) -> bool | None:
        """True: some member checks keys; False: every member known is open; None: unknown."""
        if any(self.acl.values()):
            return True
        return False if self.acl else None

    def needs_asking(self, member: str) -> bool:
        return member not in self.acl or member in self.stale

    def seen_down(self, member: str) -> None:
        if member in self.acl:
            self.stale.add(member)

    async def ask(self, member: str) -> dict[str, Any]:
        """An unsigned ``Status`` of ``member``; its reply when the broker is open.

        Raises:
            TxmqError: the broker's refusal (UNAUTHORIZED: it checks keys, now recorded) or
                BrokerUnavailableError (verdict unchanged).
        """
        try:
            reply = await self.link.call("Status", member=member)
        except TxmqError as exc:
            if getattr(exc, "code", None) == CODE_UNAUTHORIZED:
                self._learn(member, acl=True)
            raise
        self._learn(member, acl=False)
        return reply

    async def settle(self) -> bool | None:
        """The verdict, asking the members whose verdict is unknown when there is none yet
        (bounded by the admin call's timeout; one question at a time, and none within
        ``ASK_AGAIN_S`` of the last, so a flood of requests while no broker answers waits for
        no more than one)."""
        if self.verdict() is not None:
            return self.verdict()
        async with self._asking:
            if self.verdict() is not None or time.monotonic() - self._asked_at < ASK_AGAIN_S:
                return self.verdict()
            unknown = [m for m in list(self.link.members) if m not in self.acl]
            found = await asyncio.gather(*(self.ask(m) for m in unknown), return_exceptions=True)
            self._asked_at = time.monotonic()
        for member, answer in zip(unknown, found, strict=True):
            if isinstance(answer, BaseException):
                log.debug("asked %s whether it checks keys: %s", member, answer)
        return self.verdict()

    def _learn(self, member: str, *, acl: bool) -> None:
        self.acl[member] = acl
        self.stale.discard(member)
