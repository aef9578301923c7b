"""Running a broker: wiring the parts to a grpc.aio server, background loops, clean shutdown.

Owns: binding the port (0 picks a free one), the executor for blocking store calls (64 threads,
so concurrent senders meet in one group-commit fsync), constructing the servicer and the
consumer side, the loops (check-back, delay release, client expiry, transaction snapshot and
retention), the Prometheus endpoint, and their clean shutdown
(``serve``); node/run.py runs it in a process.
Must not: contain protocol or storage logic.

Shutdown order: stop accepting RPCs (grace 1 s), stop the loops and the consumer side (which
saves positions), drain the executor, then close the parts (the store checkpoints last).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
import sys
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc

from txmq import limits, malloc
from txmq.broker.admin.service import add_admin
from txmq.broker.cluster.membership import Membership
from txmq.broker.config.broker_config import BrokerConfig
from txmq.broker.consume.rpcs import ConsumeRpcs
from txmq.broker.data_channel.bundles import add_bundles
from txmq.broker.data_channel.pull import add_data
from txmq.broker.leadership.runner import Leadership
from txmq.broker.node.messaging import MessagingServicer
from txmq.broker.produce.checkback import CheckBack
from txmq.broker.replication.leader import Replication
from txmq.broker.replication.rpcs import add_replica, answerer
from txmq.broker.replication.wire import serve_wire
from txmq.broker.rpc.decode import add_messaging_service
from txmq.broker.security.auth import Guard, open_broker_notice, peer_security, read_acl_file
from txmq.broker.security.interceptor import AuthInterceptor
from txmq.broker.security.peer_names import PeerInterceptor, peer_interceptor
from txmq.broker.security.tls import server_credentials
from txmq.broker.state.parts import Parts
from txmq.coordination import cluster_file
from txmq.coordination.cluster_file import ClusterFile, Member
from txmq.errors import ConfigError
from txmq.protocol.acl import Acl
from txmq.protocol.client_security import ClientSecurity
from txmq.store.files.disk import OsDisk
from txmq.store.replica.acked import load_acked_end
from txmq.thread_names import name_os_thread

log = logging.getLogger("txmq.broker")

EXECUTOR_THREADS = 64
HOUSEKEEPING_PERIOD_S = 1.0
SNAPSHOT_PERIOD_S = 30.0
# One scrub step (SCRUB_BYTES_PER_STEP) per period: a 1 GiB log is re-verified every ~4 min.
SCRUB_PERIOD_S = 1.0
SHUTDOWN_GRACE_S = 1.0


async def _every(period_s: float, step: Callable[[], Awaitable[object]], name: str) -> None:
    """Run ``step`` forever; a failing step is logged with its traceback and retried next
    period, because one bad tick must not stop check-back for every later transaction."""
    while True:
        await asyncio.sleep(period_s)
        try:
            await step()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("background loop %s failed; retrying next period", name)


class Loops:
    """The broker's own background work; the consumer side runs its sweep itself."""

    def __init__(self, parts: Parts, servicer: MessagingServicer) -> None:
        self.parts = parts
        self.servicer = servicer
        self.check_back = CheckBack(parts.tx, parts.clients, parts.metrics, servicer.run).tick

    async def release_delayed(self) -> None:
        touched = await self.servicer.run(self.parts.delay.release_due, self.parts.now_ms())
        for topic, queue_id in touched:
            self.servicer.notify_appended(topic, queue_id)

    async def housekeeping(self) -> None:
        self.parts.clients.expire(self.parts.now_ms())

    async def scrub(self) -> None:
        """Re-verify the next stretch of the log and its queue entries
        (store/recovery/repair.py)."""
        await self.servicer.run(self.parts.store.scrub_step)

    async def slow_housekeeping(self) -> None:
        p = self.parts
        await self.servicer.run(p.tx.snapshot)
        await self.servicer.run(
            lambda: p.store.delete_expired_segments(keep_from_offset=p.tx.oldest_pending_offset)
        )

    def start(self, tick_s: float) -> list[asyncio.Task[None]]:
        return [
            asyncio.create_task(_every(tick_s, self.check_back, "check-back")),
            asyncio.create_task(_every(tick_s, self.release_delayed, "delay")),
            asyncio.create_task(_every(HOUSEKEEPING_PERIOD_S, self.housekeeping, "clients")),
            asyncio.create_task(_every(SCRUB_PERIOD_S, self.scrub, "scrub")),
            asyncio.create_task(
                _every(SNAPSHOT_PERIOD_S, self.slow_housekeeping, "snapshot+retention")
            ),
        ]


