"""One replica of a group, from start to stop: follow, get promoted, lead, maybe follow again.

Owns: the phases of a replica process (``txmq broker --etcd HOST:PORT --replica-group G``, or
``txmq broker --cluster FILE --broker-name R`` for a replica of a cluster file's group), and
what lives across them: its place in the cluster (one ``Membership``: routes name every group's
leader, from etcd through ``GroupLeaders``).
The election runs for the whole life of the process (leadership.py). While another replica
leads, this one is a ``Follower`` (follower.py: store only, copying the leader's log). Once it
leads, it closes that store and opens a full broker on the same data directory (app.serve):
recovery rebuilds the transaction book, queues and delay schedule from the copied log exactly
as after a restart, so pending transactions are checked back by the new leader. When it stops
leading (lease lapsed, etcd unreachable past its deadline, another leader seen), the broker is
stopped and the process follows again; its unacknowledged tail is found divergent and dropped.
Must not: decide leadership (election.py) or acknowledge writes itself (replication.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import socket
from collections.abc import Callable
from typing import Any

import grpc

from txmq import limits
from txmq.broker.cluster.membership import SOLO_NAME, Membership
from txmq.broker.config.broker_config import BrokerConfig
from txmq.broker.leadership.preferred import HandBack, preferred_of
from txmq.broker.leadership.runner import GroupLeaders, Leadership
from txmq.broker.node.serve import advertised_host, bind, cluster_member, serve
from txmq.broker.replication.follower import Follower, add_follower_services
from txmq.broker.replication.forward import Forwarder
from txmq.broker.security.auth import Guard, peer_security, read_acl_file
from txmq.broker.security.interceptor import AuthInterceptor
from txmq.broker.security.tls import server_credentials
from txmq.broker.state.parts import lock_data_dir, wall_ms
from txmq.coordination.cluster_file import ClusterFile, Group, Member
from txmq.coordination.etcd import Etcd
from txmq.errors import ConfigError, NotLeaderError
from txmq.protocol.acl import Acl
from txmq.protocol.client_security import ClientSecurity, open_aio_channel
from txmq.store.files.disk import OsDisk
from txmq.store.replica.identity import incarnation

log = logging.getLogger(__name__)
_SHUTDOWN_GRACE_S = 1.0
# A follower being promoted closes its port for as short a time as it can: what is in flight
# there waits for a leader that is gone (forwarded calls) or is a stream the client reopens.
_PROMOTION_GRACE_S = 0.1
# A replica that handed the lead back keeps its port closed this much longer once its
# preferred replica answered its fetch as leader (gRPC's first reconnect backoff,
# 1 s +-20 %, and the official client's own retry delay).
_HAND_BACK_CLIENTS_S = 2.0
# How often a follower whose port is closed (cut off from etcd and its leader) looks for an
# answer from either, to open it again.
_CLOSED_LOOK_S = 0.1
_MESSAGE_SIZES = (
    ("grpc.max_receive_message_length", limits.GRPC_MESSAGE_SIZE_MAX),
    ("grpc.max_send_message_length", limits.GRPC_MESSAGE_SIZE_MAX),
)


def _cluster_of(config: BrokerConfig) -> tuple[ClusterFile, Member, str]:
    """(the cluster, this replica, the cluster name its etcd keys live under): the cluster
    file's, else a cluster of the one group ``--replica-group`` whose other replicas this one
    learns from etcd only (keys under the name ``txmq``, as before cluster files had groups).

    Raises:
        ClusterFileError: the file is bad or names no member this replica is.
        ConfigError: ``--replica-group`` names another group than the file gives this replica.
    """
    found = cluster_member(config)
    if found is not None:
        cluster, me = found
        group = cluster.group_of(me).name
        if config.replica_group and config.replica_group != group:
            raise ConfigError(
                f"--replica-group {config.replica_group} but the cluster file puts "
                f"{me.name} in group {group}"
            )
        return cluster, me, cluster.name
    host, port = advertised_host(config), config.port or _free_port(config.host)
    me = Member(config.broker_name or f"{host}:{port}", host, port)
    alone = Group(config.replica_group or config.broker_name, (me,))
    return ClusterFile.of_groups(SOLO_NAME, (alone,)), me, SOLO_NAME


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


async def serve_replica(
    config: BrokerConfig,
    *,
    ready: Callable[[int], None] | None = None,
    stop: asyncio.Event,
    hangup: asyncio.Event | None = None,
) -> None:
    """Run one replica until ``stop`` is set; ``ready(port)`` once, when it first listens."""
    cluster, me, keys = _cluster_of(config)
    group = cluster.group_of(me).name
    # A replica binds the port its cluster file gives it: the file is what peers dial.
    config = dataclasses.replace(config, port=me.port, replica_group=group)
    etcd = Etcd(config.etcd, tls=config.etcd_tls, keep_alive=True)
    await asyncio.to_thread(etcd.check_security)
    # Which life of its data directory this replica is: read (or made, durable) before it
    # takes part in any election; the in-sync set names members by it (ADR 0005).
    born = await asyncio.to_thread(incarnation, OsDisk(), config.data_dir / "store")
    log.info("replica %s of group %s, data directory incarnation %s", me.name, group, born)
    leadership = Leadership(etcd, keys, group, me.name, me.endpoint, incarnation=born)
    # The group's first member leads whenever it is in sync (preferred.py, ADR 0005).
    leadership.handback = HandBack(me.name, preferred_of(cluster.group_of(me)))
    leaders = GroupLeaders(etcd, keys, group, leadership)
    membership = Membership(cluster, me, now_ms=wall_ms, leader_of=leaders.leader_of)
    # Replicas the cluster file does not list (``--replica-group`` alone) are learnt from etcd.
    membership.registered = leadership.endpoints
    announced: list[int] = []

    def once(port: int) -> None:
        if not announced and ready is not None:
            ready(port)
        announced.append(port)

    steps = [asyncio.create_task(leadership.run())]
    if membership.peers:
        steps.append(asyncio.create_task(leaders.run()))
    try:
        while not stop.is_set():
            if leadership.leads():
                await _lead(config, leadership, membership, stop, hangup, once)
            else:
                await _follow(config, leadership, membership, stop, once)
    finally:
        for t in steps:
            t.cancel()
        await asyncio.gather(*steps, return_exceptions=True)
        membership.close()
        if leadership.leads():
            await leadership.resign()  # a clean stop hands over within an observe period


async def _lead(
    config: BrokerConfig,
    leadership: Leadership,
    membership: Membership,
    stop: asyncio.Event,
    hangup: asyncio.Event | None,
    ready: Callable[[int], None],
) -> None:
    leader = leadership.leader
    log.info("leading group as %s (epoch %s)", leadership.election.me, leader and leader.epoch)
    lead_stop = asyncio.Event()

    epoch = leader.epoch if leader else 0

    def same_term() -> bool:  # led again under a new epoch unseen: restart, to stamp it
        now = leadership.leader
        return leadership.leads() and now is not None and now.epoch == epoch

    async def watch() -> None:
        # ``changed`` is set when the keepalive thread finds the lease gone and when this
        # replica hands the lead back (preferred.py): the broker stops at once then, not up to
        # an observe period later, so its clients are refused for as short a time as it can.
        changed = leadership.changed
        while not stop.is_set() and same_term():
            changed.clear()
            # Or look at the lease again after an observe period.
            await _until_any((stop, changed), limits.REPLICA_OBSERVE_PERIOD_MS / 1000)
        lead_stop.set()

    watcher = asyncio.create_task(watch())
    try:
        await serve(
            config,
            ready=ready,
            stop=lead_stop,
            hangup=hangup,
            leadership=leadership,
            membership=membership,
        )
    except NotLeaderError as exc:  # the lease lapsed while the broker opened: not a crash
        log.warning("did not lead: %s", exc)
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
    if not stop.is_set():
        log.warning("stopped leading (lease lapsed or another leader): following again")


async def _follow(
    config: BrokerConfig,
    leadership: Leadership,
    membership: Membership,
    stop: asyncio.Event,
    ready: Callable[[int], None],
) -> None:
    # The same TLS and ACL as when leading: a secured client reaches a follower as well, and
    # the follower calls its leader signed and over TLS (auth.peer_security).
    acl = read_acl_file(config.acl_file) if config.acl_file is not None else None
    peers = peer_security(config, acl)
    membership.security = peers
    lock_fd = lock_data_dir(config.data_dir)
    try:
        follower = await asyncio.to_thread(
            Follower, config, leadership, membership.group.name, peers
        )
        forwarder = Forwarder(
            lambda: leadership.leader, leadership.election.me, peers, forwarding_channel
        )
        follower.more_status = lambda: {
            "forwarded": forwarder.forwarded,
            "forwarding": forwarder.open_calls,
            "preferred": leadership.handback.preferred,
        }
        done = asyncio.Event()
        following = asyncio.create_task(follower.run(stop))
        watcher = asyncio.create_task(forwarder.watch(done))
        try:
            await _after_hand_back(leadership, follower, following, stop)
            port = _Port(config, follower, membership, forwarder, acl)
            await port.serve(leadership, following, stop, ready)
        finally:
            done.set()
            following.cancel()
            await asyncio.gather(following, watcher, return_exceptions=True)
            forwarder.close()
            follower.close()
    finally:
        os.close(lock_fd)


class _Port:
    """A follower's client port, open only while the replica is in contact (ADR 0006, "a
    replica cut off"): etcd or a live leader answered it since it began following and within
    a lease TTL. Cut off from both, it may know no leader or a dead one and cannot learn the
    new one; with its port closed, a client's connection to it ends and the client's gRPC
    channel dials the next address of the route, a replica that can serve it."""

    def __init__(
        self,
        config: BrokerConfig,
        follower: Follower,
        membership: Membership,
        forwarder: Forwarder,
        acl: Acl | None,
    ) -> None:
        self.config = config
        self.follower = follower
        self.membership = membership
        self.forwarder = forwarder
        self.acl = acl
        self.credentials = server_credentials(config)

    def _isolated(self, leadership: Leadership, since_ms: int) -> bool:
        return leadership.isolated(self.follower.fetched_ms or None, since_ms)

    async def serve(
        self,
        leadership: Leadership,
        following: asyncio.Task[None],
        stop: asyncio.Event,
        ready: Callable[[int], None],
    ) -> None:
        """Until ``following`` ends (promoted, or ``stop``): open the port while in contact,
        close it while cut off, looking every observe period while open."""
        period_s = limits.REPLICA_OBSERVE_PERIOD_MS / 1000
        since = leadership.clock()  # contact from before this follow does not count
        said = False
        while not following.done() and not stop.is_set():
            if self._isolated(leadership, since):
                if not said and leadership.clock() - since > leadership.election.ttl_ms:
                    log.warning(
                        "no answer from etcd or a leader for %d ms: the client port stays"
                        " closed until one answers", leadership.clock() - since,
                    )  # fmt: skip
                    said = True
                await _until_any((stop,), _CLOSED_LOOK_S, following)
                continue
            said = False
            server = _follower_server(
                self.config, self.follower, self.membership, self.forwarder, self.acl
            )
            port = bind(server, self.config, self.config.port, self.credentials)
            await server.start()
            ready(port)
            # Cut off at two looks in a row: a process resumed from a pause finds its last
            # answer old at the first look, before its election's next read of etcd.
            strikes = 0
            while not following.done() and not stop.is_set() and strikes < 2:
                await _until_any((stop,), period_s, following)
                strikes = strikes + 1 if self._isolated(leadership, 0) else 0
            promoted = following.done() and not stop.is_set()
            if not following.done() and not stop.is_set():
                log.warning(
                    "no answer from etcd or a leader for over %d ms: closing the client port"
                    " until one answers (its clients move to another replica)",
                    leadership.election.ttl_ms,
                )
                since = leadership.clock()
                said = True
            grace = _PROMOTION_GRACE_S if promoted or not stop.is_set() else _SHUTDOWN_GRACE_S
            await server.stop(grace=grace)
            log.info("follower's port closed%s", " to lead" if promoted else "")


async def _after_hand_back(
    leadership: Leadership, follower: Follower, following: asyncio.Task[None], stop: asyncio.Event
) -> None:
    """Right after this replica handed the lead back to its preferred replica (preferred.py),
    keep its port closed until the preferred one answered a fetch as leader (at most until the
    hand-back's campaign hold ends), then for ``_HAND_BACK_CLIENTS_S`` more: a client whose
    connection to this replica closed reconnects to the first of its sorted addresses that
    accepts, and its attempt at the preferred one may have been refused while that replica
    swapped its follower's port for its broker's (gRPC then waits ~1 s, +-20 %, before trying
    that address again). Were this port open meanwhile, the client would settle here and every
    call of it be forwarded (ADR 0006, "Cost")."""
    left_s = (leadership.handback.hold_until_ms - leadership.clock()) / 1000
    if left_s <= 0:
        return  # not right after a hand-back
    # The first answer, a stop, the follower's end, or the hold's end.
    await _until_any((stop, follower.answered), left_s, following)
    if follower.answered.is_set() and not stop.is_set():
        log.info(
            "preferred replica leads: this replica's port opens in %.1f s", _HAND_BACK_CLIENTS_S
        )
        await _until_any((stop,), _HAND_BACK_CLIENTS_S)


async def _until_any(
    events: tuple[asyncio.Event, ...], timeout_s: float, *tasks: asyncio.Future[Any]
) -> None:
    """Return once one of ``events`` is set or one of ``tasks`` done, or after ``timeout_s``
    (the tasks are left running)."""
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait([*waits, *tasks], timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()


def forwarding_channel(endpoint: str, security: ClientSecurity) -> Any:
    """The follower's channel to its leader for forwarded calls: messages as large as the
    leader takes."""
    return open_aio_channel(endpoint, security, _MESSAGE_SIZES)


def _follower_server(
    config: BrokerConfig,
    follower: Follower,
    membership: Membership,
    forwarder: Forwarder,
    acl: Acl | None,
) -> Any:
    edge = None
    if acl is not None and config.acl_file is not None:
        # Checked here (authenticated and authorized, as on the leader) before a call is
        # forwarded; the leader checks the forwarded call again (forward.py).
        guard = Guard(
            acl,
            source=config.acl_file,
            transaction_topic=lambda _tid: None,
            date_skew_ms=config.auth_date_skew_s * 1000,
        )
        edge = [AuthInterceptor(guard, wall_ms)]
    server = grpc.aio.server(interceptors=edge, options=[("grpc.so_reuseport", 0), *_MESSAGE_SIZES])
    add_follower_services(server, follower, membership, forwarder)
    return server
