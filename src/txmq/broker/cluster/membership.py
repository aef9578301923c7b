"""Cluster membership: who this broker is, which groups are its peers, where each is served and
whether it answers, and keeping topic definitions the same on every group.

Owns: the groups (from the cluster file, or this broker alone), where each group is served now
(its one replica; or, for a cluster led through etcd, the leader etcd names: ``leader_of``),
liveness from periodic probes, the one decision of which endpoints a group advertises in routes
(``advertised``), forwarding an operator's topic create, growth and delete and a consumer group's
reset to every peer group's leader, importing the topic definitions a peer has and this broker
lacks (or has with fewer queues), and the tombstones that keep a
deleted topic from coming back. The rule, and why there is no consensus protocol:
docs/adr/0004-cluster-topic-definitions.md. A follower replica holds a Membership for its routes
only: it neither probes nor forwards (its topics come from its leader, ADR 0005).
Must not: route messages (every member serves only its own queues; the clients go to the
owning broker themselves) or touch the store.

Peers are called over their admin channel (``txmq.admin.v1.Admin``, JSON) with blocking gRPC
calls and a short deadline; the probe fans out with futures so one dead peer costs one deadline,
not one per peer. Everything here runs in the broker's executor, never on its event loop.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc

from txmq import limits
from txmq.broker.cluster.routes import Advertised
from txmq.broker.topics.registry import TopicInfo, TopicRegistry
from txmq.coordination.cluster_file import ClusterFile, Group, Member
from txmq.coordination.keys import Leader
from txmq.errors import (
    CODE_NOT_FOUND,
    CODE_TOPIC_NOT_FOUND,
    BadRequestError,
    NotFoundError,
    TopicNotFoundError,
    TxmqError,
)
from txmq.model import MessageType
from txmq.protocol import channels
from txmq.protocol.client_security import PLAINTEXT, ClientSecurity, open_channel

log = logging.getLogger("txmq.broker")
# The broker name of a broker started without a cluster file (what routes always carried).
SOLO_NAME = "txmq"


class PeerError(TxmqError):
    """A peer did not answer, or refused a forwarded request."""


# A group's name -> the leader etcd names for it now, or None (no leader: the group is out).
LeaderOf = Callable[[str], Leader | None]


@dataclass
class PeerState:
    group: Group
    misses: int = 0
    last_error: str = ""
    channel: Any = field(default=None, repr=False)
    # The endpoint ``channel`` is open to: a group's leader moves, and its channel with it.
    endpoint: str = ""


def definition(info: TopicInfo) -> dict[str, Any]:
    """A topic's definition as peers exchange it; equal definitions are the same topic."""
    return {
        "name": info.name,
        "queues": info.queue_count,
        "type": info.message_type.value,
        "all": info.accepts_all,
    }