def _executor() -> ThreadPoolExecutor:
    """The executor for blocking store calls; its threads carry OS names (txmq-io_N), so
    per-thread CPU in /proc tells them apart (bench_broker)."""
    return ThreadPoolExecutor(
        max_workers=EXECUTOR_THREADS, thread_name_prefix="txmq-io", initializer=name_os_thread
    )


def bind(server: Any, config: BrokerConfig, port: int, credentials: Any | None) -> int:
    address = f"{config.host}:{port}"
    try:
        if credentials is not None:  # TLS only: no plaintext port beside it
            port = int(server.add_secure_port(address, credentials))
        else:
            port = int(server.add_insecure_port(address))
    except RuntimeError as exc:  # newer grpc raises instead of returning 0
        raise OSError(f"cannot bind {address}: {exc}") from exc
    if port == 0:
        raise OSError(f"cannot bind {address}")
    return port


def cluster_member(config: BrokerConfig) -> tuple[ClusterFile, Member] | None:
    """The cluster file and this broker's entry in it, or None without a cluster file.

    Raises:
        ClusterFileError: the file is bad or names no member that this broker is.
    """
    if config.cluster_file is None:
        return None
    cluster = cluster_file.load(config.cluster_file)
    host = config.advertised_host or config.host
    return cluster, cluster.find_self(name=config.broker_name, host=host, port=config.port)


def membership_for(
    config: BrokerConfig,
    found: tuple[ClusterFile, Member] | None,
    port: int,
    now_ms: Callable[[], int],
    peers: ClientSecurity,
) -> Membership:
    if found is None:
        return Membership.solo(advertised_host(config), port, now_ms=now_ms)
    return Membership(found[0], found[1], now_ms=now_ms, security=peers)


def advertised_host(config: BrokerConfig) -> str:
    """The host QueryRoute tells clients to connect to: the configured one, else the bound
    host, except that a wildcard bind (0.0.0.0, ::) is not an address a client can dial, so it
    advertises this machine's own address instead."""
    if config.advertised_host:
        return config.advertised_host
    if config.host in ("", "0.0.0.0", "::"):
        return socket.gethostbyname(socket.gethostname())
    return config.host


def _guard(acl: Acl | None, config: BrokerConfig, parts: Parts) -> Guard | None:
    if acl is None or config.acl_file is None:
        return None
    return Guard(
        acl,
        source=config.acl_file,
        transaction_topic=parts.tx.topic_of,
        date_skew_ms=config.auth_date_skew_s * 1000,
        streams=parts.clients,
    )


def _grpc_server(guard: Guard | None, parts: Parts, peers: PeerInterceptor | None) -> Any:
    edge: list[Any] = []
    if guard is not None:
        edge.append(AuthInterceptor(guard, parts.now_ms, parts.metrics.refusals))
    if peers is not None:  # last: around the handlers themselves (peer_names.py)
        edge.append(peers)
    return grpc.aio.server(
        interceptors=edge or None,
        options=[
            ("grpc.max_receive_message_length", limits.GRPC_MESSAGE_SIZE_MAX),
            ("grpc.max_send_message_length", limits.GRPC_MESSAGE_SIZE_MAX),
            # grpc enables SO_REUSEPORT by default, which lets a second broker bind the same
            # port and silently take half the connections.
            ("grpc.so_reuseport", 0),
        ],
    )


def _add_services(
    server: Any,
    parts: Parts,
    executor: ThreadPoolExecutor,
    membership: Membership,
    guard: Guard | None,
) -> tuple[ConsumeRpcs, MessagingServicer]:
    """Register the v2 MessagingService, the admin and the data channel on ``server``;
    ``guard``'s client id bindings name each client's access key in ClientList."""
    endpoint = (membership.me.host, membership.me.port)
    consume = ConsumeRpcs(
        store=parts.store,
        topics=parts.topics,
        config=parts.config,
        now_ms=parts.now_ms,
        executor=executor,
        metrics=parts.metrics,
        positions=parts.deliveries,
        endpoint=endpoint,
        membership=membership,
    )
    servicer = MessagingServicer(
        config=parts.config,
        topics=parts.topics,
        clients=parts.clients,
        sends=parts.sends,
        executor=executor,
        endpoint=endpoint,
        now_ms=parts.now_ms,
        consume=consume,
        membership=membership,
    )
    add_messaging_service(servicer, server)
    add_admin(server, parts, servicer, guard.client_ids.owner if guard is not None else None)
    add_data(server, parts, servicer)
    add_bundles(server, parts, servicer)
    return consume, servicer


