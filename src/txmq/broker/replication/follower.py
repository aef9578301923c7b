"""A follower replica: copy the leader's commit log and topics; answer clients with the leader.

Owns: the fetch loop (long polls to the leader's Replica channel from this store's end, each
answer appended verbatim by ``store.replica.shipping.append_shipped``), the leader's topic
definitions (every ``REPLICA_TOPICS_PERIOD_MS``), the leader's epoch history as its records arrive
(store/replica/epochs.py), a divergent tail (the leader does not hold our last record: the leader's
epoch history gives the end of the largest epoch both logs hold, and the store is cut there,
store/replica/truncate.py, then fetched from there; ADR 0005), and the follower's gRPC face:
QueryRoute and QueryAssignment answer every group at every replica under the group's name
(membership.py), the other MessagingService calls are forwarded to the leader (forward.py),
the admin and data channels are refused with HA_NOT_AVAILABLE naming the leader (but
ClusterInfo), Replica.Status says "follower".
Must not: take writes or run the transaction book, deliveries or check-backs: all of those
start from the log when this replica is promoted (replica_node.py opens a full broker then).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as sv

from txmq import limits
from txmq.broker.cluster import routes
from txmq.broker.cluster.membership import Membership, copy_definition
from txmq.broker.config.broker_config import BrokerConfig
from txmq.broker.consume.positions import FILE_NAME as POSITIONS_FILE
from txmq.broker.leadership.backoff import Repeats
from txmq.broker.leadership.election import BELOW_CONFIRMED
from txmq.broker.leadership.runner import Leadership
from txmq.broker.produce.delay import DELAY_FILE
from txmq.broker.replication.acked_end import KeptEnd
from txmq.broker.replication.forward import LOCAL, V2_SERVICE, Forwarder
from txmq.broker.replication.leader_link import LeaderLink
from txmq.broker.replication.positions_copy import PositionsCopy
from txmq.broker.replication.rpcs import register
from txmq.broker.rpc.json_channel import refusal
from txmq.broker.rpc.replies import fail
from txmq.broker.topics.registry import TopicRegistry
from txmq.errors import (
    BadRequestError,
    CorruptRecordError,
    NotLeaderError,
    TopicNotFoundError,
    invariant,
)
from txmq.protocol import channels, mapping
from txmq.protocol.client_security import PLAINTEXT, ClientSecurity
from txmq.store.replica.acked import AckedEnd
from txmq.store.replica.epochs import EpochFile, EpochStart, divergence_point
from txmq.store.replica.identity import incarnation, renew_incarnation
from txmq.store.replica.shipping import append_shipped, last_of, tail_of
from txmq.store.replica.truncate import truncate_closed
from txmq.store.store import Store
from txmq.txn.coordinator import SNAPSHOT_FILE

log = logging.getLogger(__name__)
_DIVERGED = "is not the leader's"
_DISCARDED = "store.discarded"  # a wiped store is renamed here first, then removed


def _drop_broker_state(data_dir: Path) -> None:
    """Forget what this replica derived when it last led: its log may be replaced by the
    leader's, so a transaction snapshot, delay progress or consumer positions kept beside it
    could point at records it no longer holds. Promotion rebuilds them from the log (pending
    transactions, the delay schedule) or starts afresh (positions: redelivery, never loss)."""
    for name in (SNAPSHOT_FILE, POSITIONS_FILE, DELAY_FILE):
        path = data_dir / name
        if path.exists():
            log.warning("dropping %s from this replica's last leadership", path)
            path.unlink()


class Follower:
    """One follower's state while it follows (closed before promotion)."""

    def __init__(
        self,
        config: BrokerConfig,
        leadership: Leadership,
        group: str,
        security: ClientSecurity = PLAINTEXT,
    ) -> None:
        self.config = config
        self.leadership = leadership
        self.group = group
        self.store_dir: Path = config.data_dir / "store"
        _drop_broker_state(config.data_dir)
        discarded = self.store_dir.with_name(_DISCARDED)
        if discarded.exists():  # a wipe that a crash interrupted
            shutil.rmtree(discarded)
        self.store = Store.open(
            self.store_dir, config.store, now_ms=leadership.clock, inline_sync=True
        )
        self.epochs = EpochFile(self.store.disk, self.store_dir, self.store.log_end_offset)
        self.kept = KeptEnd(AckedEnd(self.store.disk, self.store_dir, self.store.log_end_offset))
        self.topics = TopicRegistry(
            config.data_dir / "topics.json", self.store.disk, auto_create=False, default_queues=1
        )
        # The leader's consumer positions, as a promotion would read them.
        self.positions = PositionsCopy(self.store.disk, config.data_dir / POSITIONS_FILE)
        # The leader's positions version the copy holds, durable, as it shipped it (None: none
        # written since this process started), said in every fetch: an operator verb answers
        # OK once each in-sync follower said its version (positions_version.py).
        self.positions_written: list[Any] | None = None
        self.last = tail_of(self.store)
        # The (leader, epoch) that checked our last record (``last`` in a fetch): its replies
        # since only shipped its own records, so our tail is its log's until a cut or another
        # leader; fetches to it leave ``last`` out (the leader's check is a read per fetch).
        self.vouched: tuple[str, int] | None = None
        self.leader_end = 0
        # Log bytes fetched, and cut by truncations, since this follower started.
        self.fetched_bytes = 0
        self.truncated_bytes = 0
        self.truncations = 0
        # In sync as of our last contact with the leader: caught up to its end within
        # REPLICA_LAG_MAX_MS before our last successful fetch (ADR 0005). A fresh process is.
        # Whether it may campaign only where no in-sync set is stored (Election.may_campaign).
        self.fetched_ms = 0
        self.caught_up_ms = 0
        self.answered = asyncio.Event()  # a leader answered a fetch of this follower
        # Refusals logged once per period while the same one repeats (a stale leader, etcd
        # unreachable: it repeats every observe period).
        self.refusals = Repeats(log, "leader refused a fetch", leadership.clock, level=logging.INFO)
        self._topics_ms = -limits.REPLICA_TOPICS_PERIOD_MS
        # How the leader is called: TLS and the signature of cluster_access_key when secured.
        self.link = LeaderLink(security)
        # More of Replica.Status (replica_node.py: the forwarder's counts).
        self.more_status: Callable[[], dict[str, Any]] = dict
        self._cutting = False  # the store is closed for a cut (_truncate)
        self._renewing = asyncio.Lock()
        leadership.eligible = self.eligible
        leadership.local = self

    def log_state(self) -> tuple[int, list[tuple[int, int]]] | None:
        """(log end, epoch history) for leadership.py's check; None while cutting."""
        if self._cutting:
            return None
        return self.store.log_end_offset, list(self.epochs.history)

    async def renew(self, reason: str) -> None:
        """This log lost records the replica had confirmed to its group: take a new
        incarnation (durable), so it counts and may lead only once it caught up again under it
        (ADR 0005, "restored backups")."""
        async with self._renewing:
            election = self.leadership.election
            old = election.incarnation
            born = await asyncio.to_thread(renew_incarnation, self.store.disk, self.store_dir)
            election.incarnation = born
            self.leadership.renewed = f"incarnation {old} -> {born}: {reason}"
            log.warning(
                "%s: %s; it runs as a new incarnation %s (was %s): out of the in-sync set and"
                " not eligible to lead until it caught up and was stored again",
                election.me, reason, born, old,
            )  # fmt: skip

    def eligible(self) -> bool:
        return self.fetched_ms - self.caught_up_ms <= limits.REPLICA_LAG_MAX_MS

    def close(self) -> None:
        if self.leadership.local is self:
            self.leadership.local = None
        self.link.close()
        # Cut to the log as a promotion opens it (not while a cut left the store closed).
        if not self._cutting and self.positions.settle(self.store.queue_offsets):
            log.info("consumer positions cut again to this replica's queues as they are now")
        self.store.close()

    async def step(self) -> None:
        """One fetch from the current leader (or a short wait when there is none)."""
        leader = self.leadership.leader
        if leader is None or leader.name == self.leadership.election.me:
            await asyncio.sleep(limits.REPLICA_OBSERVE_PERIOD_MS / 1000)
            return
        now = self.leadership.clock()
        vouch = (leader.name, leader.epoch)
        want_topics = now - self._topics_ms >= limits.REPLICA_TOPICS_PERIOD_MS
        args = {
            "follower": self.leadership.election.me,
            "incarnation": self.leadership.election.incarnation,
            "from": self.store.log_end_offset,
            "epoch": leader.epoch,
            "last": list(self.last) if self.last and self.vouched != vouch else None,
            "topics": want_topics,
            "positions_written": self.positions_written,
        }
        reply = await self.link.fetch(leader.endpoint, args)
        if reply is None:
            return
        header, payload = channels.split(reply, "Fetch")
        if not header.get("ok") and _DIVERGED in str(header.get("error", "")):
            await self._diverged(leader.endpoint, leader.epoch)
            return
        if not header.get("ok") and BELOW_CONFIRMED in str(header.get("error", "")):
            if args["incarnation"] == self.leadership.election.incarnation:  # not renewed yet
                await self.renew(f"its leader said: {header.get('error')}")
            return
        await self._apply(header, bytes(payload), want_topics, now)
        if header.get("ok"):
            self.vouched = vouch

    async def _apply(
        self, header: dict[str, Any], data: bytes, want_topics: bool, now: int
    ) -> None:
        if not header.get("ok"):
            self.refusals.failed(str(header.get("error")))
            await asyncio.sleep(limits.REPLICA_OBSERVE_PERIOD_MS / 1000)
            return
        self.refusals.succeeded()
        if data:
            start = self.store.log_end_offset
            pairs = [(int(e), int(s)) for e, s in header.get("epochs", [])]
            end = await self._append(data, pairs)
            if end != header["next_offset"]:
                raise CorruptRecordError(end, f"leader said next offset {header['next_offset']}")
            self.last = last_of(data)
            self.fetched_bytes += end - start
        self.leader_end = int(header["leader_end"])
        # What the group acknowledged, as far as this log holds it: never cut (ADR 0005).
        committed = min(int(header.get("committed", 0)), self.store.log_end_offset)
        self.leadership.committed = max(self.leadership.committed, committed)
        self.kept.offer(self.leadership.committed, now)  # where a promotion's hold starts
        self.fetched_ms = now
        self.answered.set()
        if self.store.log_end_offset >= self.leader_end:
            self.caught_up_ms = now
        if want_topics and "topics" in header:
            self._topics_ms = now
            for d in header["topics"]:
                try:
                    copy_definition(self.topics, d)
                except BadRequestError as exc:
                    log.warning("leader's topic not copied: %s", exc)
        if "positions" in header:
            shipped = header["positions"]
            await asyncio.to_thread(self.positions.offer, shipped, self.store.queue_offsets)
            self.positions_written = header.get("positions_version")  # written, durable

    def _append_blocking(self, data: bytes, pairs: list[EpochStart]) -> int:
        """The leader's epochs that start in ``data`` first (durable), then its records."""
        self.epochs.adopt(pairs, self.store.log_end_offset, self.store.log_end_offset + len(data))
        return append_shipped(self.store, data)

    async def _append(self, data: bytes, pairs: list[EpochStart]) -> int:
        """Append a shipment; return once it is durable. A small one is written and synced on
        the loop (its pwrite, fdatasync and publication to queues: the store is
        ``inline_sync``), with no thread hop on the path every SYNC acknowledgement waits for;
        the loop has nothing else to do meanwhile but answer clients, whose calls go to the
        leader. (Adopting an epoch writes a small file: once per leader change, on the loop
        too.) A large one is appended in a thread."""
        if len(data) > limits.REPLICA_INLINE_SHIP_BYTES:
            return await asyncio.to_thread(self._append_blocking, data, pairs)
        return self._append_blocking(data, pairs)

    async def _diverged(self, endpoint: str, epoch: int) -> None:
        """Our tail is not the leader's: ask for its epoch history (Kafka's
        OffsetsForLeaderEpoch) and cut our log where the two last agree."""
        me = self.leadership.election.me
        reply = await self.link.call(endpoint, "Epochs", {"epoch": epoch, "follower": me})
        if reply is None:
            return
        header, _ = channels.split(reply, "Epochs")
        if not header.get("ok"):
            log.info("leader refused its epochs: %s", header.get("error"))
            await asyncio.sleep(limits.REPLICA_OBSERVE_PERIOD_MS / 1000)
            return
        theirs = [(int(e), int(s)) for e, s in header["epochs"]]
        end = self.store.log_end_offset
        point = divergence_point(self.epochs.history, end, theirs, int(header["end"]))
        invariant(
            point >= self.leadership.committed,
            f"a divergent tail from {point} would cut acknowledged records below"
            f" {self.leadership.committed}",
        )
        point = point if point < end else 0
        election = self.leadership.election
        wipe = point < self.store.log_start_offset
        if wipe:  # what it held is gone: not the incarnation the in-sync set may name
            election.incarnation = None
        await asyncio.to_thread(self._truncate, point)
        if wipe:
            election.incarnation = incarnation(self.store.disk, self.store_dir)

    def _truncate(self, point: int) -> None:
        """Cut the store at ``point`` (below its log start: wipe it), then reopen it."""
        end, start = self.store.log_end_offset, self.store.log_start_offset
        log.warning(
            "this replica's log diverged from its leader: cutting %d bytes from %d",
            end - point,
            point,
        )
        disk = self.store.disk
        self._cutting = True
        self.store.close()
        if point >= start:
            self.truncated_bytes += truncate_closed(self.store_dir, self.config.store, point, disk)
        else:
            discarded = self.store_dir.with_name(_DISCARDED)
            os.replace(self.store_dir, discarded)  # one atomic step: never half a store
            shutil.rmtree(discarded)
            self.truncated_bytes += end - start
        self.truncations += 1
        self.store = Store.open(
            self.store_dir, self.config.store, now_ms=self.leadership.clock, inline_sync=True
        )
        self.epochs = EpochFile(self.store.disk, self.store_dir, self.store.log_end_offset)
        self.kept.acked = AckedEnd(self.store.disk, self.store_dir, self.store.log_end_offset)
        self.last = tail_of(self.store)
        self.vouched = None
        self._cutting = False

    async def run(self, stop: asyncio.Event) -> None:
        """Follow until this replica leads or ``stop`` is set."""
        watcher = asyncio.create_task(self._abandon_on_change())
        try:
            while not stop.is_set() and not self.leadership.leads():
                await self.step()
        finally:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)

    async def _abandon_on_change(self) -> None:
        """End the fetch round in flight whenever the election sees another leader (or none,
        or this replica): a round to a leader that is gone (paused, cut off) then ends at once,
        not after its bound, and the next one goes to the new leader, or this replica leads."""
        changed = self.leadership.changed
        while True:
            changed.clear()
            await changed.wait()
            self.link.abandon()

    def refusal(self) -> NotLeaderError:
        leader = self.leadership.leader
        where = f"; the leader is {leader.name} at {leader.endpoint}" if leader else ""
        return NotLeaderError(f"this replica follows{where}")

    def status(self) -> dict[str, Any]:
        leader = self.leadership.leader
        end = self.store.log_end_offset
        return {
            "ok": True,
            "name": self.leadership.election.me,
            "incarnation": self.leadership.election.incarnation,
            "insync_key": self.leadership.insync_key,
            "role": "follower",
            "leader": leader.name if leader else None,
            "epoch": leader.epoch if leader else 0,
            "end": end,
            "lag_bytes": max(0, self.leader_end - end),
            "fetched_bytes": self.fetched_bytes,
            "truncated_bytes": self.truncated_bytes,
            "truncations": self.truncations,
            "epochs": [list(p) for p in self.epochs.history],
            "renewed": self.leadership.renewed,
            "abstained": self.leadership.abstained,
            "fetching_on": self.link.transport,
            **self.more_status(),
        }


