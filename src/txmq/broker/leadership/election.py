"""Leadership of one replica group and its in-sync set, sans-I/O (h11 style).

Owns: what a replica should do next about leadership (``Election.next_step``) given what etcd
answered (``granted``, ``kept_alive``, ``observed``) and the time, all passed in; when the lease
a leader holds is to be renewed (``renewal_due``: keepalive.py's thread asks); whether this
replica may acknowledge a write right now (``may_acknowledge``); the in-sync set of a group and
the offset the group has durable (``InSync``). The rules are ADR 0005's.
Must not: do I/O, read a clock or know etcd's wire format (etcd.py and leadership.py do).

Members are (name, incarnation) pairs: the incarnation is the id of the replica's data
directory (store/replica/identity.py), new whenever that directory starts empty. A replica restarted
on a wiped disk under its old name is another member: it neither counts for acks nor may lead
until it caught up under its new incarnation and the leader stored it (Kafka's KIP-966).

Fencing rests on one inequality. A lease granted or renewed by a request *sent* at local time
``t`` expires in etcd no earlier than ``t + ttl`` of etcd's clock; this replica considers itself
leader only until ``t + ttl - REPLICA_LEASE_SAFETY_MS`` of its own clock. So when etcd lets
another replica take the leader key, this one has already stopped acknowledging, however long
it was paused: a resumed process sees its deadline passed before it looks at anything else.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from txmq import limits
from txmq.broker.leadership.backoff import Backoff
from txmq.coordination.keys import Confirmed, Leader, Member
from txmq.errors import invariant


def matches(stored: Member, name: str, incarnation: str | None) -> bool:
    """The stored member is this replica as it is now: same name, and the same incarnation
    unless the stored one is unknown."""
    return stored[0] == name and (stored[1] is None or stored[1] == incarnation)


def sort_key(m: Member) -> tuple[str, str]:
    return m[0], m[1] or ""


# In a refusal of a fetch from below what the follower confirmed (InSync.lost): the follower
# takes a new incarnation when it reads it (follower.py).
BELOW_CONFIRMED: Final = "below what it confirmed"


class Step(enum.Enum):
    GRANT = "grant"  # ask etcd for a lease (we hold none, or ours lapsed)
    CAMPAIGN = "campaign"  # compare-and-put the leader key with our lease
    OBSERVE = "observe"  # read the leader key
    WAIT = "wait"  # nothing is due before ``Election.due_ms``


class Election:
    """One replica's view of its group's leadership."""

    def __init__(
        self,
        me: str,
        *,
        incarnation: str | None = None,
        ttl_ms: int = limits.REPLICA_LEASE_TTL_MS,
        rand: Callable[[], float] = random.random,
    ) -> None:
        invariant(ttl_ms > limits.REPLICA_LEASE_SAFETY_MS, "lease TTL must exceed its margin")
        self.me = me
        # This replica's data directory's incarnation (None: unknown, eligible only where a
        # stored set names it with an unknown incarnation too). Changes when the follower wipes
        # its own store (follower.py).
        self.incarnation = incarnation
        self.ttl_ms = ttl_ms
        self.lease_id: int | None = None
        self.lease_deadline_ms = 0  # our own clock; 0 = no lease
        self.leader: Leader | None = None
        self.observed_ms: int | None = None  # when the leader key was last read
        self.renewed_ms = 0  # when our last keepalive (or grant) was sent
        self.due_ms = 0
        # After a call etcd did not answer, no step before ``retry_ms`` (``unreachable``);
        # ``rand`` draws the delays' jitter (injected: this module reads no clock or entropy).
        self.backoff = Backoff(rand)
        self.retry_ms = 0
        self.heard_ms: int | None = None  # when etcd last answered a call of this replica
        # The group's in-sync set as etcd stored it when the leader key was last read (None:
        # no set stored, a fresh group or ASYNC replication: every replica may campaign).
        self.insync: list[Member] | None = None
        self.insync_rev = 0  # the set's etcd mod revision as read (0: no key): a campaign
        # wins only if the set has not changed since (etcd.put_if_absent's ``unchanged``)
        # What every member of that set held when it was stored (None: not recorded).
        self.confirmed: Confirmed | None = None

    # --- What to do next. ---------------------------------------------------------------------

    def leads(self, now_ms: int) -> bool:
        """We hold the leader key, with our own lease, and it has not lapsed by our own clock.
        A key that names us under another lease is an earlier process's of this replica
        (killed, restarted within the TTL): etcd deletes it when that lease expires, which our
        keepalives do not put off, so it is not ours to lead with."""
        return self.holds_key() and now_ms < self.lease_deadline_ms

    def holds_key(self) -> bool:
        """The leader key as last observed is this replica's, under the lease it holds now
        (whether or not that lease has lapsed by our clock: ``leads`` asks that too)."""
        leader, lease = self.leader, self.lease_id
        return (
            leader is not None
            and leader.name == self.me
            and lease is not None
            and leader.lease == lease
        )

    def isolated(self, now_ms: int, leader_answered_ms: int | None, since_ms: int = 0) -> bool:
        """This replica should not serve clients now (ADR 0006, "a replica cut off"): it does
        not lead, and neither etcd nor a live leader answered it since ``since_ms`` and within
        the last lease TTL (``leader_answered_ms``: when a leader last answered its fetch; a
        leader answers only while it leads by its own clock). It may then know no leader, or
        one that is gone, and cannot learn the new one: a client it serves waits for nothing."""
        if self.leads(now_ms):
            return False
        heard = max(
            -1 if self.heard_ms is None else self.heard_ms,
            -1 if leader_answered_ms is None else leader_answered_ms,
        )
        return heard < since_ms or now_ms - heard > self.ttl_ms

    def may_acknowledge(self, now_ms: int) -> bool:
        """A write may be acknowledged as this group's now: we lead by ``leads``."""
        return self.leads(now_ms)

    def named(self) -> bool:
        """The stored in-sync set names this replica, by name and incarnation (no set stored:
        a fresh group, or ASYNC; everyone may campaign)."""
        if self.insync is None:
            return True
        return any(matches(m, self.me, self.incarnation) for m in self.insync)

    def may_campaign(self, caught_up: bool) -> bool:
        """Whether this replica may campaign when the group has no leader (ADR 0005). With an
        in-sync set stored (SYNC replication), the set alone decides: a replica it names, with
        its incarnation, holds every acknowledged write, however far it was behind the dead
        leader's unacknowledged tail (Kafka's ISR as last stored). Without one (a fresh group,
        or ASYNC), ``caught_up``: its own view, that it was in sync with the last leader as of
        its last successful fetch."""
        return self.named() if self.insync is not None else caught_up

    def next_step(self, now_ms: int, *, eligible: bool = True) -> Step:
        """The step due now; ``eligible`` False keeps a replica that was not in sync with the
        last leader from campaigning, and so does a stored in-sync set that does not name this
        replica with its incarnation (no unclean election, ADR 0005)."""
        eligible = eligible and self.named()
        if self.lease_id is not None and now_ms >= self.lease_deadline_ms:
            self._lapse()
        if self.leads(now_ms):  # renewed by ``renewal_due``'s caller, its own timer
            self.due_ms = self.lease_deadline_ms
            return Step.WAIT
        if now_ms < self.retry_ms:  # etcd did not answer the last call: back off
            self.due_ms = self.retry_ms
            return Step.WAIT
        seen = self.observed_ms
        if seen is None or now_ms - seen >= limits.REPLICA_OBSERVE_PERIOD_MS:
            return Step.OBSERVE
        if self.leader is None and eligible:
            return Step.CAMPAIGN if self.lease_id is not None else Step.GRANT
        self.due_ms = seen + limits.REPLICA_OBSERVE_PERIOD_MS
        return Step.WAIT

    def renewal_due(self, now_ms: int) -> int | None:
        """The lease to renew now (we lead, and a keepalive period passed since the last was
        sent), else None. Its sender calls ``kept_alive`` with the answer; the next is due at
        ``renewal_at``."""
        if self.leads(now_ms) and now_ms - self.renewed_ms >= limits.REPLICA_KEEPALIVE_PERIOD_MS:
            return self.lease_id
        return None

    def renewal_at(self) -> int:
        """When the next keepalive is due, if we still lead then."""
        return self.renewed_ms + limits.REPLICA_KEEPALIVE_PERIOD_MS

    # --- What etcd answered. ------------------------------------------------------------------

    def granted(self, sent_ms: int, lease_id: int, ttl_ms: int) -> None:
        """etcd granted lease ``lease_id`` for ``ttl_ms`` to a request sent at ``sent_ms``."""
        invariant(ttl_ms > 0, "a granted lease has a TTL")
        self._heard(sent_ms)
        self.lease_id = lease_id
        self._extend(sent_ms, ttl_ms)

    def kept_alive(self, sent_ms: int, ttl_ms: int, lease_id: int | None) -> None:
        """A keepalive of ``lease_id`` sent at ``sent_ms`` was answered with ``ttl_ms`` (0: the
        lease is gone). An answer about another lease than the one held now (ours lapsed while
        the keepalive was on its way) changes nothing."""
        self._heard(sent_ms)
        if lease_id != self.lease_id:
            return
        if ttl_ms <= 0:
            self._lapse()
            return
        self._extend(sent_ms, ttl_ms)

    def observed(self, now_ms: int, leader: Leader | None) -> None:
        """The leader key holds ``leader`` (None: no key; the group has no leader)."""
        if leader is not None and self.leader is not None:
            invariant(
                leader.epoch >= self.leader.epoch or self.leader.name == self.me,
                f"epochs only grow: saw {leader.epoch} after {self.leader.epoch}",
            )
        if self.holds_key() and leader != self.leader:
            self._lapse()  # our key is gone or someone else's: etcd expired our lease
        self.leader = leader
        self.observed_ms = now_ms
        self._heard(now_ms)

    def answered(self, now_ms: int) -> None:
        """etcd answered another call of this replica (its entry in the replica list)."""
        self._heard(now_ms)

    def _heard(self, now_ms: int) -> None:
        self.backoff.reset()
        self.heard_ms = now_ms if self.heard_ms is None else max(self.heard_ms, now_ms)

    def unreachable(self, now_ms: int) -> None:
        """etcd did not answer (refused, timed out, failed): no step until a backoff delay
        passed (``Backoff``: growing with each failure in a row, bounded, jittered); then the
        step due is the one that failed, or an observation if one fell due meanwhile. A leader
        keeps leading only until its own deadline."""
        self.retry_ms = now_ms + self.backoff.next_ms()
        self.renewed_ms = min(self.renewed_ms, now_ms)

    def _extend(self, sent_ms: int, ttl_ms: int) -> None:
        self.renewed_ms = sent_ms
        self.lease_deadline_ms = max(
            self.lease_deadline_ms, sent_ms + ttl_ms - limits.REPLICA_LEASE_SAFETY_MS
        )

    def _lapse(self) -> None:
        self.lease_id = None
        self.lease_deadline_ms = 0
        if self.leader is not None and self.leader.name == self.me:
            self.leader = None
        self.observed_ms = None  # read the key again before anything else