def _replication(leadership: Leadership, parts: Parts) -> Replication:
    """The leader's replication, its epoch stamped (before the port is bound: a lease that
    lapsed while the store opened raises NotLeaderError with no port left to free)."""
    return Replication(
        parts.store,
        parts.topics,
        leadership,
        parts.config.min_insync_replicas,
        positions=parts.deliveries.snapshot,
    )


def _lead_with(
    replication: Replication | None, server: Any, servicer: MessagingServicer, wire: str | None
) -> list[asyncio.Task[None]]:
    """Serve the Replica channel and gate every acknowledgement through replication (None:
    a broker alone, nothing to do); with ``wire`` (a host: the broker serves neither TLS nor
    an ACL) its fetch rounds on plain TCP too (replica_wire.py), the task returned."""
    if replication is None:
        return []
    add_replica(server, replication, servicer)
    servicer.ack_gate = replication.acknowledge
    servicer.positions_gate = replication.confirm_positions
    if wire is None:
        return []
    return [asyncio.create_task(_serve_wire(replication, servicer, wire))]


def visible_end(config: BrokerConfig, leadership: Leadership | None) -> int | None:
    """Where a SYNC leader's read hold starts on open (ADR 0005): the end this replica knows
    its group acknowledged (in memory since it started, or kept beside its log); records past
    it stay unreadable until the in-sync replicas have them. None (everything readable): a
    broker alone, or a replica without SYNC replication (its durable end is its acknowledged
    end)."""
    if leadership is None or config.min_insync_replicas <= 1:
        return None
    kept = load_acked_end(OsDisk(), config.data_dir / "store", sys.maxsize)
    return max(leadership.committed, kept)


def _open_parts(config: BrokerConfig, leadership: Leadership | None) -> Parts:
    """Open the data directory (blocking: run in a thread, off the loop, where a replica's
    election renews its lease while the store recovers: under load that takes seconds, longer
    than the lease, ADR 0005)."""
    parts = Parts(config, visible_end=visible_end(config, leadership))
    if leadership is not None:
        try:
            parts.grow_topics_to_log()
        except BaseException:
            parts.close()
            raise
    got = parts.store.recovery
    if got.held_count:
        log.info(
            "%d records past offset %s held from readers until the in-sync replicas have them",
            got.held_count, got.held_from,
        )  # fmt: skip
    malloc.give_back_free()  # recovery's reads, kept by this thread's arena (txmq.malloc)
    return parts


