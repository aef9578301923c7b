"""Connected clients: sessions keyed by client id, their Telemetry streams and liveness.

Owns: which producers are live for which topics (the check-back targets), consumer groups seen,
and one outbox of Telemetry commands per open stream. Must not: decide transactions, or be
touched from executor threads (it belongs to the event loop; executor code gets a snapshot
from ``live_topics``).

Why topics and not a producer group name: RocketMQ 5 producers declare no group on the wire; a
producer declares the topics it publishes in its Settings. So the "producer group" of a
transaction is the set of live producers that publish its topic, and check-back asks the
producer that sent the half message first, then any other of that set.

Why one outbox per stream, not per session: the official client rebuilds its Telemetry stream
(same client id) when a settings write fails, and cancels the old stream only after opening the
new one. With a shared outbox, the old stream's end-of-stream marker would end the new stream
too, silently cutting the only check-back channel of a live producer. So each stream has its
own queue, and commands go to the newest stream of a session.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field
from typing import Any

from txmq import limits
from txmq.errors import TooManyRequestsError, invariant

_stream_ids = itertools.count(1)


@dataclass
class Stream:
    """One open Telemetry stream. ``None`` in the outbox ends the stream's writer."""

    stream_id: int
    outbox: asyncio.Queue[Any | None] = field(default_factory=asyncio.Queue)


@dataclass
class Session:
    client_id: str
    client_type: int = 0
    topics: set[str] = field(default_factory=set)
    groups: set[str] = field(default_factory=set)
    # (consumer group, topic) pairs this client's Settings subscribe to.
    subscriptions: frozenset[tuple[str, str]] = frozenset()
    last_seen_ms: int = 0
    # Settings messages received on its Telemetry streams (the official clients send one at
    # start, repeat it a second later, then every few minutes): what an operator, or a test,
    # reads to know the client has applied the broker's answer.
    settings: int = 0
    # What its last Settings said of it (UA: language, version, hostname), and the peer
    # address of its newest Telemetry stream, for operators (ClientList, admin/clients.py).
    language: int = 0  # the RocketMQ Language enum, as ``client_type`` is ClientType
    version: str = ""
    hostname: str = ""
    address: str = ""
    # Open Telemetry streams by id, oldest first (dicts keep insertion order).
    streams: dict[int, Stream] = field(default_factory=dict)

    @property
    def connected(self) -> bool:
        return bool(self.streams)

    @property
    def newest_stream(self) -> Stream | None:
        return next(reversed(self.streams.values()), None)

    def open_stream(self) -> Stream:
        stream = Stream(next(_stream_ids))
        self.streams[stream.stream_id] = stream
        return stream

    def close_stream(self, stream: Stream) -> None:
        removed = self.streams.pop(stream.stream_id, None)
        invariant(removed is stream, "a Telemetry stream is closed once, by its own handler")

    def push(self, command: Any) -> bool:
        """Queue a command on the newest stream; False when none is open or its outbox is full."""
        stream = self.newest_stream
        if stream is None or stream.outbox.qsize() >= limits.TELEMETRY_OUTBOX_MAX:
            return False
        stream.outbox.put_nowait(command)
        return True


class Clients:
    def __init__(self, *, expire_ms: int = 120_000) -> None:
        invariant(expire_ms > 0, "sessions need a positive expiry")
        self.expire_ms = expire_ms
        self.sessions: dict[str, Session] = {}
        # Every session's subscriptions, rebuilt on change: an immutable snapshot that executor
        # threads (lag for the admin channel and metrics) may read while the loop changes
        # the sessions.
        self.subscribed: frozenset[tuple[str, str]] = frozenset()
        # The same for sessions with an open Telemetry stream: group -> their client ids,
        # replaced whole on change (GroupDelete refuses a group a live consumer uses).
        self.live_subscribers: dict[str, tuple[str, ...]] = {}

    def touch(self, client_id: str, now_ms: int) -> Session:
        invariant(bool(client_id), "sessions are keyed by a non-empty client id")
        s = self.sessions.get(client_id)
        if s is None:
            if len(self.sessions) >= limits.CLIENTS_MAX:
                raise TooManyRequestsError(f"more than {limits.CLIENTS_MAX} clients connected")
            s = Session(client_id)
            self.sessions[client_id] = s
        s.last_seen_ms = max(s.last_seen_ms, now_ms)
        return s

    def note_publisher(self, client_id: str, topic: str) -> None:
        """A client sent a transaction half message to ``topic``: it can answer check-backs for
        it, even if its Settings did not list the topic (the official client re-sends Settings
        with newly used topics only every 5 minutes)."""
        s = self.sessions.get(client_id)
        if s is not None:
            s.topics.add(topic)

    def note_subscriptions(self, session: Session, group: str, topics: set[str]) -> None:
        """A consumer's Settings: ``group`` consumes ``topics`` (replacing what it said before)."""
        invariant(bool(group), "a subscription names its consumer group")
        session.subscriptions = frozenset((group, t) for t in topics if t)
        self._rebuild_subscribed()

    def _rebuild_subscribed(self) -> None:
        self.subscribed = frozenset(p for s in self.sessions.values() for p in s.subscriptions)
        live: dict[str, set[str]] = {}
        for s in self.sessions.values():
            if s.connected:
                for group, _topic in s.subscriptions:
                    live.setdefault(group, set()).add(s.client_id)
        self.live_subscribers = {g: tuple(sorted(ids)) for g, ids in live.items()}

    def streams_changed(self) -> None:
        """A Telemetry stream of a session opened or closed: rebuild the snapshots."""
        self._rebuild_subscribed()

    def remove(self, client_id: str) -> None:
        """Forget a client that said goodbye. Its open streams end on their own; until then
        the session object stays reachable from their handlers, not from here."""
        gone = self.sessions.pop(client_id, None)
        if gone is not None and gone.subscriptions:
            self._rebuild_subscribed()

    def expire(self, now_ms: int) -> list[str]:
        """Drop sessions with no open stream and no heartbeat for ``expire_ms``."""
        gone = [
            cid
            for cid, s in self.sessions.items()
            if not s.connected and now_ms - s.last_seen_ms > self.expire_ms
        ]
        for cid in gone:
            del self.sessions[cid]
        if gone:
            self._rebuild_subscribed()
        return gone

    def has_stream(self, client_id: str) -> bool:
        """Whether ``client_id`` has an open Telemetry stream (its binding to an access key is
        then kept whatever other keys do, broker/security/client_ids.py)."""
        s = self.sessions.get(client_id)
        return s is not None and s.connected

    def forget_idle(self, client_id: str) -> None:
        """Forget a session without an open stream whose client id's binding was given up
        (client_ids.py): a user's sessions stay within its bound number of client ids."""
        s = self.sessions.get(client_id)
        if s is not None and not s.connected:
            self.remove(client_id)

    def live_publishers(self, topic: str) -> list[Session]:
        return [s for s in self.sessions.values() if s.connected and topic in s.topics]

    def live_topics(self) -> frozenset[str]:
        """Topics with at least one producer on an open stream: an immutable snapshot that
        executor threads may read while the loop keeps changing the sessions."""
        return frozenset(t for s in self.sessions.values() if s.connected for t in s.topics)

    def is_live(self, topic: str) -> bool:
        return bool(self.live_publishers(topic))

    def pick_checker(self, topic: str, preferred_client: str) -> Session | None:
        s = self.sessions.get(preferred_client)
        if s is not None and s.connected and topic in s.topics:
            return s
        live = self.live_publishers(topic)
        return live[0] if live else None