@dataclass
class Follower:
    fetched_to: int = 0  # every byte below this offset is durable on the follower
    caught_up_ms: int = 0  # last time fetched_to reached the leader's end offset
    asked_end: int = 0  # the leader's end when this follower's previous fetch came in
    asked_ms: int = 0  # ... and when that was
    incarnation: str | None = None  # of its data directory, as its last fetch said
    # The most it said it holds under that incarnation (the stored set's confirmed end for a
    # stored member; its highest fetch since): a fetch from below means its log lost records.
    confirmed: int = 0


class InSync:
    """The leader's in-sync set (ADR 0005): the leader, and each follower whose fetch reached
    the leader's log end within the last ``lag_max_ms``. A follower's fetch from offset ``o``
    says it holds every byte below ``o`` durable, so the group holds durable every byte below
    the ``min_insync``-th highest such offset (the leader counting with its own durable end).
    Followers are known by name; each remembers the incarnation its last fetch gave."""

    def __init__(
        self, followers: list[str], now_ms: int, *, lag_max_ms: int = limits.REPLICA_LAG_MAX_MS
    ) -> None:
        invariant(len(followers) < limits.REPLICAS_MAX, "too many followers")
        self.lag_max_ms = lag_max_ms
        # A new leader counts its followers in sync until lag_max_ms passes without them.
        self.followers = {name: Follower(0, now_ms) for name in followers}
        # With SYNC replication, the followers of the set stored in etcd (None: not kept; then
        # the lag rule alone counts). Every acknowledged byte is durable on each of them.
        self.stored: set[Member] | None = None
        self.acked = 0  # every byte below was acknowledged as durable on the group

    def keep_stored(self, members: list[Member], now_ms: int, confirmed: int = 0) -> None:
        """Keep the set in etcd, starting from ``members`` (the followers the last stored set
        names: a new leader's epoch starts from its predecessor's set, ADR 0005), each of
        which held the log below ``confirmed`` when it was stored."""
        invariant(len(self.followers) + len(members) < limits.REPLICAS_MAX, "too many followers")
        for name, incarnation in members:
            held = confirmed if incarnation is not None else 0
            self.followers.setdefault(
                name, Follower(0, now_ms, incarnation=incarnation, confirmed=held)
            )
        self.stored = set(members)

    def lost(self, name: str, offset: int, incarnation: str | None) -> int | None:
        """What follower ``name`` confirmed holding, when it now fetches from below it under
        the same incarnation (its log lost records: a restored backup, a lost tail); else None.
        Its fetches to this leader only ever grow, and a divergent cut never goes below what
        a stored member held (ADR 0005), so nothing else lowers them."""
        f = self.followers.get(name)
        if f is None or incarnation is None or f.incarnation != incarnation:
            return None
        return f.confirmed if offset < f.confirmed else None

    def confirmed_end(self, members: set[Member], leader_durable: int) -> int:
        """Every byte below the answer is durable here and was confirmed by each of
        ``members`` that fetches under its stored incarnation (one that fetches under another
        lost what it held: no one can claim to be it any more)."""
        held = [self.followers[m[0]].confirmed for m in members if self.current(m)]
        return min([leader_durable, *held])

    def current(self, m: Member) -> bool:
        """Stored member ``m`` is the follower of that name as it fetches now."""
        f = self.followers.get(m[0])
        return f is not None and matches(m, m[0], f.incarnation)

    def holds(self, m: Member) -> int:
        """What stored member ``m`` holds durable: nothing if its name now fetches under
        another incarnation (its data directory was wiped: what it held is gone)."""
        return self.followers[m[0]].fetched_to if self.current(m) else 0

    def wanted(self, min_insync: int, now_ms: int) -> set[Member] | None:
        """The followers to store as the in-sync set next (None: the stored set stands). A
        member out of sync by the lag rule, or whose name fetches under a new incarnation,
        leaves, unless fewer than ``min_insync`` replicas would remain (acks wait for it then
        anyway, so nothing is acknowledged without it); a follower in sync joins once it holds
        every acknowledged byte, replacing its name's older incarnation. A member stored with
        an unknown incarnation is stored again with the one its fetches give (upgrade)."""
        invariant(self.stored is not None, "the in-sync set is kept in etcd")
        assert self.stored is not None  # for mypy
        stored = {self._known(m) for m in self.stored}
        lagging = set(self.live(now_ms))
        keep = stored & lagging
        new = {m for m in lagging - stored if self.followers[m[0]].fetched_to >= self.acked}
        if len(keep | new) + 1 >= min_insync:
            target = keep | new
        else:
            replaced = {name for name, _ in new}
            target = {m for m in stored if m[0] not in replaced} | new
        return None if target == self.stored else target

    def _known(self, m: Member) -> Member:
        """A member stored with an unknown incarnation, as its name fetches now (if it does)."""
        f = self.followers.get(m[0])
        return (m[0], f.incarnation) if m[1] is None and f is not None else m

    def fetched(
        self, name: str, offset: int, leader_end: int, now_ms: int, incarnation: str | None = None
    ) -> bool:
        """Follower ``name`` (data directory ``incarnation``) fetched from ``offset``; a
        follower not seen before joins (the group's members come and go with their processes).
        True if ``name`` fetched under another incarnation before: it starts out of sync."""
        f = self.followers.get(name)
        reborn = f is not None and f.incarnation not in (None, incarnation)
        if f is None or reborn:
            grows = f is None
            invariant(not grows or len(self.followers) + 1 < limits.REPLICAS_MAX, "followers max")
            # A reborn follower is in sync only once it caught up; a new name is counted in
            # sync for lag_max_ms, as a new leader's followers are (it joins the stored set
            # only once it holds every acknowledged byte).
            since = now_ms - self.lag_max_ms - 1 if reborn else now_ms
            f = self.followers[name] = Follower(0, since, 0, since, incarnation)
        elif f.incarnation is None:
            f.incarnation = incarnation  # stored before incarnations were: accepted as it is
        invariant(offset <= leader_end, f"{name} fetched past the leader's end")
        # What it holds now, not the most it ever held: a follower restarted on an empty disk
        # (or that cut a divergent tail) fetches from a lower offset, and holds only that.
        f.fetched_to = offset
        f.confirmed = max(f.confirmed, offset)
        if offset >= leader_end:
            f.caught_up_ms = now_ms
        elif offset >= f.asked_end:
            # Kafka's rule: it now holds what we had when it last asked, so it was caught up
            # then. Under steady writes the end moves on during every round trip (our next
            # group is written while its fsync runs), and "reached the end now" may never be.
            f.caught_up_ms = max(f.caught_up_ms, f.asked_ms)
        f.asked_end, f.asked_ms = leader_end, now_ms
        return reborn

    def live(self, now_ms: int) -> list[Member]:
        """The followers in sync by the lag rule, as (name, incarnation)."""
        return [
            (n, f.incarnation)
            for n, f in self.followers.items()
            if now_ms - f.caught_up_ms <= self.lag_max_ms
        ]

    def missing(self, end: int, min_insync: int, now_ms: int) -> list[str]:
        """The followers a write up to ``end`` waits for, for a refusal's message: with a
        stored set, each stored member that does not hold it, and how many more replicas the
        set lacks; else each follower that does not hold it, or that does but is out of sync."""
        if self.stored is not None:
            out = sorted(
                m[0] if self.current(m) else f"{m[0]} (its data directory started anew)"
                for m in self.stored
                if self.holds(m) < end
            )
            short = min_insync - 1 - len(self.stored)
            return [*out, f"{short} more in-sync replica(s)"] if short > 0 else out
        live = set(self.members(now_ms))
        return sorted(
            n if n in live else f"{n} (out of sync)"
            for n, f in self.followers.items()
            if f.fetched_to < end or n not in live
        )

    def members(self, now_ms: int) -> list[str]:
        return [n for n, _ in self.live(now_ms)]

    def durable_end(self, leader_durable: int, min_insync: int, now_ms: int) -> int:
        """Every byte below the answer is durable on ``min_insync`` in-sync replicas (the
        leader included); -1 if fewer than ``min_insync`` replicas are in sync."""
        invariant(min_insync >= 1, "min_insync_replicas >= 1")
        if self.stored is not None:  # every member of the stored set holds it, and enough do
            if len(self.stored) + 1 < min_insync:
                return -1
            return min([leader_durable] + [self.holds(m) for m in self.stored])
        ends = sorted(
            [leader_durable] + [self.followers[n].fetched_to for n in self.members(now_ms)],
            reverse=True,
        )
        if len(ends) < min_insync:
            return -1
        return min(ends[min_insync - 1], leader_durable)

    def followers_end(self, min_insync: int, now_ms: int) -> int:
        """Every byte below the answer is durable on ``min_insync - 1`` in-sync followers (-1 if
        fewer are in sync): where the leader's own durable records are on ``min_insync``."""
        invariant(min_insync >= 2, "the leader alone needs no followers")
        if self.stored is not None:
            if len(self.stored) + 1 < min_insync:
                return -1
            return min(self.holds(m) for m in self.stored)
        ends = sorted((self.followers[n].fetched_to for n in self.members(now_ms)), reverse=True)
        return ends[min_insync - 2] if len(ends) >= min_insync - 1 else -1

    def lag_bytes(self, leader_end: int) -> dict[str, int]:
        return {n: max(0, leader_end - f.fetched_to) for n, f in self.followers.items()}
