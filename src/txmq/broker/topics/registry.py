"""Topic registry: names, queue counts and message types, persisted in ``topics.json``.

Owns: creating, auto-creating, listing, growing and deleting topics. Writes are atomic (temp
file, fsync, rename) so a crash leaves the old or the new registry, never half of one.
Must not: touch messages; deleting a topic only removes it from routing (its records age out of
the commit log through retention).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path

from txmq import limits
from txmq.errors import BadRequestError, ConfigError, TooManyRequestsError, TopicNotFoundError
from txmq.model import MessageType
from txmq.protocol.mapping import validate_topic
from txmq.store.files.disk import Disk


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    queue_count: int
    message_type: MessageType
    # Auto-created topics accept every message type: the first sender should not fix the type
    # of a topic nobody declared. Topics created with an explicit type enforce it.
    accepts_all: bool = False


def _load(path: Path, raw: bytes) -> list[tuple[TopicInfo, bool]]:
    """The registry file's topics, each with whether it is an auto-created topic nothing was
    ever written to (``"unwritten"``; files from before that key: written).

    Raises:
        ConfigError: the file is not a registry this broker wrote (one line, no traceback:
            an operator restores it from a backup or removes it and recreates the topics).
    """
    try:
        rows = json.loads(raw)
        if not isinstance(rows, list):
            raise ValueError("not a list of topics")
        return [
            (
                TopicInfo(
                    str(r["name"]), int(r["queues"]), MessageType(r["type"]), bool(r.get("all"))
                ),
                bool(r.get("unwritten", False)),
            )
            for r in rows
        ]
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path} is not a valid topic registry ({exc})") from exc


def _check(name: str, queue_count: int) -> None:
    validate_topic(name, allow_system=name.startswith("%DLQ%"))
    if not 1 <= queue_count <= limits.QUEUES_PER_TOPIC_MAX:
        raise BadRequestError(f"queue count must be 1..{limits.QUEUES_PER_TOPIC_MAX}")


class TopicRegistry:
    def __init__(
        self,
        path: Path,
        disk: Disk,
        *,
        auto_create: bool,
        default_queues: int,
        implicit: frozenset[str] = frozenset(),
        topics_max: int = limits.TOPICS_MAX,
    ) -> None:
        self.path = path
        self.disk = disk
        self.auto_create = auto_create
        # Topics the broker itself needs: created on first use even when auto_create is off.
        self.implicit = implicit
        self.default_queues = default_queues
        # A parameter, not read from limits at each create: a test bounds a registry to a few.
        self.topics_max = topics_max
        self._lock = threading.Lock()
        self._topics: dict[str, TopicInfo] = {}
        # Auto-created topics no message was ever written to: an operator's explicit definition
        # may still replace them (``replace_unwritten``, ADR 0004). Persisted, so a restart
        # cannot forget that a topic was written to.
        self._unwritten: set[str] = set()
        if disk.exists(path):
            for info, unwritten in _load(path, disk.read_all(path)):
                self._topics[info.name] = info
                if unwritten:
                    self._unwritten.add(info.name)

    def _save(self) -> None:
        data = [
            {
                "name": t.name,
                "queues": t.queue_count,
                "type": t.message_type.value,
                "all": t.accepts_all,
                **({"unwritten": True} if t.name in self._unwritten else {}),
            }
            for t in self._topics.values()
        ]
        self.disk.write_atomic(self.path, json.dumps(data, indent=1).encode())

    def exists(self, name: str) -> bool:
        return name in self._topics

    def get(self, name: str) -> TopicInfo:
        info = self._topics.get(name)
        if info is None:
            raise TopicNotFoundError(name)
        return info

    def settled(self, name: str) -> bool:
        """Known, and ``ensure(name, writing=True)`` will not write ``topics.json``."""
        return name in self._topics and name not in self._unwritten

    def ensure(
        self, name: str, message_type: MessageType = MessageType.NORMAL, *, writing: bool = False
    ) -> TopicInfo:
        """Return the topic, creating it when auto-create is on (with the sender's type).

        ``writing``: the caller will store a message in it with the returned definition, so an
        auto-created topic is marked written (saved) first, under the lock that
        ``replace_unwritten`` holds: the definition a writer gets can no longer be replaced.
        Writing to an unsettled topic writes ``topics.json``: off the event loop (``settled``).
        """
        info = self._topics.get(name)
        if info is not None and not (writing and name in self._unwritten):
            return info
        if info is None and not self.auto_create and name not in self.implicit:
            raise TopicNotFoundError(name)
        if info is None:  # created written when a writer creates it: one save, not two
            self.create(
                name,
                self.default_queues,
                message_type,
                exist_ok=True,
                accepts_all=True,
                unwritten=not writing,
            )
        with self._lock:
            info = self._topics.get(name)
            if info is None:  # deleted meanwhile: as if it had never been there
                raise TopicNotFoundError(name)
            if writing and name in self._unwritten:
                self._unwritten.discard(name)
                self._save()
            return info

    def replace_unwritten(self, info: TopicInfo) -> bool:
        """Replace an auto-created topic nothing was written to with ``info`` (an explicit
        definition); False, changing nothing, if the topic is another kind or was written to."""
        assert not info.accepts_all, "only an explicit definition replaces an auto-created one"
        _check(info.name, info.queue_count)
        with self._lock:
            old = self._topics.get(info.name)
            if old is None or not old.accepts_all or info.name not in self._unwritten:
                return False
            self._topics[info.name] = info
            self._unwritten.discard(info.name)
            self._save()
            return True

    def mirror(self, info: TopicInfo) -> None:
        """Take a replica group leader's definition as it is (a follower's copy: the leader
        decided, for the same log). A copied auto-created topic counts as written: a promoted
        follower cannot tell whether its old leader wrote to it."""
        _check(info.name, info.queue_count)
        with self._lock:
            self._topics[info.name] = info
            self._unwritten.discard(info.name)
            self._save()

    def create(
        self,
        name: str,
        queue_count: int,
        message_type: MessageType,
        *,
        exist_ok: bool = False,
        accepts_all: bool = False,
        unwritten: bool = True,
    ) -> TopicInfo:
        """Create a topic (``exist_ok``: or return the existing one). An auto-created one
        (``accepts_all``) starts ``unwritten`` unless its creator is about to write to it."""
        _check(name, queue_count)
        with self._lock:
            existing = self._topics.get(name)
            if existing is not None:
                if exist_ok:
                    return existing
                raise BadRequestError(f"topic {name!r} already exists")
            if len(self._topics) >= self.topics_max:
                raise TooManyRequestsError(f"this broker already has {self.topics_max} topics")
            info = TopicInfo(name, queue_count, message_type, accepts_all)
            self._topics[name] = info
            if accepts_all and unwritten:
                self._unwritten.add(name)
            self._save()
            return info

    def grow(self, name: str, queue_count: int, *, dry_run: bool = False) -> tuple[int, int]:
        """Give topic ``name`` ``queue_count`` queues; (old count, new count). Only growing:
        queues keep their ids and offsets, the new ones start empty. The same count again
        changes nothing; ``dry_run`` checks without changing.

        Raises:
            TopicNotFoundError: no such topic.
            BadRequestError: fewer queues than it has (a queue holding messages cannot go), or
                a count out of 1..QUEUES_PER_TOPIC_MAX.
        """
        _check(name, queue_count)
        with self._lock:
            old = self._topics.get(name)
            if old is None:
                raise TopicNotFoundError(name)
            if queue_count < old.queue_count:
                raise BadRequestError(
                    f"topic {name!r} has {old.queue_count} queues: a topic only grows "
                    f"(asked for {queue_count})"
                )
            if queue_count > old.queue_count and not dry_run:
                self._topics[name] = TopicInfo(name, queue_count, old.message_type, old.accepts_all)
                try:
                    self._save()
                except BaseException:
                    self._topics[name] = old  # not on disk: not in effect either
                    raise
            return old.queue_count, queue_count

    def delete(self, name: str) -> None:
        with self._lock:
            if name not in self._topics:
                raise TopicNotFoundError(name)
            del self._topics[name]
            self._unwritten.discard(name)
            self._save()

    def list(self) -> list[TopicInfo]:
        return sorted(self._topics.values(), key=lambda t: t.name)
