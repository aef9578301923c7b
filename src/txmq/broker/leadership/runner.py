"""Drive one replica's ``Election`` with etcd: the thin adapter between election.py and etcd.py.

Owns: the leader key of a group (``/txmq/<cluster>/groups/<group>/leader``, value JSON
``{"name", "endpoint"}``, attached to the leader's lease), running each step the election asks
for in a thread (etcd calls block), the lease's renewal on its own thread (keepalive.py; every
call into the election holds ``Leadership.lock``), and telling listeners when the leader
changes; the group's
replica list (``/txmq/<cluster>/replicas/<group>/<name>``, same value, no lease: each replica
puts its own at start and reads them all every REPLICA_LIST_PERIOD_MS), which routes advertise
(ADR 0006). An entry outlives its replica on purpose: a replica down is still one of the group,
and a route whose addresses do not change is one the clients keep.
Must not: decide (election.py does) or touch the store.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

from txmq import limits
from txmq.broker.leadership.backoff import Backoff, Repeats
from txmq.broker.leadership.election import Election, Step, sort_key
from txmq.broker.leadership.keepalive import LOOP_STALL_MAX_MS, LeaseRenewal
from txmq.broker.leadership.preferred import HandBack
from txmq.coordination.etcd import Etcd
from txmq.coordination.keys import (
    Confirmed,
    Leader,
    Member,
    decode_confirmed,
    decode_insync,
    decode_leader,
    encode_insync,
    insync_key,
    leader_key,
    replicas_prefix,
)
from txmq.errors import CoordinationError, RemoteProtocolError, invariant

log = logging.getLogger(__name__)


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


async def refresh_every(
    period_ms: int, refresh: Callable[[], None], what: str, clock: Callable[[], int] = monotonic_ms
) -> None:
    """Run the blocking etcd read ``refresh`` in a thread every ``period_ms``, forever (until
    cancelled); after a read etcd did not answer, the next comes after a backoff delay (from
    the period up, bounded, jittered) and the failure is logged as ``what`` (a repeated one
    once per COORDINATION_LOG_PERIOD_MS, with a count)."""
    backoff = Backoff(random.random, first_ms=period_ms, max_ms=2 * period_ms)
    repeats = Repeats(log, what, clock)
    while True:
        try:
            await asyncio.to_thread(refresh)
        except CoordinationError as exc:
            repeats.failed(str(exc))
            delay_ms = backoff.next_ms()
        else:
            repeats.succeeded()
            backoff.reset()
            delay_ms = period_ms
        await asyncio.sleep(delay_ms / 1000)


class LocalLog(Protocol):
    """This replica's log as the open store has it (follower.py)."""

    def log_state(self) -> tuple[int, list[tuple[int, int]]] | None:
        """(log end, epoch history); None while the store is being cut."""

    def renew(self, reason: str) -> Awaitable[None]:
        """Take a new incarnation (durable), saying ``reason``."""


