"""A replica group's preferred replica, and when its leader hands the lead back to it, sans-I/O.

Owns: the rule (ADR 0005, "the preferred replica"): a group's **preferred replica** is its
first member in the group's member order as the cluster file names them (`cluster up` writes
replica-0 of a group first, on the group's lowest port, which the official Python client's
sorted pick_first dials first); a group known from etcd alone (``--replica-group`` without a
cluster file) has none. Whenever the preferred replica is alive and in sync it should lead:

- A leader that is not the preferred replica, seeing it in the in-sync set and caught up (its
  fetch holds what this leader had written when its previous fetch came in), **drains**: it
  acknowledges nothing from then on (writes are answered NotLeader, retriable), notes its
  durable end (every byte it ever acknowledged is below it), and **resigns** (revokes its
  lease) once the preferred replica's fetch reached that end. A drain that does not reach it
  within ``drain_max_ms`` is called off: the leader acknowledges again, and tries no hand-back
  for ``retry_ms`` (no livelock with a preferred replica that cannot keep up).
- After resigning it does not campaign for ``takeover_ms``: the preferred replica's campaign
  (the normal one, with every check of ADR 0005) wins meanwhile; if it did not lead by then,
  the old leader campaigns normally again. Nothing here lets any replica lead without the
  normal campaign, nor acknowledge past its lease: fencing is untouched.
- A replica that is not preferred, finding the group leaderless while the stored in-sync set
  names the preferred replica, defers its campaign by ``defer_ms`` unless the leader that went
  was the preferred one (it is dead: no one to wait for); the failover bound grows by that at
  most.
Must not: do I/O, read a clock (every method takes ``now_ms``), or decide anything about
fencing or eligibility (election.py does).
"""

from __future__ import annotations

import enum
from typing import Final

from txmq import limits
from txmq.broker.leadership.election import InSync, matches
from txmq.coordination.cluster_file import Group
from txmq.coordination.keys import Member

# A leader that is not preferred drains (acknowledges nothing) for at most DRAIN_MAX_MS while
# the preferred replica reaches its mark, then resigns and does not campaign for TAKEOVER_MS
# (the preferred one observes, grants and campaigns within about an observe period and two
# etcd calls, then opens its broker); a drain called off, or a hand-back, is not tried again for
# RETRY_MS. A replica that is not preferred waits DEFER_MS before it campaigns in a leaderless
# group whose stored in-sync set names the preferred one.
DRAIN_MAX_MS: Final = 2_000
TAKEOVER_MS: Final = 4_000
RETRY_MS: Final = 30_000
DEFER_MS: Final = 1_000
# If the preferred replica never took over, the old leader campaigns once the hold ends (its
# key gone, or at worst expired with its lease); deferring adds DEFER_MS to a failover: both
# within the 10 s failover bound the replication tests hold.
assert TAKEOVER_MS + limits.REPLICA_LEASE_TTL_MS + limits.REPLICA_OBSERVE_PERIOD_MS <= 10_000
assert DEFER_MS + limits.REPLICA_LEASE_TTL_MS + 2 * limits.REPLICA_OBSERVE_PERIOD_MS <= 10_000


def preferred_of(group: Group) -> str | None:
    """The group's preferred replica: its first member as the cluster file lists them (None
    for a group of one, which has no one to hand the lead to)."""
    return group.replicas[0].name if len(group.replicas) > 1 else None


def counts(insync: InSync, stored: list[Member] | None, name: str, now_ms: int) -> bool:
    """Follower ``name`` may lead after this leader: the in-sync set as etcd holds it
    (``stored``: ``Election.insync``, what this leader last stored or read; its campaign is
    checked against that) names it under the incarnation it fetches with; without a stored
    set (a fresh group, ASYNC), it is in sync by the lag rule. Not the set a store under way
    would write (``InSync.stored`` holds that too meanwhile): resigning before etcd has it
    would leave a group whose preferred replica may not campaign."""
    if stored is None:
        return name in insync.members(now_ms)
    f = insync.followers.get(name)
    return f is not None and any(matches(m, name, f.incarnation) for m in stored)


