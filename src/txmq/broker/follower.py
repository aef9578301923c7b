"""A follower replica: copy the leader's commit log and topics; answer clients with the leader.

Owns: the fetch loop (long polls to the leader's Replica channel from this store's end, each
answer appended verbatim by ``store.replica.append_shipped``), the leader's topic definitions
(every ``REPLICA_TOPICS_PERIOD_MS``), a divergent tail (the leader does not hold our last record:
the store is emptied and fetched again from 0, the coarsest truncation that is always right),
and the follower's gRPC face: QueryRoute and QueryAssignment answer every group's leader under
the group's name (membership.py), writes are refused with HA_NOT_AVAILABLE naming the leader,
Replica.Status says "follower".
Must not: take writes or run the transaction book, deliveries or check-backs: all of those
start from the log when this replica is promoted (replica_node.py opens a full broker then).
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as sv
from rocketmq.grpc_protocol import service_pb2_grpc as sg

from txmq import limits
from txmq.broker import routes
from txmq.broker.admin import SERVICE as ADMIN_SERVICE
from txmq.broker.admin import refusal
from txmq.broker.config import BrokerConfig
from txmq.broker.data import SERVICE as DATA_SERVICE
from txmq.broker.delay import DELAY_FILE
from txmq.broker.leadership import Leadership
from txmq.broker.membership import Membership, define
from txmq.broker.offsets import FILE_NAME as POSITIONS_FILE
from txmq.broker.replication import SERVICE
from txmq.broker.replies import fail
from txmq.broker.topics import TopicRegistry
from txmq.errors import (
    BadRequestError,
    CorruptRecordError,
    NotLeaderError,
    TopicNotFoundError,
)
from txmq.protocol import channels, mapping
from txmq.protocol.client_security import PLAINTEXT, ClientSecurity, open_aio_channel
from txmq.store.replica import append_shipped, last_of, tail_of
from txmq.store.store import Store
from txmq.txn.coordinator import SNAPSHOT_FILE

log = logging.getLogger(__name__)
_DIVERGED = "is not the leader's"


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


def clamp_positions(
    doc: dict[str, Any], queue_offsets: Callable[[str, int], tuple[int, int]]
) -> dict[str, Any]:
    """The leader's consumer positions cut to what this replica's queues hold: an ack offset,
    settled offset or attempt past a queue's end here would skip a record that reaches this
    replica later (after a promotion: a loss); cut, it is at most delivered again."""
    rows = []
    for r in doc.get("positions", []):
        end = queue_offsets(str(r["topic"]), int(r["queue"]))[1]
        settled = [[lo, min(hi, end - 1)] for lo, hi in r["settled"] if lo < end]
        attempts = [a for a in r["attempts"] if a[0] < end]
        rows.append({**r, "ack": min(int(r["ack"]), end), "settled": settled, "attempts": attempts})
    return {**doc, "positions": rows}


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
        # How the leader is called: TLS and the signature of cluster_access_key when secured.
        self.security = security
        self.leadership = leadership
        self.group = group
        self.store_dir: Path = config.data_dir / "store"
        _drop_broker_state(config.data_dir)
        self.store = Store.open(self.store_dir, config.store, now_ms=leadership.clock)
        self.topics = TopicRegistry(
            config.data_dir / "topics.json", self.store.disk, auto_create=False, default_queues=1
        )
        self.last = tail_of(self.store)
        self.leader_end = 0
        # In sync as of our last contact with the leader: caught up to its end within
        # REPLICA_LAG_MAX_MS before our last successful fetch (ADR 0005). A fresh process is.
        self.fetched_ms = 0
        self.caught_up_ms = 0
        self._topics_ms = -limits.REPLICA_TOPICS_PERIOD_MS
        self._channel: tuple[str, Any] | None = None
        leadership.eligible = self.eligible

    def eligible(self) -> bool:
        return self.fetched_ms - self.caught_up_ms <= limits.REPLICA_LAG_MAX_MS

    def close(self) -> None:
        if self._channel is not None:
            asyncio.get_running_loop().create_task(self._channel[1].close())
        self.store.close()

    def _stub(self, endpoint: str) -> Any:
        if self._channel is None or self._channel[0] != endpoint:
            if self._channel is not None:
                asyncio.get_running_loop().create_task(self._channel[1].close())
            self._channel = (endpoint, open_aio_channel(endpoint, self.security))
        return self._channel[1].unary_unary(f"/{SERVICE}/Fetch")

    async def step(self) -> None:
        """One fetch from the current leader (or a short wait when there is none)."""
        leader = self.leadership.leader
        if leader is None or leader.name == self.leadership.election.me:
            await asyncio.sleep(limits.REPLICA_OBSERVE_PERIOD_MS / 1000)
            return
        now = self.leadership.clock()
        want_topics = now - self._topics_ms >= limits.REPLICA_TOPICS_PERIOD_MS
        args = {
            "follower": self.leadership.election.me,
            "from": self.store.log_end_offset,
            "epoch": leader.epoch,
            "last": list(self.last) if self.last else None,
            "topics": want_topics,
        }
        call = self._stub(leader.endpoint)
        timeout = (limits.REPLICA_FETCH_WAIT_MS + limits.ETCD_CALL_TIMEOUT_MS) / 1000
        try:
            # Signed with the wall clock: the lease clock is monotonic, not a date.
            metadata = self.security.metadata(time.time_ns() // 1_000_000)
            reply = await call(json.dumps(args).encode(), timeout=timeout, metadata=metadata)
        except grpc.aio.AioRpcError as exc:
            log.info("fetch from %s failed: %s", leader.endpoint, exc.code())
            await asyncio.sleep(limits.REPLICA_OBSERVE_PERIOD_MS / 1000)
            return
        await self._apply(reply, want_topics, now)

    async def _apply(self, reply: bytes, want_topics: bool, now: int) -> None:
        header, payload = channels.split(reply, "Fetch")
        data = bytes(payload)
        if not header.get("ok"):
            if _DIVERGED in str(header.get("error", "")):
                await asyncio.to_thread(self._start_over)
                return
            log.info("leader refused a fetch: %s", header.get("error"))
            await asyncio.sleep(limits.REPLICA_OBSERVE_PERIOD_MS / 1000)
            return
        if data:
            end = await asyncio.to_thread(append_shipped, self.store, data)
            if end != header["next_offset"]:
                raise CorruptRecordError(end, f"leader said next offset {header['next_offset']}")
            self.last = last_of(data)
        self.leader_end = int(header["leader_end"])
        self.fetched_ms = now
        if self.store.log_end_offset >= self.leader_end:
            self.caught_up_ms = now
        if want_topics and "topics" in header:
            self._topics_ms = now
            for d in header["topics"]:
                try:
                    define(self.topics, d)
                except BadRequestError as exc:
                    log.warning("leader's topic not copied: %s", exc)
        if "positions" in header:
            doc = clamp_positions(header["positions"], self.store.queue_offsets)
            raw = json.dumps(doc, separators=(",", ":")).encode()
            await asyncio.to_thread(
                self.store.disk.write_atomic, self.config.data_dir / POSITIONS_FILE, raw
            )

    def _start_over(self) -> None:
        """Our tail is not the leader's: drop the whole store and fetch again from 0."""
        log.warning("this replica's log diverged from its leader: fetching it again from 0")
        self.store.close()
        shutil.rmtree(self.store_dir)
        self.store = Store.open(self.store_dir, self.config.store, now_ms=self.leadership.clock)
        self.last = None

    async def run(self, stop: asyncio.Event) -> None:
        """Follow until this replica leads or ``stop`` is set."""
        while not stop.is_set() and not self.leadership.leads():
            await self.step()

    def status(self) -> dict[str, Any]:
        leader = self.leadership.leader
        end = self.store.log_end_offset
        return {
            "ok": True,
            "name": self.leadership.election.me,
            "role": "follower",
            "leader": leader.name if leader else None,
            "epoch": leader.epoch if leader else 0,
            "end": end,
            "lag_bytes": max(0, self.leader_end - end),
        }


