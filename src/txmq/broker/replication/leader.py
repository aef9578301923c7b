"""The leader's side of a replica group: the Replica channel, the in-sync set, SYNC acks.

Owns: ``txmq.replica.v1.Replica`` (``Fetch``: a follower's long poll for the commit log from
its end offset; ``Follow``: the same rounds on one long-lived stream, a request and its reply
in lockstep, ended after a refusal (leader_link.py is the follower's side); ``Epochs``: this
leader's epoch history and end, for a follower whose tail diverged; ``Status``: this replica's
role, leader, epoch, end, in-sync set and lags), stamping
the log with this leader's epoch before its first write (store/replica/epochs.py),
and ``Replication.acknowledge``, the gate every write passes before it is acknowledged: this
replica must lead by its own clock, and with ``min_insync_replicas`` > 1 the write must be on
that many in-sync replicas (ADR 0005); ``Replication.confirm_positions``, the gate an operator's
change of consumer positions passes with SYNC replication: every follower of the stored in-sync
set wrote it (positions_version.py).
Must not: elect (leadership.py) or append shipped records (follower.py); hold the gRPC
handlers (rpcs.py).

Framing as the data channel (data.py): a JSON request; a reply of a 4-byte header length, a
JSON header, then the records. Fetch takes ``{"follower", "incarnation"?, "from", "epoch", "last"?,
"topics"?, "positions_written"?}`` (``incarnation``: of the follower's data directory,
store/replica/identity.py; ``last`` = [offset, crc] of the follower's last record, to detect a
divergent tail; ``positions_written``: the positions version its copy holds) and answers
``{"ok", "next_offset", "leader_end", "epoch", "epochs", "committed", "topics"?, "positions"?,
"positions_version"?}`` + records (``epochs``: the (epoch, start) pairs that start in the
shipped range; ``committed``: the group's durable end with SYNC replication, else 0;
``positions`` with ``topics``, and whenever the follower's copy misses an operator's change),
or a refusal
(``{"ok": false, "code", "error"}``). A fetch naming another epoch than this leader's is
refused: a stale leader ships nothing to a follower that knows a newer one, and a follower
never appends from one that is not its epoch's leader.
"""

from __future__ import annotations

import asyncio
import heapq
import json
import logging
import secrets
import struct
import time
from collections.abc import Callable
from typing import Any, Final

from txmq import limits
from txmq.broker.cluster.membership import definition
from txmq.broker.leadership.election import BELOW_CONFIRMED, InSync, sort_key
from txmq.broker.leadership.preferred import Phase, counts
from txmq.broker.leadership.runner import Leadership
from txmq.broker.replication.acked_end import KeptEnd
from txmq.broker.replication.positions_version import PositionsVersion, not_confirmed
from txmq.broker.rpc.json_channel import int_arg
from txmq.broker.rpc.waiters import wait, wake
from txmq.broker.topics.registry import TopicRegistry
from txmq.coordination.keys import Confirmed, Member
from txmq.errors import (
    CoordinationError,
    NotLeaderError,
    OffsetNotFoundError,
    ReplicaLostRecordsError,
    ReplicationTimeoutError,
    invariant,
)
from txmq.protocol import channels
from txmq.store.replica.acked import AckedEnd
from txmq.store.replica.epochs import EpochFile
from txmq.store.replica.hold import Hold
from txmq.store.replica.shipping import (
    DivergedError,
    durable_end,
    notify_written,
    ship,
    written_out_end,
)
from txmq.store.store import Store

log = logging.getLogger(__name__)

SERVICE: Final = channels.REPLICA_SERVICE
# The stored set's confirmed end is rewritten (one etcd write) at most this often while it
# grows; a member restored from a backup older than this is found out even with no leader.
CONFIRMED_EVERY_MS: Final = 1_000
_CRC = struct.Struct(">I")


def record_crc(store: Store, offset: int) -> int | None:
    """The CRC field of the record at ``offset`` (None when no record can start there)."""
    try:
        head = store.log.read_raw(offset, 12)
    except OffsetNotFoundError:
        return None  # outside the log: the follower's tail is not ours
    return _CRC.unpack_from(head, 8)[0] if len(head) == 12 else None