class Phase(enum.Enum):
    LEAD = "lead"  # acknowledge as usual
    DRAIN = "drain"  # acknowledge nothing; wait for the preferred replica to reach ``mark``
    RESIGN = "resign"  # drained: revoke the lease now (the caller does, then ``resigned``)


class HandBack:
    """One replica's side of the preferred-replica rule (the module's docstring)."""

    def __init__(
        self,
        me: str,
        preferred: str | None,
        *,
        drain_max_ms: int = DRAIN_MAX_MS,
        takeover_ms: int = TAKEOVER_MS,
        retry_ms: int = RETRY_MS,
        defer_ms: int = DEFER_MS,
    ) -> None:
        self.me = me
        self.preferred = preferred
        self.drain_max_ms = drain_max_ms
        self.takeover_ms = takeover_ms
        self.retry_ms = retry_ms
        self.defer_ms = defer_ms
        self.phase = Phase.LEAD
        self.mark = 0  # this leader's durable end when it began to drain
        self.since_ms = 0  # ... and when
        self.not_before_ms = 0  # no hand-back begins before this (after one was tried)
        self.hold_until_ms = 0  # after resigning: no campaign before this
        self._last_end: int | None = None  # this leader's end at the preferred's previous fetch
        self._last_leader: str | None = None  # the leader last seen while there was one
        self._leaderless_ms: int | None = None  # since when no leader is seen
        self.handed_back = 0  # hand-backs done, and called off, by this process
        self.called_off = 0

    @property
    def applies(self) -> bool:
        """This replica has a preferred replica to hand the lead to (it is not that one)."""
        return self.preferred is not None and self.preferred != self.me

    def began_leading(self) -> None:
        """A new term of this replica's leadership: it acknowledges as usual."""
        self.phase = Phase.LEAD
        self._last_end = None

    def fetched(
        self, now_ms: int, *, offset: int, leader_end: int, durable_end: int, in_sync: bool
    ) -> Phase:
        """The preferred replica fetched from ``offset`` (it holds every byte below it durable)
        while this leader's log was written out to ``leader_end`` and durable to
        ``durable_end``; ``in_sync``: the in-sync set counts it (the stored set names it
        under the incarnation it fetches with, or, without a stored set, the lag rule)."""
        last, self._last_end = self._last_end, leader_end
        if not self.applies:
            return self.phase
        caught_up = last is not None and offset >= last
        if self.phase is Phase.LEAD and in_sync and caught_up and now_ms >= self.not_before_ms:
            self.phase, self.mark, self.since_ms = Phase.DRAIN, durable_end, now_ms
        if self.phase is Phase.DRAIN and in_sync and offset >= self.mark:
            self.phase = Phase.RESIGN
        return self._expire(now_ms)

    def may_acknowledge(self, now_ms: int) -> bool:
        """Whether a write may be acknowledged now as far as this rule goes (the lease and the
        in-sync replicas decide the rest)."""
        return self.phase is Phase.LEAD or self._expire(now_ms) is Phase.LEAD

    def _expire(self, now_ms: int) -> Phase:
        if self.phase is Phase.DRAIN and now_ms - self.since_ms >= self.drain_max_ms:
            self.phase = Phase.LEAD
            self.not_before_ms = now_ms + self.retry_ms
            self.called_off += 1
        return self.phase

    def resigned(self, now_ms: int) -> None:
        """This leader resigns now (its lease revoked) for the preferred replica to lead."""
        self.phase = Phase.LEAD
        self.hold_until_ms = now_ms + self.takeover_ms
        self.not_before_ms = now_ms + self.retry_ms
        self.handed_back += 1

    def may_campaign(self, now_ms: int, *, leader: str | None, preferred_stored: bool) -> bool:
        """Whether this replica may campaign now as far as this rule goes, the leader key
        naming ``leader`` (None: no leader); ``preferred_stored``: the stored in-sync set names
        the preferred replica (so it may lead, if it lives)."""
        if leader is not None:
            self._last_leader, self._leaderless_ms = leader, None
            return True
        if self._leaderless_ms is None:
            self._leaderless_ms = now_ms
        if now_ms < self.hold_until_ms:
            return False
        if not self.applies or not preferred_stored or self._last_leader == self.preferred:
            return True
        return now_ms - self._leaderless_ms >= self.defer_ms