async def serve(
    config: BrokerConfig,
    *,
    ready: Callable[[int], None] | None = None,
    stop: asyncio.Event | None = None,
    hangup: asyncio.Event | None = None,
    leadership: Leadership | None = None,
    membership: Membership | None = None,
) -> None:
    """Run one broker until ``stop`` is set; ``ready(port)`` is called once it accepts RPCs.
    With ``leadership`` it is its replica group's leader (replica_node.py): it serves the
    Replica channel and acknowledges writes through ``Replication.acknowledge``; the replica
    passes its ``membership`` (its groups' leaders come from etcd), which it keeps and closes.

    Raises:
        OSError: the port cannot be bound.
        TxmqError: the data directory cannot be opened (e.g. StoreFencedError), the ACL or a
            TLS file is refused (ConfigError).

    ``hangup`` (set on SIGHUP by ``run``) re-reads the ACL file; a bad file keeps the old rules.
    """
    # Before anything opens: a bad file changes nothing.
    found = cluster_member(config) if membership is None else None
    # Refused before the data directory is touched: a broker never runs with rules it misread.
    acl = read_acl_file(config.acl_file) if config.acl_file is not None else None
    peers = peer_security(config, acl)
    credentials = server_credentials(config)
    open_broker_notice(config.acl_file)
    executor = _executor()
    parts = await asyncio.to_thread(_open_parts, config, leadership)
    metrics_http: Any = None
    tasks: list[asyncio.Task[None]] = []
    guard = _guard(acl, config, parts)
    known: list[Membership] = []  # this member's place, once it is known (below)
    server = _grpc_server(guard, parts, peer_interceptor(config, leadership, known))
    consume: ConsumeRpcs | None = None
    owned: Membership | None = None
    try:
        replication = _replication(leadership, parts) if leadership is not None else None
        # A member binds the port its cluster file gives it: the file is what peers dial.
        member_port = config.port if found is None else found[1].port
        port = bind(server, config, member_port, credentials)
        if membership is None:
            membership = owned = membership_for(config, found, port, parts.now_ms, peers)
        membership.security = peers
        known.append(membership)
        # The sink's check-back reads a batch's ledger on its home member (txn/ledger.py).
        parts.ledger.place(membership.group.name, membership.find_at if membership.peers else None)
        consume, servicer = _add_services(server, parts, executor, membership, guard)
        tasks = _lead_with(replication, server, servicer, _wire_host(config, credentials, acl))
        if config.metrics_port is not None:
            from prometheus_client import start_http_server

            metrics_http = start_http_server(
                config.metrics_port, addr=config.metrics_host, registry=parts.metrics.registry
            )
        await server.start()
        await consume.start()
        tasks += Loops(parts, servicer).start(config.tick_ms / 1000.0)
        if guard is not None and hangup is not None:
            tasks.append(asyncio.create_task(_reload_on(hangup, guard, config, membership)))
        if membership.peers:
            tasks.append(asyncio.create_task(_probe_forever(membership, parts, servicer)))
        if ready is not None:
            ready(port)
        await (stop or asyncio.Event()).wait()
    finally:
        await _shutdown(server, tasks, consume, executor, parts, metrics_http)
        if owned is not None:
            owned.close()


def _wire_host(config: BrokerConfig, credentials: Any | None, acl: Acl | None) -> str | None:
    """Where a leader serves its fetch rounds on plain TCP: its host, unless it serves TLS or
    checks an ACL (None: no wire, replica_wire.py)."""
    return config.host if credentials is None and acl is None else None


async def _serve_wire(replication: Replication, servicer: MessagingServicer, host: str) -> None:
    """Fetch rounds on plain TCP beside the gRPC port (replica_wire.py): a plaintext group's
    followers use it once its Status names the port."""

    def published(port: int | None) -> None:
        replication.wire_port = port

    await serve_wire(answerer(replication, servicer), host, published)


async def _probe_forever(membership: Membership, parts: Parts, servicer: MessagingServicer) -> None:
    """Probe the peers at once (a restarted member catches up on topics at start), then
    every CLUSTER_PROBE_PERIOD_MS."""
    step = functools.partial(servicer.run, membership.probe, parts.topics)
    try:
        await step()
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("first cluster probe failed; retrying next period")
    await _every(limits.CLUSTER_PROBE_PERIOD_MS / 1000.0, step, "cluster probe")


async def _reload_on(
    hangup: asyncio.Event, guard: Guard, config: BrokerConfig, membership: Membership
) -> None:
    """Re-read the ACL file each time ``hangup`` is set (off the loop: it reads a file). The
    calls to cluster peers sign with the new secret of cluster_access_key from then on."""
    while True:
        await hangup.wait()
        hangup.clear()
        acl = await asyncio.to_thread(guard.reload_read)
        if acl is None:
            continue
        try:
            peers = peer_security(config, acl)
        except ConfigError as exc:
            log.error("ACL reload refused, keeping the previous rules: %s", exc)
            continue
        guard.replace(acl)
        membership.security = peers


async def _shutdown(
    server: Any,
    tasks: list[asyncio.Task[None]],
    consume: ConsumeRpcs | None,
    executor: ThreadPoolExecutor,
    parts: Parts,
    metrics_http: Any,
) -> None:
    try:
        await server.stop(grace=SHUTDOWN_GRACE_S)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if consume is not None:
            await consume.close()
        if metrics_http is not None:
            metrics_http[0].shutdown()
    finally:
        executor.shutdown(wait=True)
        parts.close()
        log.info("broker stopped cleanly")