class FollowerRoutes:
    """QueryRoute and QueryAssignment on a follower: a topic it holds is answered here, from
    its copy of the topics, with every live group at every replica (``Membership.advertised``);
    an unknown topic is forwarded to the leader, which may create it."""

    def __init__(self, follower: Follower, membership: Membership, forwarder: Forwarder) -> None:
        self.follower = follower
        self.membership = membership
        self.forwarder = forwarder

    def _queues(self, body: bytes, request_type: Any) -> list[Any] | None:
        """The topic's queues, or None when this replica does not hold the topic."""
        request = request_type.FromString(body)
        name = mapping.validate_topic(request.topic.name, allow_system=True)
        if not self.follower.topics.exists(name):
            return None
        info = self.follower.topics.get(name)
        return routes.message_queues(info, self.membership.route_targets())

    def handler(self, name: str) -> Any:
        request_type = getattr(sv, f"{name}Request")
        response_type = getattr(sv, f"{name}Response")
        forward = self.forwarder.unary(f"/{V2_SERVICE}/{name}", name)

        async def answer(body: bytes, context: Any) -> bytes:
            try:
                queues = self._queues(body, request_type)
                if queues is None:
                    reply: bytes = await forward(body, context)
                    return reply
            except (TopicNotFoundError, BadRequestError) as exc:
                refused: bytes = response_type(status=fail(exc)).SerializeToString()
                return refused
            if name == "QueryRoute":
                response = sv.QueryRouteResponse(status=mapping.status(), message_queues=queues)
            else:
                assignments = [pb.Assignment(message_queue=q) for q in queues]
                response = sv.QueryAssignmentResponse(
                    status=mapping.status(), assignments=assignments
                )
            raw: bytes = response.SerializeToString()
            return raw

        return grpc.unary_unary_rpc_method_handler(answer)