def same_topic(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Equal definitions, except that two auto-created topics (accepting every type) are the
    same whatever type their first senders gave them on each member."""
    if a["all"] and b["all"]:
        return bool(a["name"] == b["name"] and a["queues"] == b["queues"])
    return a == b


def define(topics: TopicRegistry, d: dict[str, Any]) -> str:
    """Create ``d`` here unless present; "created", "exists", "replaced" or raise on a different
    definition.

    An explicit definition meets an auto-created one (auto-creation on, a route query or a send
    that reached this member before the operator's create did, ADR 0004): it replaces it while
    nothing was written to it here; an auto-created one meeting an explicit one here is
    "exists" (the member holding the auto-created one replaces it when it imports ours).

    Raises:
        BadRequestError: a topic of that name exists here with another definition.
    """
    name = str(d["name"])
    want = {**d, "all": bool(d.get("all", False))}
    if topics.exists(name):
        here = definition(topics.get(name))
        if same_topic(here, want) or (want["all"] and not here["all"]):
            return "exists"
        if here["all"] and not want["all"] and topics.replace_unwritten(_info(want)):
            log.info("auto-created topic %s replaced by its definition %s", name, want)
            return "replaced"
        raise BadRequestError(
            f"topic {name!r} exists with another definition: {here}"
            + (" (auto-created here, and written to)" if here["all"] else "")
        )
    info = topics.create(
        name,
        int(want["queues"]),
        MessageType(want["type"]),
        exist_ok=True,
        accepts_all=want["all"],
    )
    if not same_topic(definition(info), want):  # created by another thread meanwhile
        raise BadRequestError(f"topic {name!r} exists with another definition: {definition(info)}")
    return "created"


def grown(topics: TopicRegistry, d: dict[str, Any]) -> bool:
    """A peer's definition of a topic this member has, the same but with more queues: the
    operator grew it (``txmq topic update``) and this member has not yet. Growing is the one
    change two definitions agree on without an operator: queues keep their ids and offsets,
    so the larger count is the union of both."""
    try:
        here = definition(topics.get(str(d.get("name", ""))))
    except TopicNotFoundError:
        return False
    more = int(d.get("queues", 0)) > here["queues"]
    return more and same_topic(here, {**d, "all": bool(d.get("all")), "queues": here["queues"]})


def _replaces(topics: TopicRegistry, d: dict[str, Any]) -> bool:
    """A peer's explicit definition of a topic this member has auto-created."""
    try:
        return not d.get("all", False) and topics.get(str(d.get("name", ""))).accepts_all
    except TopicNotFoundError:  # deleted since: the next probe imports it
        return False


def copy_definition(topics: TopicRegistry, d: dict[str, Any]) -> None:
    """A follower takes its leader's definition of a topic as it is, replacing its own copy:
    the leader decided it for the log both hold (``define`` is for members' own topics)."""
    info = _info(d)
    if not topics.exists(info.name) or topics.get(info.name) != info:
        topics.mirror(info)


def _info(d: dict[str, Any]) -> TopicInfo:
    """A definition as peers exchange it (``all`` absent: false), as a TopicInfo."""
    all_types = bool(d.get("all", False))
    return TopicInfo(str(d["name"]), int(d["queues"]), MessageType(d["type"]), all_types)


class Membership:
    def __init__(
        self,
        cluster: ClusterFile,
        me: Member,
        *,
        now_ms: Callable[[], int],
        security: ClientSecurity = PLAINTEXT,
        leader_of: LeaderOf | None = None,
    ) -> None:
        assert me in cluster.members, "this broker is a member of its cluster"
        assert leader_of is not None or not cluster.replicated, "replica groups need etcd"
        self.cluster = cluster
        self.me = me
        self.group = cluster.group_of(me)
        self.now_ms = now_ms
        # Credentials and TLS for calls to peers (broker/auth.peer_security); replaced when the
        # ACL file is reloaded, read by each call.
        self.security = security
        self.leader_of = leader_of
        self._peers = [PeerState(g) for g in cluster.groups if g != self.group]
        self._tombstones: dict[str, int] = {}
        self._lock = threading.Lock()
        # This broker's own replica group as etcd lists it (Leadership.endpoints), when its
        # replicas are not all in a cluster file (``--replica-group`` alone); None otherwise.
        self.registered: Callable[[], list[str]] | None = None
        self._channels_lock = threading.Lock()

    @classmethod
    def solo(cls, host: str, port: int, *, now_ms: Callable[[], int]) -> Membership:
        me = Member(SOLO_NAME, host, port)
        return cls(ClusterFile(SOLO_NAME, (me,)), me, now_ms=now_ms)

    @property
    def one_address(self) -> bool:
        """Routes name one address per replica group (its leader) instead of every replica when
        this broker serves TLS, where the official Python client dials a multi-address route
        as one target whose hostname check fails (docs/security.md). A member's peers serve
        TLS exactly when it does (auth.peer_security), so its peer security tells."""
        return self.security.tls

    @property
    def peers(self) -> list[Group]:
        return [p.group for p in self._peers]

    def serving(self, group: Group) -> str | None:
        """Where ``group`` takes writes now: its one replica, or the leader etcd names (None
        while it has none)."""
        if self.leader_of is None:
            return group.replicas[0].endpoint
        leader = self.leader_of(group.name)
        return None if leader is None else leader.endpoint

    def advertised(self, group: Group) -> Advertised | None:
        """THE decision of which endpoints ``group`` advertises in routes and assignments, or
        None to leave it out. A group of one: its endpoint. A replica group: every replica (the
        cluster file's, and those etcd lists for this broker's own group: ``registered``),
        sorted, as the official Python client dials them: any replica serves the data plane (a
        follower forwards to its leader, forward.py; ADR 0006), so a client reaches the group
        through whichever answers and needs no new route after a failover; a group without a
        leader for the moment stays in (its followers wait for the next one). With
        ``one_address`` (TLS) a replica group names its leader only (its first replica while it
        has none): a client then follows a failover at its next route refresh. A peer group is
        out once it missed CLUSTER_PROBE_MISSES_MAX probes at its current leader."""
        endpoint = self.serving(group)
        peer = next((p for p in self._peers if p.group == group), None)
        down = peer is not None and peer.misses >= limits.CLUSTER_PROBE_MISSES_MAX
        if down and peer is not None and peer.endpoint == endpoint:
            return None
        endpoints = self.replica_endpoints(group)
        if self.one_address:
            endpoints = [endpoint or endpoints[0]]
        pairs = []
        for e in endpoints:
            host, _, port = e.rpartition(":")
            pairs.append((host, int(port)))
        return Advertised(group.name, tuple(pairs))

    def replica_endpoints(self, group: Group) -> list[str]:
        """Every replica of ``group``, sorted: the cluster file's, and for this broker's own
        group those etcd lists too (``registered``)."""
        endpoints = {m.endpoint for m in group.replicas}
        if group == self.group and self.registered is not None:
            endpoints.update(self.registered())
        return sorted(endpoints)

    def route_targets(self) -> list[Advertised]:
        """Every live group in file order, as routes and assignments list them (this broker's
        own group always, while it has a leader)."""
        found = (self.advertised(g) for g in self.cluster.groups)
        return [a for a in found if a is not None]

    def info(self) -> dict[str, Any]:
        """What ClusterInfo answers: the cluster's name, this broker's group, every group."""
        return {"cluster": self.cluster.name, "self": self.group.name, "members": self.view()}

    def view(self) -> list[dict[str, Any]]:
        states = {p.group: p for p in self._peers}
        out = []
        for g in self.cluster.groups:
            p = states.get(g)
            out.append(
                {
                    "name": g.name,
                    "endpoint": self.serving(g) or g.replicas[0].endpoint,
                    "self": p is None,
                    "live": self.advertised(g) is not None,
                    "error": "" if p is None else p.last_error,
                    "replicas": [{"name": m.name, "endpoint": m.endpoint} for m in g.replicas],
                    # every replica's endpoint, etcd's list included (the Spark connector's
                    # failover, spark/client.py)
                    "endpoints": self.replica_endpoints(g),
                }
            )
        return out

    # --- Calling peers. ------------------------------------------------------------------------

    def _future(self, peer: PeerState, endpoint: str, method: str, args: dict[str, Any]) -> Any:
        # The probe and check-back (find_at) call peers from executor threads at once.
        with self._channels_lock:
            return self._future_locked(peer, endpoint, method, args)

    def _future_locked(
        self, peer: PeerState, endpoint: str, method: str, args: dict[str, Any]
    ) -> Any:
        if peer.channel is not None and peer.endpoint != endpoint:
            peer.channel.close()  # the group's leader moved: what its old one missed is moot
            peer.channel, peer.misses, peer.last_error = None, 0, ""
        if peer.channel is None:
            # Reconnect quickly: a peer restarting must be back in the routes within a probe
            # or two, not after gRPC's default backoff (1 s doubling to 120 s).
            backoff_ms = limits.CLUSTER_PROBE_PERIOD_MS // 4
            peer.channel = open_channel(
                endpoint,
                self.security,
                options=[
                    ("grpc.initial_reconnect_backoff_ms", backoff_ms),
                    ("grpc.min_reconnect_backoff_ms", backoff_ms),
                    ("grpc.max_reconnect_backoff_ms", limits.CLUSTER_PROBE_PERIOD_MS),
                ],
            )
            peer.endpoint = endpoint
        stub = peer.channel.unary_unary(channels.method_path(channels.ADMIN_SERVICE, method))
        timeout_s = limits.CLUSTER_PEER_CALL_TIMEOUT_MS / 1000.0
        # wait_for_ready: a channel between reconnect attempts waits for the peer within the
        # deadline instead of failing at once, so a peer that just started is not "down".
        metadata = self.security.metadata(self.now_ms())
        return stub.future(
            channels.encode(args), metadata=metadata, timeout=timeout_s, wait_for_ready=True
        )

    def _fan_out(self, method: str, args: dict[str, Any]) -> dict[str, dict[str, Any] | str]:
        """Call ``method`` on every peer group where it is served (its leader) at once; group
        name -> its reply, or why it failed."""
        out: dict[str, dict[str, Any] | str] = {}
        futures = []
        for p in self._peers:
            endpoint = self.serving(p.group)
            if endpoint is None:
                out[p.group.name] = "unreachable (no leader in etcd)"
            else:
                futures.append((p, self._future(p, endpoint, method, args)))
        for peer, fut in futures:
            try:
                out[peer.group.name] = channels.admin_reply(fut.result(), method)
            except grpc.RpcError as exc:
                status = exc.code() if isinstance(exc, grpc.Call) else None
                out[peer.group.name] = f"unreachable ({status})"
            except TxmqError as exc:  # the peer's refusal, typed by its code
                out[peer.group.name] = f"refused: {exc}"
        return out

    # --- Probing and reconciling. -------------------------------------------------------------

    def probe(self, topics: TopicRegistry) -> None:
        """Ask every peer for its topic definitions: counts misses, imports what is missing."""
        replies = self._fan_out("TopicDefinitions", {})
        for peer in self._peers:
            got = replies[peer.group.name]
            if isinstance(got, str):
                if peer.misses < limits.CLUSTER_PROBE_MISSES_MAX:
                    log.warning("cluster peer %s: %s", peer.group.name, got)
                peer.misses += 1
                peer.last_error = got
                continue
            if peer.misses >= limits.CLUSTER_PROBE_MISSES_MAX:
                log.info("cluster peer %s answers again", peer.group.name)
            peer.misses, peer.last_error = 0, ""
            self._import(topics, peer.group.name, got.get("topics", []))

    def _import(self, topics: TopicRegistry, peer: str, defs: list[dict[str, Any]]) -> None:
        now = self.now_ms()
        for d in defs[: limits.CLUSTER_RECONCILE_TOPICS_MAX]:
            name = str(d.get("name", ""))
            if self.is_tombstoned(name, now):
                continue
            try:
                if grown(topics, d):
                    was, now_queues = topics.grow(name, int(d["queues"]))
                    log.info("topic %s grown from %d to %d queues, as on cluster peer %s",
                             name, was, now_queues, peer)  # fmt: skip
                    continue
                if topics.exists(name) and not _replaces(topics, d):
                    continue
                if define(topics, d) == "created":
                    log.info("topic %s imported from cluster peer %s: %s", name, peer, d)
            except (TxmqError, KeyError, ValueError) as exc:
                log.warning("topic %r from peer %s not imported: %s", name, peer, exc)

    # --- Topic definitions: the operator's create and delete reach every member. ---------------

    def is_tombstoned(self, name: str, now_ms: int) -> bool:
        with self._lock:
            at = self._tombstones.get(name)
            if at is not None and now_ms - at > limits.CLUSTER_TOMBSTONE_MS:
                del self._tombstones[name]
                return False
            return at is not None

    def tombstone(self, name: str) -> None:
        with self._lock:
            self._tombstones[name] = self.now_ms()

    def spread_create(self, info: TopicInfo, here: str = "created") -> dict[str, str]:
        """Forward a create made here (``here``: "created" or "replaced") to every peer; member
        name -> what happened there. A peer that missed it imports it at its next probe (a
        definition is idempotent)."""
        replies = self._fan_out("TopicCreate", {**definition(info), "forwarded": True})
        out = {self.group.name: here}
        for name, got in replies.items():
            out[name] = got if isinstance(got, str) else str(got.get("result", "created"))
        return out

    def on_every_peer(self, method: str, args: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """``method`` on every peer group's leader, each of which must answer and accept it:
        group name -> its reply. For the first, checking half of a change every member must
        take (a topic's growth, a consumer group's reset) before any member makes it.

        Raises:
            PeerError: a peer is unreachable or refused, naming each and why.
        """
        replies = self._fan_out(method, args)
        bad = {n: r for n, r in replies.items() if isinstance(r, str)}
        if bad:
            raise PeerError(
                "not every cluster member can take it: "
                + "; ".join(f"{n}: {r}" for n, r in sorted(bad.items()))
            )
        return {n: r for n, r in replies.items() if not isinstance(r, str)}

    def on_peers(self, method: str, args: dict[str, Any]) -> dict[str, dict[str, Any] | str]:
        """``method`` on every peer group's leader at once: group name -> its reply, or why
        it failed (as a sentence)."""
        return self._fan_out(method, args)

    def spread_delete(self, name: str) -> dict[str, str]:
        """Forward a delete to every peer; refused unless every peer answers a probe first,
        since a member that misses a delete would give the topic back to the others.

        Raises:
            PeerError: a peer is unreachable; nothing was deleted anywhere.
        """
        probes = self._fan_out("TopicDefinitions", {})
        down = {n: r for n, r in probes.items() if isinstance(r, str)}
        if down:
            raise PeerError(
                f"cannot delete topic {name!r} while cluster members are unreachable: "
                + ", ".join(f"{n} ({r})" for n, r in down.items())
            )
        replies = self._fan_out("TopicDelete", {"name": name, "forwarded": True})
        out = {self.group.name: "deleted"}
        for peer, got in replies.items():
            out[peer] = got if isinstance(got, str) else "deleted"
        return out

    # --- Reading a peer's records: the Spark sink's ledger on a batch's home. ------------------

    def find_at(
        self, group: str, topic: str, key: str, max_count: int
    ) -> list[tuple[list[str], str]]:
        """(keys, body) of the newest records with ``key`` in ``topic`` on peer group ``group``
        (at its leader): how check-back reads a sink batch's ledger record on its home member
        (txn/ledger.py). Blocking; run in the executor.

        Raises:
            PeerError: no such peer, it has no leader, or it did not answer now.
        """
        peer = next((p for p in self._peers if p.group.name == group), None)
        endpoint = None if peer is None else self.serving(peer.group)
        if peer is None or endpoint is None:
            raise PeerError(f"cluster member {group!r} is not a peer with a leader")
        args = {"topic": topic, "key": key, "max": max_count}
        try:
            reply = channels.admin_reply(
                self._future(peer, endpoint, "MessageFind", args).result(), "MessageFind"
            )
        except grpc.RpcError as exc:
            status = exc.code() if isinstance(exc, grpc.Call) else None
            raise PeerError(f"cluster member {group!r} did not answer ({status})") from exc
        except NotFoundError as exc:
            if exc.code in (CODE_TOPIC_NOT_FOUND, CODE_NOT_FOUND):
                return []  # no such topic there yet: nothing recorded
            raise
        return [(list(m["keys"]), str(m["body"])) for m in reply["messages"]]

    def close(self) -> None:
        for p in self._peers:
            if p.channel is not None:
                p.channel.close()
                p.channel, p.endpoint = None, ""