class Replication:
    """A leading replica's bookkeeping (one per broker process while it leads)."""

    def __init__(
        self,
        store: Store,
        topics: TopicRegistry,
        leadership: Leadership,
        min_insync: int,
        positions: Callable[[], bytes] | None = None,
    ) -> None:
        self.store = store
        self.positions = positions  # consumer positions, shipped with the topics
        self.topics = topics
        self.leadership = leadership
        self.min_insync = min_insync
        self.insync = InSync([], now_ms=leadership.clock())
        # Fetchers waiting at the end for a write, woken all at once (``_wake_fetchers``).
        self._fetchers: list[asyncio.Future[None]] = []
        self.fetches_answered = 0  # followers' fetches answered by this leader (status)
        # Acks waiting for the group's durable end to pass their end: (end, n, future), a heap,
        # so a fetch wakes only the acks it satisfies (not every waiting one, every time).
        self._acks: list[tuple[int, int, asyncio.Future[None]]] = []
        self._acks_made = 0
        # Operator verbs that changed the positions, and what each follower wrote of them;
        # the verbs waiting for their followers, woken all at once by a report or a new set.
        self.versions = PositionsVersion(secrets.token_hex(8))
        self._verbs: list[asyncio.Future[None]] = []
        # With SYNC replication readers see a record only once min_insync replicas have it,
        # from the end known to be acknowledged when the store opened (ADR 0005).
        self.hold = Hold(store) if min_insync > 1 else None
        invariant(self.hold is not None or store.recovery.held_from is None, "a hold for them")
        self.kept = KeptEnd(AckedEnd(store.disk, store.data_dir, store.log.end_offset))
        # Followers are shipped what is written out, before our fsync (theirs runs alongside;
        # acks still wait for both): the flusher wakes their long polls once it wrote a group.
        # Only when one waits (62 % of them woke nobody, docs/benchmarks.md): the flusher moves
        # ``written_out_end`` before it looks at ``_fetchers``, a fetch registers before it
        # looks at the end (``_wait_written``), both under the GIL: no wake-up is lost.
        loop = asyncio.get_running_loop()

        def wake() -> None:
            if self._fetchers and not loop.is_closed():
                loop.call_soon_threadsafe(self._wake_fetchers)

        self.epoch, self.epochs = stamp(store, leadership)
        notify_written(store, wake)
        # With SYNC replication the in-sync set lives in etcd (ADR 0005): this epoch starts
        # from the set stored last (absent: a fresh group, no follower yet).
        self._storing: asyncio.Task[None] | None = None
        # The port of this leader's fetch rounds on plain TCP (replica_wire.py), None: none.
        self.wire_port: int | None = None
        self._confirmed_ms = leadership.clock()  # when a confirmed end was last stored
        # The preferred-replica rule (preferred.py): fetches of ``preferred`` may start a
        # hand-back; ``_resigning``: the lease's revocation under way.
        self.handback = leadership.handback
        self.handback.began_leading()
        self.preferred = self.handback.preferred if self.handback.applies else None
        self._resigning: asyncio.Task[None] | None = None
        if min_insync > 1:
            me = leadership.election.me
            stored = leadership.election.insync or []
            others = [m for m in stored if m[0] != me]
            self.insync.keep_stored(others, leadership.clock(), self._confirmed)

    @property
    def _confirmed(self) -> int:
        """The end the stored in-sync set says its members confirmed (0: none recorded);
        ``Leadership.store_insync`` keeps it as it stores the set."""
        held = self.leadership.election.confirmed
        return held.end if held is not None else 0

    def _store_set(self, now_ms: int) -> None:
        """Start storing the in-sync set in etcd if it should change and no write is under way.
        A joining follower counts for acks at once, a leaving one only once etcd no longer
        names it: the set acks wait for always holds the stored one."""
        stored = self.insync.stored
        if stored is None or self._storing is not None:
            return
        target = self.insync.wanted(self.min_insync, now_ms)
        if target is None:
            if now_ms - self._confirmed_ms < CONFIRMED_EVERY_MS:
                return
            self._confirmed_ms = now_ms
            if self.insync.confirmed_end(stored, durable_end(self.store)) <= self._confirmed:
                return
            target = stored  # the same set, with the higher end its members confirmed
        self.insync.stored = stored | target
        changed = target != stored
        self._storing = asyncio.get_running_loop().create_task(self._put_set(target, changed))

    async def _put_set(self, target: set[Member], changed: bool) -> None:
        members = sorted(target, key=sort_key)
        confirmed = self._confirmed_of(target)
        try:
            put = await asyncio.to_thread(
                self.leadership.store_insync, members, self.epoch, confirmed
            )
        except CoordinationError as exc:
            log.warning("in-sync set %s not stored: %s", members, exc)
            put = False
        finally:
            self._storing = None
        if put:
            if changed:
                log.info("in-sync set of epoch %d stored: %s", self.epoch, members)
            self.insync.stored = set(target)
            self._wake_acks(self.leadership.clock())
            self._wake_verbs()

    def _confirmed_of(self, members: set[Member]) -> Confirmed | None:
        """What each of ``members`` (and this leader) holds, with the epoch of its last
        records (this log's history): stored with the set, so that a member whose log later
        ends below it is known to have lost records (ADR 0005, "restored backups")."""
        end = self.insync.confirmed_end(members, durable_end(self.store))
        pairs = [p for p in self.epochs.history if p[1] < end]
        return Confirmed(end, *pairs[-1]) if end > 0 and pairs else None

    def _check_confirmed(self, name: str, start: int, incarnation: str | None) -> None:
        """Refuse a fetch from below what ``name`` confirmed under this incarnation.

        Raises:
            ReplicaLostRecordsError: its log lost records it had confirmed; it must take a new
                incarnation (follower.py does, reading BELOW_CONFIRMED) and catch up again.
        """
        held = self.insync.lost(name, start, incarnation)
        if held is not None:
            log.warning(
                "%s (incarnation %s) fetches from %d, %s %d: its log lost records",
                name, incarnation, start, BELOW_CONFIRMED, held,
            )  # fmt: skip
            raise ReplicaLostRecordsError(
                f"{name} (incarnation {incarnation}) fetches from {start}, {BELOW_CONFIRMED}"
                f" ({held}): its data directory lost records; it must catch up again under a"
                " new incarnation"
            )

    def _check_leading(self) -> None:
        leader = self.leadership.leader
        if not self.leadership.leads() or leader is None or leader.epoch != self.epoch:
            leader = self.leadership.leader
            named = f"; the leader is {leader.name} at {leader.endpoint}" if leader else ""
            raise NotLeaderError(f"{self.leadership.election.me} does not lead its group{named}")

    def _check_acknowledging(self) -> None:
        """``_check_leading``, and not handing the lead back to the preferred replica."""
        self._check_leading()
        hb = self.handback
        if hb.phase is not Phase.LEAD and not hb.may_acknowledge(self.leadership.clock()):
            raise NotLeaderError(
                f"{self.leadership.election.me} hands the lead of its group back to its"
                f" preferred replica {hb.preferred}: try again"
            )

    def _preferred_fetched(self, offset: int, now_ms: int) -> None:
        """The preferred replica fetched from ``offset``: hand the lead back to it once it is
        in sync and holds everything this leader acknowledged (preferred.py)."""
        stored, name = self.leadership.election.insync, str(self.preferred)
        phase = self.handback.fetched(
            now_ms,
            offset=offset,
            leader_end=written_out_end(self.store),
            durable_end=durable_end(self.store),
            in_sync=counts(self.insync, stored, name, now_ms),
        )
        if phase is Phase.RESIGN and self._resigning is None:
            self._resigning = asyncio.get_running_loop().create_task(self.leadership.hand_back())

    async def acknowledge(self, time_left_s: float | None = None) -> None:
        """Return once every write made so far may be acknowledged; raise otherwise.
        ``time_left_s``: what is left of the call's own deadline (gRPC's
        ``context.time_remaining()``; None: none), so a refusal reaches the caller before its
        deadline does (``ack_wait_s``).

        Raises:
            NotLeaderError: this replica does not lead (by its own clock, ADR 0005), or hands
                the lead back to its preferred replica (preferred.py).
            ReplicationTimeoutError: fewer than min_insync replicas had it in time; the
                message names the replicas it is missing on.
        """
        self._check_acknowledging()
        end = durable_end(self.store)
        self._wake_fetchers()
        waited_s = ack_wait_s(time_left_s)
        started = time.monotonic()
        deadline = started + waited_s
        clock = self.leadership.clock
        loop = asyncio.get_running_loop()
        rechecks = 0
        while self.insync.durable_end(durable_end(self.store), self.min_insync, clock()) < end:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ReplicationTimeoutError(self._not_confirmed(end, waited_s, time_left_s))
            done: asyncio.Future[None] = loop.create_future()
            self._acks_made += 1
            heapq.heappush(self._acks, (end, self._acks_made, done))
            if rechecks:  # every fetch looks at the set; a recheck is for a follower gone quiet
                self._store_set(clock())
            rechecks += 1
            # A fetch resolves ``done`` (_wake_acks); else look again after the recheck period:
            # a follower may have left the in-sync set meanwhile.
            await wait(done, min(left, limits.REPLICA_ACK_RECHECK_MS / 1000))
        self._check_acknowledging()  # a lease that lapsed while we waited: not acknowledged
        if self.min_insync > 1:
            self.leadership.committed = max(self.leadership.committed, end)
            self.insync.acked = max(self.insync.acked, end)

    async def confirm_positions(self, time_left_s: float | None = None) -> None:
        """Return once every follower of the stored in-sync set wrote the consumer positions
        as they are now (an operator verb changed them: admin/service.py); with ASYNC
        replication at once. ``time_left_s`` bounds the wait as for ``acknowledge``.

        Raises:
            NotLeaderError: this replica no longer leads (the change stands here only).
            ReplicationTimeoutError: some did not confirm in time; the message names them and
                says the change is applied on this leader.
        """
        if self.min_insync <= 1 or self.positions is None:
            return
        version = self.versions.bump()
        self._wake_fetchers()  # parked fetches return at once, carrying the positions
        waited_s = ack_wait_s(time_left_s)
        deadline = time.monotonic() + waited_s
        loop = asyncio.get_running_loop()
        while missing := self._positions_missing(version):
            left = deadline - time.monotonic()
            if left <= 0:
                me = self.leadership.election.me
                bound = _bound(waited_s, time_left_s)
                raise ReplicationTimeoutError(not_confirmed(me, missing, waited_s, bound))
            done: asyncio.Future[None] = loop.create_future()
            self._verbs.append(done)
            # A report or a newly stored set resolves ``done`` (_wake_verbs); else look again
            # after the recheck period: a follower gone quiet may leave the set meanwhile.
            await wait(done, min(left, limits.REPLICA_ACK_RECHECK_MS / 1000))
            self._store_set(self.leadership.clock())
        try:
            self._check_leading()  # a lease that lapsed while we waited: not answered OK
        except NotLeaderError as exc:
            raise NotLeaderError(
                f"{exc}; the change of consumer positions is applied on this replica and on"
                " the followers it led"
            ) from exc

    def _positions_missing(self, version: int) -> list[str]:
        """The followers of the stored in-sync set that did not write ``version``, and how
        many more in-sync replicas the set lacks."""
        stored = self.insync.stored or set()
        out = self.versions.missing({m[0] for m in stored}, version)
        short = self.min_insync - 1 - len(stored)
        return [*out, f"{short} more in-sync replica(s)"] if short > 0 else out

    def _wake_verbs(self) -> None:
        verbs, self._verbs = self._verbs, []
        for f in verbs:
            wake(f)

    def _not_confirmed(self, end: int, waited_s: float, time_left_s: float | None) -> str:
        """Why a write up to ``end`` is refused: which replicas do not hold it."""
        now = self.leadership.clock()
        missing = self.insync.missing(end, self.min_insync, now)
        bound = _bound(waited_s, time_left_s)
        return (
            f"not confirmed by {self.min_insync} replicas within {waited_s * 1000:.0f} ms"
            f" ({bound}): missing on {', '.join(missing) or 'none'} (offset {end}; in sync:"
            f" {self.leadership.election.me} and {self.insync.members(now) or 'no follower'})"
        )

    def _wake_acks(self, now_ms: int) -> None:
        """Resolve the waiting acks the group's durable end now passes (and drop the ones
        that timed out meanwhile)."""
        if not self._acks:
            return
        group_end = self.insync.durable_end(durable_end(self.store), self.min_insync, now_ms)
        while self._acks and (self._acks[0][0] <= group_end or self._acks[0][2].done()):
            wake(heapq.heappop(self._acks)[2])

    async def fetch(self, args: dict[str, Any], run: Any) -> tuple[dict[str, Any], bytes]:
        self._check_leading()
        leader = self.leadership.leader
        assert leader is not None  # leads() implies a leader
        if int_arg(args, "epoch") != leader.epoch:
            raise NotLeaderError(
                f"fetch for epoch {args.get('epoch')} at the leader of epoch {leader.epoch}"
            )
        name, start = str(args.get("follower", "")), int_arg(args, "from")
        last = args.get("last")
        if last is not None and record_crc(self.store, int(last[0])) != int(last[1]):
            raise DivergedError(f"the follower's last record at {last[0]} is not the leader's")
        now = self.leadership.clock()
        incarnation = args.get("incarnation")
        incarnation = str(incarnation) if incarnation is not None else None
        self._check_confirmed(name, start, incarnation)
        if self.insync.fetched(name, start, written_out_end(self.store), now, incarnation):
            log.warning(
                "%s fetches under a new incarnation %s (its data directory started empty or"
                " lost records): out of the in-sync set until it caught up and is stored again",
                name, incarnation,
            )  # fmt: skip
        if self.versions.report(name, args.get("positions_written")):
            self._wake_verbs()
        self._store_set(now)
        if name == self.preferred:
            self._preferred_fetched(start, now)
        if self.hold is not None:
            # Every held record is durable here already, so only the followers bound it.
            up_to = self.insync.followers_end(self.min_insync, now)
            most = limits.REPLICA_INLINE_RECORDS_MAX
            few = self.hold.releasable(up_to, most) if up_to > 0 else 0
            if few > most:
                await run(self.hold.release, up_to)
            elif few:
                self.hold.release(up_to)  # a few queue entries: cheaper than a thread hop
        self._wake_acks(now)
        await self._wait_written(start, name)
        committed = self._committed() if self.hold is not None else 0
        end = written_out_end(self.store)
        if end - start <= limits.REPLICA_INLINE_SHIP_BYTES:
            shipment = ship(self.store, start, end=end)  # a few page-cache reads: no hop
        else:
            shipment = await run(ship, self.store, start, end=end)
        header: dict[str, Any] = {
            "ok": True,
            "next_offset": shipment.next_offset,
            "leader_end": shipment.leader_end,
            "epoch": leader.epoch,
            "epochs": [p for p in self.epochs.history if start <= p[1] < shipment.next_offset],
            "committed": committed,
        }
        if args.get("topics"):
            header["topics"] = [definition(info) for info in self.topics.list()]
        if self.positions is not None and (args.get("topics") or self.versions.behind(name)):
            header["positions_version"] = self.versions.stamp()  # read before the snapshot
            header["positions"] = json.loads(self.positions())
        self.fetches_answered += 1
        return header, shipment.data

    def _committed(self) -> int:
        """The group's durable end now (every stored in-sync member holds every byte below it:
        readers may see it, here and on whichever of them leads next), kept as this replica's
        known acknowledged end, in memory and lazily beside the log (store/replica/acked.py)."""
        now = self.leadership.clock()
        committed = self.insync.durable_end(durable_end(self.store), self.min_insync, now)
        self.leadership.committed = max(self.leadership.committed, committed)
        self.kept.offer(committed, now)
        return committed

    def epochs_of(self, args: dict[str, Any]) -> dict[str, Any]:
        """This leader's epoch history and log end (written out: what it ships) (Kafka's
        OffsetsForLeaderEpoch, whole: the follower finds the largest shared epoch itself,
        store/replica/epochs.divergence_point)."""
        self._check_leading()
        if int_arg(args, "epoch") != self.epoch:
            raise NotLeaderError(f"epochs for epoch {args.get('epoch')} at epoch {self.epoch}")
        history = [list(p) for p in self.epochs.history]
        return {"ok": True, "epochs": history, "end": written_out_end(self.store)}

    async def _wait_written(self, start: int, name: str) -> None:
        """Long poll: return once the log is written out past ``start``, or an operator
        changed the positions that follower ``name`` has not written, or after
        REPLICA_FETCH_WAIT_MS (then the fetch is answered empty). The waiter is registered
        before the check, with no await between: the flusher, which moves the end before it
        looks for waiters (``__init__``'s ``wake``), cannot miss it, nor can a verb."""

        def ready() -> bool:
            return written_out_end(self.store) > start or self.versions.behind(name)

        if ready():
            return
        deadline = time.monotonic() + limits.REPLICA_FETCH_WAIT_MS / 1000
        loop = asyncio.get_running_loop()
        for _ in range(limits.REPLICA_FETCH_WAKES_MAX):
            left = deadline - time.monotonic()
            woken: asyncio.Future[None] = loop.create_future()
            self._fetchers.append(woken)
            try:
                if ready() or left <= 0:
                    return
                await wait(woken, left)
            finally:
                if woken in self._fetchers:  # timed out or cancelled: not left for the next wake
                    self._fetchers.remove(woken)

    def _wake_fetchers(self) -> None:
        """A write happened: every fetch waiting at the end looks again."""
        fetchers, self._fetchers = self._fetchers, []
        for f in fetchers:
            wake(f)

    def status(self) -> dict[str, Any]:
        now = self.leadership.clock()
        end = durable_end(self.store)
        leader = self.leadership.leader
        return {
            "ok": True,
            "name": self.leadership.election.me,
            "incarnation": self.leadership.election.incarnation,
            "role": "leader" if self.leadership.leads() else "stepping-down",
            "leader": leader.name if leader else None,
            "epoch": leader.epoch if leader else 0,
            "end": end,
            "in_sync": [self.leadership.election.me, *self._in_sync(now)],
            "lag_bytes": self.insync.lag_bytes(end),
            "held_records": self.hold.held if self.hold is not None else 0,
            "fetches_parked": len(self._fetchers),
            "fetches_answered": self.fetches_answered,
            "renewed": self.leadership.renewed,
            "wire_port": self.wire_port,
            "preferred": self.handback.preferred,
            "hand_back": self.handback.phase.value,
        }

    def _in_sync(self, now_ms: int) -> list[str]:
        stored = self.insync.stored
        if stored is None:
            return self.insync.members(now_ms)
        return sorted({m[0] for m in stored if self.insync.current(m)})


