"""Client sessions, pure (asyncio queues, no sockets): liveness follows open Telemetry streams,
commands go to the newest stream of a session, a closed stream's end cannot reach a newer
one, check-back targets prefer the sending instance, expiry spares connected sessions, and the
live-topic snapshot is immutable."""

from __future__ import annotations

import pytest

from txmq import limits
from txmq.broker.rpc.sessions import Clients


async def test_liveness_follows_open_streams() -> None:
    clients = Clients(expire_ms=1_000)
    s = clients.touch("c1", 0)
    s.topics.add("orders")
    assert not clients.is_live("orders") and clients.live_topics() == frozenset()
    stream = s.open_stream()
    assert clients.is_live("orders") and clients.live_topics() == frozenset({"orders"})
    s.close_stream(stream)
    assert not clients.is_live("orders")


async def test_commands_go_to_the_newest_stream_and_old_ends_stay_separate() -> None:
    s = Clients().touch("c1", 0)
    old = s.open_stream()
    new = s.open_stream()
    assert s.push("check-1")
    assert new.outbox.get_nowait() == "check-1" and old.outbox.empty()
    old.outbox.put_nowait(None)  # the old stream ending
    s.close_stream(old)
    assert s.push("check-2")
    assert new.outbox.get_nowait() == "check-2", "the newer stream keeps working"
    s.close_stream(new)
    assert not s.push("check-3"), "no stream, no command"
    with pytest.raises(AssertionError):
        s.close_stream(new)


async def test_push_is_bounded_per_stream() -> None:
    s = Clients().touch("c1", 0)
    s.open_stream()
    for i in range(limits.TELEMETRY_OUTBOX_MAX):
        assert s.push(i)
    assert not s.push("one too many")


async def test_checker_prefers_the_sender_then_any_live_publisher() -> None:
    clients = Clients()
    a, b = clients.touch("a", 0), clients.touch("b", 0)
    for s in (a, b):
        s.topics.add("orders")
        s.open_stream()
    assert clients.pick_checker("orders", "b") is b
    assert clients.pick_checker("orders", "gone") in (a, b)
    assert clients.pick_checker("other", "a") is None
    clients.note_publisher("a", "other")
    assert clients.pick_checker("other", "b") is a


async def test_expiry_spares_connected_and_recent_sessions() -> None:
    clients = Clients(expire_ms=1_000)
    clients.touch("idle", 0)
    clients.touch("streaming", 0).open_stream()
    clients.touch("recent", 900)
    assert clients.expire(1_500) == ["idle"]
    assert set(clients.sessions) == {"streaming", "recent"}
    clients.remove("recent")
    assert set(clients.sessions) == {"streaming"}


async def test_live_subscribers_follow_open_streams_and_goodbyes() -> None:
    """GroupDelete's snapshot: a group's consumers with an open Telemetry stream, rebuilt when a
    stream opens or closes (``streams_changed``) and when a client says goodbye."""
    clients = Clients()
    s = clients.touch("c1", 0)
    clients.note_subscriptions(s, "g", {"orders"})
    assert clients.live_subscribers == {}, "subscribed, but no stream open"
    stream = s.open_stream()
    clients.streams_changed()
    assert clients.live_subscribers == {"g": ("c1",)}
    s.close_stream(stream)
    clients.streams_changed()
    assert clients.live_subscribers == {} and ("g", "orders") in clients.subscribed
    s.open_stream()
    clients.streams_changed()
    clients.remove("c1")
    assert clients.live_subscribers == {} and clients.subscribed == frozenset()