class FollowerServicer(sg.MessagingServiceServicer):  # type: ignore[misc]
    """What a follower answers the official clients: routes to every group's leader (its own
    group's and, in a cluster of groups, the others'); no writes."""

    def __init__(self, follower: Follower, membership: Membership) -> None:
        self.follower = follower
        self.membership = membership

    def _refusal(self) -> NotLeaderError:
        leader = self.follower.leadership.leader
        where = f"; the leader is {leader.name} at {leader.endpoint}" if leader else ""
        return NotLeaderError(f"this replica follows{where}")

    def _queues(self, topic: str) -> list[Any]:
        if self.follower.leadership.leader is None:
            raise self._refusal()
        info = self.follower.topics.get(mapping.validate_topic(topic, allow_system=True))
        return routes.message_queues(info, self.membership.route_targets())

    async def QueryRoute(self, request: Any, context: Any) -> Any:
        try:
            queues = self._queues(request.topic.name)
        except (NotLeaderError, TopicNotFoundError, BadRequestError) as exc:
            return sv.QueryRouteResponse(status=fail(exc))
        return sv.QueryRouteResponse(status=mapping.status(), message_queues=queues)

    async def QueryAssignment(self, request: Any, context: Any) -> Any:
        """As a leader's (consume.py): every live group's queues, so a consumer that asked a
        follower receives at each group's leader."""
        try:
            queues = self._queues(request.topic.name)
        except (NotLeaderError, TopicNotFoundError, BadRequestError) as exc:
            return sv.QueryAssignmentResponse(status=fail(exc))
        assignments = [pb.Assignment(message_queue=q) for q in queues]
        return sv.QueryAssignmentResponse(status=mapping.status(), assignments=assignments)

    async def SendMessage(self, request: Any, context: Any) -> Any:
        return sv.SendMessageResponse(status=fail(self._refusal()))

    async def EndTransaction(self, request: Any, context: Any) -> Any:
        return sv.EndTransactionResponse(status=fail(self._refusal()))

    async def ReceiveMessage(self, request: Any, context: Any) -> AsyncIterator[Any]:
        yield sv.ReceiveMessageResponse(status=fail(self._refusal()))

    async def AckMessage(self, request: Any, context: Any) -> Any:
        return sv.AckMessageResponse(status=fail(self._refusal()))

    async def ChangeInvisibleDuration(self, request: Any, context: Any) -> Any:
        return sv.ChangeInvisibleDurationResponse(status=fail(self._refusal()))

    async def Heartbeat(self, request: Any, context: Any) -> Any:
        return sv.HeartbeatResponse(status=mapping.status())  # alive; its routes name the leader


