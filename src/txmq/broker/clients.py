"""Connected clients: sessions keyed by client id, their Telemetry streams and liveness.

Owns: which producers are live for which topics (the check-back targets), consumer groups seen,
and the per-session outbox of Telemetry commands. Must not: decide transactions.

Why topics and not a producer group name: RocketMQ 5 producers declare no group on the wire; a
producer declares the topics it publishes in its Settings. So the "producer group" of a
transaction is the set of live producers that publish its topic, and check-back asks the
producer that sent the half message first, then any other of that set.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from txmq import limits
from txmq.errors import TooManyRequestsError


@dataclass
class Session:
    client_id: str
    client_type: int = 0
    topics: set[str] = field(default_factory=set)
    groups: set[str] = field(default_factory=set)
    last_seen_ms: int = 0
    streams: int = 0
    outbox: asyncio.Queue[Any] = field(default_factory=lambda: asyncio.Queue(maxsize=1024))


class Clients:
    def __init__(self, *, expire_ms: int = 120_000) -> None:
        self.expire_ms = expire_ms
        self.sessions: dict[str, Session] = {}

    def touch(self, client_id: str, now_ms: int) -> Session:
        s = self.sessions.get(client_id)
        if s is None:
            if len(self.sessions) >= limits.CLIENTS_MAX:
                raise TooManyRequestsError(f"more than {limits.CLIENTS_MAX} clients connected")
            s = Session(client_id)
            self.sessions[client_id] = s
        s.last_seen_ms = now_ms
        return s

    def remove(self, client_id: str) -> None:
        self.sessions.pop(client_id, None)

    def expire(self, now_ms: int) -> None:
        for cid, s in list(self.sessions.items()):
            if s.streams == 0 and now_ms - s.last_seen_ms > self.expire_ms:
                del self.sessions[cid]

    def live_publishers(self, topic: str) -> list[Session]:
        return [s for s in self.sessions.values() if s.streams > 0 and topic in s.topics]

    def is_live(self, topic: str) -> bool:
        return any(True for _ in self.live_publishers(topic))

    def pick_checker(self, topic: str, preferred_client: str) -> Session | None:
        s = self.sessions.get(preferred_client)
        if s is not None and s.streams > 0 and topic in s.topics:
            return s
        live = self.live_publishers(topic)
        return live[0] if live else None