class Leadership:
    """Campaign for, hold and watch the leadership of one replica group."""

    def __init__(
        self,
        etcd: Etcd,
        cluster: str,
        group: str,
        me: str,
        endpoint: str,
        *,
        clock: Callable[[], int] = monotonic_ms,
        ttl_ms: int = limits.REPLICA_LEASE_TTL_MS,
        incarnation: str | None = None,
        loop_stall_max_ms: int = LOOP_STALL_MAX_MS,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.etcd = etcd
        self.key = leader_key(cluster, group)
        self.insync_key = insync_key(cluster, group)
        self.value = json.dumps({"name": me, "endpoint": endpoint}).encode()
        self.group = group
        self.endpoint = endpoint
        self.replicas_prefix = replicas_prefix(cluster, group)
        # Every replica of the group as etcd lists them, name -> endpoint; this one always.
        self.replicas: dict[str, str] = {me: endpoint}
        self.election = Election(me, incarnation=incarnation, ttl_ms=ttl_ms, rand=rand)
        self.clock = clock
        # etcd's failures as this replica's steps meet them, logged once per period with a count.
        self.repeats = Repeats(log, "election step", clock)
        self.changed = asyncio.Event()  # set whenever the observed leader changes
        # Held around every call into ``election``: the keepalive thread renews the lease
        # (keepalive.py) while the loop steps and reads it.
        self.lock = threading.Lock()
        self.stepped_ms = clock()  # when ``step`` last ran (the keepalive thread asks)
        self.renewal = LeaseRenewal(
            etcd, self.election, self.lock, clock, self._lost, lambda: self.stepped_ms,
            loop_stall_max_ms, rand,
        )  # fmt: skip
        self._loop: asyncio.AbstractEventLoop | None = None  # the one ``run`` runs on
        # Was this replica in sync with the last leader it fetched from (follower.py)? Asked
        # only where no in-sync set is stored (Election.may_campaign).
        self.eligible: Callable[[], bool] = lambda: True
        # The group's durable end as this replica last knew it (leading: what it acknowledged
        # with SYNC replication; following: its leader's, cut to its own end): a divergent
        # tail never starts below it (follower.py asserts it). In memory: 0 after a restart.
        self.committed = 0
        self.errors = 0
        self._warned_rev = -1  # the stored set's revision _warn_reborn last spoke of
        # The open store, for the check that this replica still holds what the stored set
        # says it confirmed (None: none open; before the first, it may not campaign).
        self.local: LocalLog | None = None
        self._checked = False  # a store of this process passed that check (or was renewed)
        self.renewed: str | None = None  # why this process renewed its incarnation, if it did
        # Observations that found no leader while this replica might not campaign (not in
        # sync, not stored under its incarnation, or deferring to the preferred replica).
        self.abstained = 0
        # The preferred-replica rule (preferred.py): none until replica_node names the group's.
        self.handback = HandBack(me, None)

    @property
    def leader(self) -> Leader | None:
        return self.election.leader

    def leads(self) -> bool:
        with self.lock:
            return self.election.may_acknowledge(self.clock())

    def isolated(self, leader_answered_ms: int | None, since_ms: int = 0) -> bool:
        """``Election.isolated`` now: no etcd answer and no live leader's since ``since_ms``
        and within a lease TTL."""
        with self.lock:
            return self.election.isolated(self.clock(), leader_answered_ms, since_ms)

    def _lost(self) -> None:
        """etcd said our lease is gone (from the keepalive thread): wake the loop's watchers."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self.changed.set)

    async def step(self) -> Step:
        """Run the one step the election wants now; returns it."""
        e = self.election
        eligible = await self._holds_confirmed() and e.may_campaign(self.eligible())
        with self.lock:
            now = self.stepped_ms = self.clock()
            held = e.holds_key()
            leader, preferred = e.leader, self.handback.preferred
            named = any(n == preferred for n, _ in e.insync or [])
            deferred = not self.handback.may_campaign(
                now, leader=leader.name if leader else None, preferred_stored=named
            )
            step = e.next_step(now, eligible=eligible and not deferred)
            before = e.leader
            lapsed = held and e.lease_id is None
        if lapsed:
            log.warning(
                "this replica's lease lapsed by its own clock: the last keepalive answered was"
                " sent %d ms ago (%d renewals)", now - e.renewed_ms, self.renewal.renewals,
            )  # fmt: skip
        try:
            if step is Step.GRANT:
                new_lease, ttl = await asyncio.to_thread(self.etcd.grant, e.ttl_ms)
                with self.lock:
                    e.granted(now, new_lease, ttl)
            elif step is Step.CAMPAIGN:
                await self._campaign()
            elif step is Step.OBSERVE:
                # One read, one revision: the leader key and the in-sync set together.
                kvs = await asyncio.to_thread(self.etcd.get_prefix, self.key[: -len("leader")])
                stored = kvs.get(self.insync_key)
                with self.lock:
                    e.insync = decode_insync(stored)
                    e.confirmed = decode_confirmed(stored)
                    e.insync_rev = stored.mod_revision if stored is not None else 0
                    e.observed(self.clock(), decode_leader(kvs.get(self.key)))
                    if e.leader is None and not (eligible and not deferred and e.named()):
                        self.abstained += 1
                self._warn_reborn()
        except CoordinationError as exc:
            self.errors += 1
            self.repeats.failed(str(exc))
            with self.lock:
                e.unreachable(self.clock())
        else:
            if step is not Step.WAIT:  # etcd answered a call
                self.repeats.succeeded()
        if e.leader != before:
            self.changed.set()
        return step

    async def _campaign(self) -> None:
        """Compare-and-put the leader key with our lease (Step.CAMPAIGN)."""
        e = self.election
        lease = e.lease_id
        invariant(lease is not None, "a campaign holds a lease")
        assert lease is not None  # for mypy
        unchanged = (self.insync_key, e.insync_rev)
        claim = await asyncio.to_thread(
            self.etcd.put_if_absent, self.key, self.value, lease, unchanged
        )
        with self.lock:
            e.observed(self.clock(), decode_leader(claim.holder))
            if not claim.won and claim.holder is None:
                e.observed_ms = None  # the in-sync set changed: read it before campaigning
        if claim.won:
            self.renewal.wake()  # its first keepalive is due a period after the grant

    async def _holds_confirmed(self) -> bool:
        """This replica's log holds what the stored set says its members held (ADR 0005,
        "restored backups"); if it is named there and does not, its data directory lost records
        it had confirmed: it takes a new incarnation, and so may lead only once it caught up
        again and was stored under it. Checked against the open store before every step; with
        none open, only once a store of this process was checked (its data do not vanish while
        it runs). False: may not campaign now."""
        e = self.election
        confirmed, local = e.confirmed, self.local
        if confirmed is None or not e.named():
            return True
        state = local.log_state() if local is not None else None
        if state is None:
            return self._checked and local is None
        self._checked = True
        end, history = state
        if confirmed.held_by(history, end):
            return True
        assert local is not None  # for mypy: a state came from it
        await local.renew(
            f"its log ends at {end} (epochs {history[-3:]}), but the stored in-sync set says"
            f" every member held {confirmed.describe()}: its data directory lost records it"
            " had confirmed (a restored backup or a lost tail)"
        )
        return False

    def _warn_reborn(self) -> None:
        """Say once per stored set why this replica may not lead although the set names it:
        another incarnation of its data directory is stored (this one started empty)."""
        e = self.election
        theirs = [i for n, i in e.insync or [] if n == e.me and i is not None]
        if e.named() or not theirs or self._warned_rev == e.insync_rev:
            return
        self._warned_rev = e.insync_rev
        log.warning(
            "the stored in-sync set names %s with incarnation %s, this data directory is %s:"
            " it may lead only once it caught up from a leader and was stored again (if every"
            " member lost its data, see ADR 0005's unclean election)",
            e.me, theirs[0], e.incarnation,
        )  # fmt: skip

    async def run(self) -> None:
        """Step forever (until cancelled), waiting between steps until the next is due; the
        replica list is kept in its own task, and the lease renewed from its own thread
        (keepalive.py), which stops with this."""
        self._loop = asyncio.get_running_loop()
        lister = asyncio.create_task(self._list_replicas())
        self.renewal.start()
        try:
            while True:
                step = await self.step()
                if step is Step.WAIT:
                    delay = max(0, self.election.due_ms - self.clock())
                    await asyncio.sleep(min(delay, limits.REPLICA_OBSERVE_PERIOD_MS) / 1000)
        finally:
            self.renewal.stop()
            lister.cancel()
            await asyncio.gather(lister, return_exceptions=True)
            await asyncio.to_thread(self.renewal.join)

    def refresh_replicas(self) -> None:
        """Put this replica's entry (idempotent) and read every replica's (blocking: run in a
        thread). Raises CoordinationError when etcd does not answer."""
        me = self.election.me
        self.etcd.put(self.replicas_prefix + me, self.value)
        found = {}
        for key, kv in self.etcd.get_prefix(self.replicas_prefix).items():
            try:
                found[key[len(self.replicas_prefix) :]] = str(json.loads(kv.value)["endpoint"])
            except (ValueError, KeyError, TypeError):
                log.warning("replica entry %s holds no endpoint: %r", key, kv.value[:80])
        found[me] = self.endpoint
        self.replicas = found
        with self.lock:
            self.election.answered(self.clock())

    def store_insync(
        self, followers: list[Member], epoch: int, confirmed: Confirmed | None = None
    ) -> bool:
        """Store the in-sync set (this leader and ``followers``, each holding what
        ``confirmed`` says) while this replica's leader key of ``epoch`` stands (blocking: run
        in a thread); False if it does not. Raises CoordinationError when etcd does not
        answer."""
        e = self.election
        members = [(e.me, e.incarnation), *sorted(followers, key=sort_key)]
        value = encode_insync(epoch, members, confirmed)
        put = self.etcd.put_if_created(self.insync_key, value, self.key, epoch)
        if put:
            self.election.insync = members
            self.election.confirmed = confirmed
        return put

    async def _list_replicas(self) -> None:
        await refresh_every(
            limits.REPLICA_LIST_PERIOD_MS, self.refresh_replicas, "replica list not read"
        )

    def endpoints(self) -> list[str]:
        """Every replica's endpoint that etcd lists (this one's included)."""
        return sorted(set(self.replicas.values()))

    async def resign(self) -> None:
        """Step down cleanly: revoke our lease, which deletes the leader key at once."""
        with self.lock:
            lease = self.election.lease_id
            self.election.kept_alive(self.clock(), 0, lease)
        if lease is not None:
            await asyncio.to_thread(self.etcd.revoke, lease)

    async def hand_back(self) -> None:
        """Resign for the group's preferred replica, which caught up (preferred.py): its
        campaign wins while this replica holds its own back."""
        hb = self.handback
        log.info("handing the lead back to preferred replica %s (at %d)", hb.preferred, hb.mark)
        hb.resigned(self.clock())
        self.changed.set()  # the broker stops serving as leader at once
        try:
            await self.resign()
        except CoordinationError as exc:  # our lease lapsed here already; etcd expires it
            log.warning("lease not revoked (etcd deletes it within its TTL): %s", exc)


class GroupLeaders:
    """Every group's current leader as etcd names it, for the routes of a cluster of groups:
    this replica's own group from its ``Leadership`` (it leads, or reads its key every
    REPLICA_OBSERVE_PERIOD_MS), every other group from one prefix read of the cluster's leader
    keys every CLUSTER_LEADERS_PERIOD_MS (``run``). etcd is the one source: a peer's probe
    would only repeat, later, what that peer last read there."""

    def __init__(self, etcd: Etcd, cluster: str, own_group: str, own: Leadership) -> None:
        self.etcd = etcd
        self.prefix = leader_key(cluster, "")[: -len("/leader")]
        self.own_group = own_group
        self.own = own
        self._others: dict[str, Leader] = {}

    def leader_of(self, group: str) -> Leader | None:
        if group == self.own_group:
            return self.own.leader
        return self._others.get(group)

    def refresh(self) -> None:
        """Read every group's leader key (blocking: run in a thread).

        Raises:
            CoordinationError: etcd did not answer (the last leaders read are kept: a stale
                one refuses writes naming its successor, and clients retry).
        """
        found: dict[str, Leader] = {}
        for key, kv in self.etcd.get_prefix(self.prefix).items():
            group, _, leaf = key[len(self.prefix) :].partition("/")
            if leaf != "leader":
                continue
            try:
                leader = decode_leader(kv)
            except RemoteProtocolError as exc:
                log.warning("group %s: %s", group, exc)
                continue
            if leader is not None:
                found[group] = leader
        self._others = found

    async def run(self) -> None:
        """Refresh forever (until cancelled)."""
        await refresh_every(
            limits.CLUSTER_LEADERS_PERIOD_MS, self.refresh, "reading the groups' leaders"
        )