class _RefuseChannels(grpc.GenericRpcHandler):  # type: ignore[misc]
    """Every method of the admin and data channels but ClusterInfo: refused, naming the leader
    (a follower holds no topics, groups or transactions to show or change). ClusterInfo is the
    cluster's shape and every group's leader, which a follower knows (cluster status, Spark)."""

    def __init__(self, servicer: FollowerServicer) -> None:
        self.servicer = servicer

    def service(self, details: Any) -> Any:
        method = str(details.method)
        if method == f"/{ADMIN_SERVICE}/ClusterInfo":
            return grpc.unary_unary_rpc_method_handler(self._cluster_info)
        if not method.startswith((f"/{ADMIN_SERVICE}/", f"/{DATA_SERVICE}/")):
            return None

        async def refuse(body: bytes, context: Any) -> bytes:
            return channels.frame(refusal(self.servicer._refusal(), method))

        return grpc.unary_unary_rpc_method_handler(refuse)

    async def _cluster_info(self, body: bytes, context: Any) -> bytes:
        return channels.frame({"ok": True, **self.servicer.membership.info()})


def add_follower_services(server: Any, follower: Follower, membership: Membership) -> None:
    servicer = FollowerServicer(follower, membership)
    sg.add_MessagingServiceServicer_to_server(servicer, server)
    server.add_generic_rpc_handlers((_RefuseChannels(servicer),))

    async def status(body: bytes, context: Any) -> bytes:
        return channels.frame(follower.status())

    async def fetch(body: bytes, context: Any) -> bytes:
        return channels.frame(refusal(NotLeaderError("this replica follows"), "Fetch"))

    handlers = {
        "Fetch": grpc.unary_unary_rpc_method_handler(fetch),
        "Status": grpc.unary_unary_rpc_method_handler(status),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