class _FollowerV2(grpc.GenericRpcHandler):  # type: ignore[misc]
    """Every MessagingService method on a follower: routes here, the rest forwarded."""

    def __init__(self, local: FollowerRoutes, forwarder: Forwarder) -> None:
        self.local = {f"/{V2_SERVICE}/{name}": local.handler(name) for name in LOCAL}
        self.forwarder = forwarder

    def service(self, details: Any) -> Any:
        method = str(details.method)
        return self.local.get(method) or self.forwarder.handler(method)


class _RefuseChannels(grpc.GenericRpcHandler):  # type: ignore[misc]
    """Every method of the admin and data channels but ClusterInfo: refused, naming the leader
    (a follower holds no topics, groups or transactions to show or change). ClusterInfo is the
    cluster's shape and every group's leader, which a follower knows (cluster status, Spark)."""

    def __init__(self, follower: Follower, membership: Membership) -> None:
        self.follower = follower
        self.membership = membership

    def service(self, details: Any) -> Any:
        method = str(details.method)
        if method == f"/{channels.ADMIN_SERVICE}/ClusterInfo":
            return grpc.unary_unary_rpc_method_handler(self._cluster_info)
        if not method.startswith((f"/{channels.ADMIN_SERVICE}/", f"/{channels.DATA_SERVICE}/")):
            return None

        async def refuse(body: bytes, context: Any) -> bytes:
            return channels.frame(refusal(self.follower.refusal(), method))

        return grpc.unary_unary_rpc_method_handler(refuse)

    async def _cluster_info(self, body: bytes, context: Any) -> bytes:
        return channels.frame({"ok": True, **self.membership.info()})


def add_follower_services(
    server: Any, follower: Follower, membership: Membership, forwarder: Forwarder
) -> None:
    v2 = _FollowerV2(FollowerRoutes(follower, membership, forwarder), forwarder)
    server.add_generic_rpc_handlers((v2, _RefuseChannels(follower, membership)))

    async def status(body: bytes, context: Any) -> bytes:
        return channels.frame(follower.status())

    async def fetch(body: bytes, context: Any) -> bytes:
        return channels.frame(refusal(NotLeaderError("this replica follows"), "Fetch"))

    async def follow(requests: AsyncIterator[bytes], context: Any) -> AsyncIterator[bytes]:
        async for _ in requests:
            yield await fetch(b"", context)  # refused, then ended (as a leader's refusal)
            return

    register(server, fetch, follow, fetch, status)
