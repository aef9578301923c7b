"""The dashboard's own pace: every ``DASHBOARD_SAMPLE_PERIOD_MS`` it asks each member for its
status and metrics and keeps the answer in that member's ring.

Owns: the sampling task and one ``Ring`` per member. A member that does not answer gets a
"down" sample with the reason, so the overview shows it down instead of an error page. Its
calls are signed with the dashboard's own keys (link.py); a member whose ACL verdict is unknown
is asked unsigned first (access.py), so the first sample also tells whether it checks keys.
Must not: sample faster than its period however many browsers are open (pages read the rings,
they never trigger a sample), or keep more than ``DASHBOARD_SAMPLES_MAX`` samples per member.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from txmq import limits
from txmq.dashboard.access import BrokerAccess
from txmq.dashboard.link import Link
from txmq.dashboard.samples import Ring, Sample, parse_sample
from txmq.dashboard.ui_text import AUTH_CODES, banner
from txmq.errors import CODE_UNAUTHORIZED, BrokerUnavailableError, TxmqError

log = logging.getLogger("txmq.dashboard")


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


def refused_text(exc: TxmqError) -> str:
    if getattr(exc, "code", None) in AUTH_CODES:
        return (
            f"The broker refused the dashboard's own keys: {exc}. The charts need an admin's "
            "keys given to txmq dashboard (--access-key/--secret-key or TXMQ_ACCESS_KEY/"
            "TXMQ_SECRET_KEY)."
        )
    return banner(exc)


class Sampler:
    def __init__(self, link: Link, *, period_ms: int = limits.DASHBOARD_SAMPLE_PERIOD_MS) -> None:
        self.link = link
        self.period_ms = period_ms
        self.rings = {m: Ring() for m in link.members}
        self.access = BrokerAccess(link)

    async def status(self, member: str) -> dict[str, Any]:
        """``member``'s Status: asked unsigned when its ACL verdict is due, else (or when it
        checks keys) signed with the dashboard's own keys."""
        if self.access.needs_asking(member):
            try:
                return await self.access.ask(member)
            except TxmqError as exc:
                if getattr(exc, "code", None) != CODE_UNAUTHORIZED or not self.link.has_keys:
                    raise
        return await self.link.call("Status", member=member, own_keys=True)

    async def sample(self, member: str) -> Sample:
        now = wall_ms()
        try:
            r = await self.status(member)
            return parse_sample(
                str(r["metrics"]), now, float(r["disk_used_ratio"]), float(r["disk_watermark"])
            )
        except BrokerUnavailableError as exc:
            self.access.seen_down(member)
            return Sample(time_ms=now, up=False, error=str(exc))
        except TxmqError as exc:
            return Sample(time_ms=now, up=True, refused=True, error=refused_text(exc))

    async def discover(self) -> None:
        """Add the members of the cluster behind the watched ones (ClusterInfo), so one
        ``--endpoints`` member is enough to watch a whole cluster. A broker that cannot say
        (down, refused, or older than clusters) leaves the list as it is, and is asked again
        next period."""
        try:
            info = await self.link.call("ClusterInfo", own_keys=True)
        except TxmqError as exc:
            log.debug("cluster members unknown this period: %s", exc)
            return
        for m in info.get("members", []):
            endpoint = str(m.get("endpoint", ""))
            if m.get("self"):
                continue  # the member that answered: already watched, maybe under another name
            if endpoint and self.link.add_member(endpoint):
                self.rings[endpoint] = Ring()
                log.info("watching cluster member %s", endpoint)

    async def sample_all(self) -> None:
        await self.discover()
        samples = await asyncio.gather(*(self.sample(m) for m in self.link.members))
        for member, s in zip(self.link.members, samples, strict=True):
            self.rings[member].add(s)

    async def run(self) -> None:
        """Sample forever (until cancelled); the first sample is taken at once."""
        while True:
            started = time.monotonic()
            await self.sample_all()
            elapsed_s = time.monotonic() - started
            await asyncio.sleep(max(0.0, self.period_ms / 1000.0 - elapsed_s))