def _bound(waited_s: float, time_left_s: float | None) -> str:
    """What ended a wait of ``waited_s`` (``ack_wait_s``), for a refusal's message."""
    by_call = time_left_s is not None and waited_s < limits.REPLICA_ACK_TIMEOUT_MS / 1000
    return "the call's deadline" if by_call else "the replication timeout"


def ack_wait_s(time_left_s: float | None) -> float:
    """How long a write may wait for its replicas: REPLICA_ACK_TIMEOUT_MS, or less when the
    call's own deadline comes sooner, leaving the refusal REPLICA_ACK_MARGIN_MS (or a tenth of
    what is left, if more) to reach the caller; never below zero."""
    most = limits.REPLICA_ACK_TIMEOUT_MS / 1000
    if time_left_s is None:
        return most
    margin = max(limits.REPLICA_ACK_MARGIN_MS / 1000, time_left_s / 10)
    return max(0.0, min(most, time_left_s - margin))


def stamp(store: Store, leadership: Leadership) -> tuple[int, EpochFile]:
    """Record this leadership's epoch at the log's end, durable, before its first write: a
    follower that copies records past here files them under this epoch (ADR 0005).

    Raises:
        NotLeaderError: the lease lapsed by this replica's clock while its broker opened (a
            loaded machine: the open outlasted the lease); nothing is stamped, and the replica
            follows again (replica_node._lead) instead of leading an epoch that may be over.
    """
    leader = leadership.leader
    if leader is None or not leadership.leads():
        raise NotLeaderError(
            f"{leadership.election.me}'s lease lapsed before its epoch was stamped (the broker"
            " took longer to open than the lease lasts)"
        )
    end = store.log.end_offset
    invariant(end == store.recovery.log_end, "nothing is written before the epoch is stamped")
    epochs = EpochFile(store.disk, store.data_dir, end)
    if epochs.latest != leader.epoch:
        epochs.append(leader.epoch, end)
    return leader.epoch, epochs
