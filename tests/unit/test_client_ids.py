"""Client-id bindings (broker/security/client_ids.py): bounded per access key and in all, and a
binding with an open Telemetry stream never given up for another key's new id.

Method: the real ClientIds with the set of client ids that "have a stream" standing in for the
sessions (the wire, with real streams: tests/integration/test_security_client_ids.py).
"""

from __future__ import annotations

import pytest

from txmq import limits
from txmq.broker.security.client_ids import ClientIds
from txmq.errors import TooManyRequestsError, UnauthorizedError


class Streams:
    """Which client ids have an open Telemetry stream (``live``), and which idle sessions the
    bindings had forgotten (``forgotten``)."""

    def __init__(self, *live: str) -> None:
        self.live = set(live)
        self.forgotten: list[str] = []

    def has_stream(self, client_id: str) -> bool:
        return client_id in self.live

    def forget_idle(self, client_id: str) -> None:
        assert client_id not in self.live, "only a session without a stream is forgotten"
        self.forgotten.append(client_id)


def test_a_flood_of_new_ids_cannot_push_out_another_keys_binding() -> None:
    streams = Streams("admin-producer")
    ids = ClientIds(streams)
    ids.bind("admin-producer", "ops")  # a live producer
    ids.bind("admin-cli", "ops")  # a command that came and went: no stream
    for n in range(limits.AUTH_CLIENT_IDS_MAX + 50):  # the flood the issue measured
        ids.bind(f"flood-{n}", "reader")
    assert ids.owner("admin-producer") == "ops" and ids.owner("admin-cli") == "ops"
    assert ids.count("reader") == limits.AUTH_CLIENT_IDS_PER_KEY_MAX
    for taken in ("admin-producer", "admin-cli"):
        with pytest.raises(UnauthorizedError, match=f"client id '{taken}' is in use by another"):
            ids.bind(taken, "reader")
    # The flood went through the flooder's own idle ids, newest kept.
    last = limits.AUTH_CLIENT_IDS_MAX + 49
    assert ids.owner(f"flood-{last}") == "reader" and ids.owner("flood-0") is None
    # ... and their sessions with them: the session table does not fill either.
    assert len(streams.forgotten) == last + 1 - limits.AUTH_CLIENT_IDS_PER_KEY_MAX


def test_a_key_whose_ids_all_have_streams_is_refused_a_new_one() -> None:
    streams = Streams()
    live = streams.live
    ids = ClientIds(streams, per_key_max=3, total_max=10)
    for n in range(3):
        ids.bind(f"p{n}", "app")
        live.add(f"p{n}")
    with pytest.raises(TooManyRequestsError, match="access key 'app' already has 3 client ids"):
        ids.bind("p3", "app")
    ids.bind("p1", "app")  # a bound id is still served
    live.discard("p1")  # its stream closed: the new id takes its place
    ids.bind("p3", "app")
    assert ids.owner("p1") is None and ids.owner("p3") == "app" and ids.count("app") == 3


def test_a_full_table_gives_up_the_largest_holders_idle_ids_never_a_streams() -> None:
    streams = Streams()
    live = streams.live
    ids = ClientIds(streams, per_key_max=3, total_max=7)
    for key, count in (("big", 3), ("mid", 2), ("ops", 2)):
        for n in range(count):
            ids.bind(f"{key}-{n}", key)
    live.update({"big-0", "big-1", "ops-0", "ops-1"})
    ids.bind("new-0", "new")  # full: "new" has none, so the largest holder's idle one goes
    assert ids.owner("big-2") is None and len(ids) == 7
    ids.bind("new-1", "new")  # full again: "new" gives up its own idle id first
    assert ids.owner("new-0") is None and ids.owner("mid-0") == "mid"
    live.update({"new-1", "mid-0", "mid-1"})
    with pytest.raises(TooManyRequestsError, match="7 client ids in use on this broker"):
        ids.bind("new-2", "new")
    assert {ids.owner(c) for c in ("big-0", "big-1", "ops-0", "ops-1")} == {"big", "ops"}


def test_a_reload_keeps_the_bindings_of_keys_still_there() -> None:
    ids = ClientIds(Streams())
    ids.bind("a-1", "a")
    ids.bind("b-1", "b")
    ids.keep_only({"a", "c"})
    assert ids.owner("a-1") == "a" and ids.owner("b-1") is None and len(ids) == 1
    ids.bind("b-1", "c")  # a removed key's ids are free again
