"""Which access key owns each client id, so that no user can act under another user's client id.

Owns: the bindings (a client id belongs to the first access key that used it), their bounds and
what gives way when they are full. Event loop only. Must not: know sessions beyond ``Streams``
(txmq/broker/rpc/sessions.py owns the sessions and their Telemetry streams).

Why bind at all: the broker asks a producer's client id to check back its transactions, through
the newest Telemetry stream opened under that id; a user that could open one under another
user's id would be asked for, and could answer, that user's check-backs.

The bounds, and why they are per access key: a remembered binding costs memory, so there are at
most ``AUTH_CLIENT_IDS_MAX``; with one shared table, a user creating new client ids pushed out
the oldest bindings, an admin's included, and could then use that admin's client id. So each
access key holds at most ``AUTH_CLIENT_IDS_PER_KEY_MAX`` (far below the total), and a new id
makes room only among bindings without an open Telemetry stream:
- a key at its own bound gives up its own least recently used binding without a stream (the CLI
  and the Spark connector use a fresh client id per process or per read, so a long-lived user
  goes through many); when every one of its bindings has a stream, the new id is refused
  (TOO_MANY_REQUESTS, naming the key and the bound);
- when the whole table is full (many keys near their bound), the new id's own key gives up one
  first, else the key holding the most bindings (one user cannot get there alone, so that is
  never a key the others can push around); when none has one without a stream: refused.
A binding with an open Telemetry stream is never given up for another key's new id. A session
without a stream whose binding is given up is forgotten with it, so a user's sessions stay
within its bindings too, and the session table (CLIENTS_MAX) is not filled by one user.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection
from typing import Protocol

from txmq import limits
from txmq.errors import TooManyRequestsError, UnauthorizedError, invariant


class Streams(Protocol):
    """What the bindings ask of the sessions (``Clients`` in txmq/broker/rpc/sessions.py)."""

    def has_stream(self, client_id: str) -> bool:
        """Whether ``client_id`` has an open Telemetry stream now."""
        ...

    def forget_idle(self, client_id: str) -> None:
        """Forget the session of ``client_id`` if it has no open stream."""
        ...


class NoStreams:
    """A broker part with no sessions of its own (a follower forwards them to its leader)."""

    def has_stream(self, client_id: str) -> bool:
        return False

    def forget_idle(self, client_id: str) -> None:
        pass


class ClientIds:
    """Client id -> owning access key, bounded per key and in all (see the module docstring)."""

    def __init__(
        self,
        streams: Streams,
        *,
        per_key_max: int = limits.AUTH_CLIENT_IDS_PER_KEY_MAX,
        total_max: int = limits.AUTH_CLIENT_IDS_MAX,
    ) -> None:
        invariant(0 < per_key_max < total_max, "one key cannot fill the table alone")
        self.streams = streams
        self.per_key_max = per_key_max
        self.total_max = total_max
        self._owner: dict[str, str] = {}
        # Access key -> its client ids, least recently used first.
        self._by_key: dict[str, OrderedDict[str, None]] = {}

    def __len__(self) -> int:
        return len(self._owner)

    def owner(self, client_id: str) -> str | None:
        return self._owner.get(client_id)

    def count(self, access_key: str) -> int:
        return len(self._by_key.get(access_key, ()))

    def bind(self, client_id: str, access_key: str) -> None:
        """Use ``client_id`` as ``access_key``: bound to it if new, refused if another key's.

        Raises:
            UnauthorizedError: the client id is bound to another access key.
            TooManyRequestsError: a new client id, and no room without giving up a binding
                with an open Telemetry stream.
        """
        owner = self._owner.get(client_id)
        if owner is not None:
            if owner != access_key:
                raise UnauthorizedError(f"client id {client_id!r} is in use by another access key")
            self._by_key[access_key].move_to_end(client_id)
            return
        self._make_room(client_id, access_key)
        self._owner[client_id] = access_key
        self._by_key.setdefault(access_key, OrderedDict())[client_id] = None
        invariant(len(self._owner) <= self.total_max, "bindings stay within their bound")

    def keep_only(self, access_keys: Collection[str]) -> None:
        """Forget the bindings of access keys no longer in the rules (a reload)."""
        for key in [k for k in self._by_key if k not in access_keys]:
            for client_id in self._by_key.pop(key):
                del self._owner[client_id]

    def _make_room(self, client_id: str, access_key: str) -> None:
        """Give up one idle binding when ``access_key`` is at its bound or the table is full.

        Raises:
            TooManyRequestsError: none can be given up (each has an open Telemetry stream).
        """
        if self.count(access_key) >= self.per_key_max:
            if self._give_up_one(access_key):
                return
            raise TooManyRequestsError(
                f"access key {access_key!r} already has {self.per_key_max} client ids in use, "
                f"each with an open Telemetry stream: new client id {client_id!r} refused "
                "until one of them closes"
            )
        if len(self._owner) < self.total_max:
            return
        if self._give_up_one(access_key) or self._give_up_one(self._largest()):
            return
        raise TooManyRequestsError(
            f"{self.total_max} client ids in use on this broker, none free to give up: new "
            f"client id {client_id!r} of {access_key!r} refused"
        )

    def _largest(self) -> str:
        """The access key holding the most bindings (the table is full: there is one)."""
        return max(self._by_key, key=lambda k: len(self._by_key[k]))

    def _give_up_one(self, access_key: str) -> bool:
        """Forget the least recently used binding of ``access_key`` without an open Telemetry
        stream; False when it has none."""
        ids = self._by_key.get(access_key)
        if not ids:
            return False
        has_stream = self.streams.has_stream
        idle = next((c for c in ids if not has_stream(c)), None)  # at most per_key_max
        if idle is None:
            return False
        del ids[idle]
        del self._owner[idle]
        if not ids:
            del self._by_key[access_key]
        self.streams.forget_idle(idle)
        return True
