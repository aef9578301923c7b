"""The dashboard's session table, form tokens and sign-in limit, with their clock moved by the
test instead of waited for (sessions.py takes the clock as an argument).

Goal: a flood of sign-ins never pushes a live session out (refused when full, per address and
in total); anonymous sessions make room for each other, never for a signed-in one; a token
expires, works once, only in its session and for its action and target; the attempt limit
slides with time and refuses new addresses when its table is full of recent ones.
"""

from __future__ import annotations

import pytest

from txmq.dashboard.link import Credentials
from txmq.dashboard.sessions import (
    SESSION_IDLE_S,
    AttemptLimit,
    Sessions,
    SessionsFullError,
)

OPS = Credentials("ops", "ops-secret-0123456789abcdef")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_flood_of_sign_ins_is_refused_instead_of_evicting_sessions() -> None:
    clock = Clock()
    table = Sessions(signed_max=4, per_address_max=2, anonymous_max=3, clock=clock)
    mine = table.sign_in("10.0.0.1", OPS)
    table.sign_in("10.0.0.1", OPS)
    with pytest.raises(SessionsFullError, match=r"10\.0\.0\.1 already holds 2"):
        table.sign_in("10.0.0.1", OPS)
    table.sign_in("10.0.0.2", OPS)
    table.sign_in("10.0.0.3", OPS)
    with pytest.raises(SessionsFullError, match="maximum of 4"):
        table.sign_in("10.0.0.4", OPS)
    for i in range(10):  # anonymous visitors crowd each other out, not the signed-in
        table.start_anonymous(f"10.1.0.{i}")
    assert len(table.anonymous) == 3
    assert table.get(mine.sid) is mine
    # Idle sessions end, which makes room.
    clock.now += SESSION_IDLE_S / 2
    assert table.get(mine.sid) is mine  # seen: its idle time restarts
    clock.now += SESSION_IDLE_S * 0.75
    assert table.sign_in("10.0.0.4", OPS).credentials == OPS
    assert table.get(mine.sid) is mine
    assert len(table.signed) == 2


def test_a_token_expires_works_once_and_only_where_it_was_issued() -> None:
    clock = Clock()
    table = Sessions(ttl_s=300, clock=clock)
    alice, bob = table.sign_in("a", OPS), table.sign_in("b", OPS)
    token = table.issue(alice, "topic-delete", "orders")
    assert not table.redeem(bob, token, "topic-delete", "orders")
    assert not table.redeem(alice, token, "topic-create", "orders")  # spends it
    assert not table.redeem(alice, token, "topic-delete", "orders")
    token = table.issue(alice, "topic-delete", "orders")
    assert not table.redeem(alice, token, "topic-delete", "payments")
    token = table.issue(alice, "topic-delete", "orders")
    assert not table.redeem(bob, token, "topic-delete", "orders")  # leaves alice's alone
    assert table.redeem(alice, token, "topic-delete", "orders")
    assert not table.redeem(alice, token, "topic-delete", "orders")
    token = table.issue(alice, "topic-delete", "orders")
    clock.now += 300
    assert not table.redeem(alice, token, "topic-delete", "orders")
    assert not table.redeem(None, table.issue(alice, "a", "b"), "a", "b")
    # Signing in again replaces the session: the old cookie is worth nothing.
    again = table.sign_in("a", OPS, replaces=alice.sid)
    assert table.get(alice.sid) is None and table.get(again.sid) is again


def test_the_attempt_limit_slides_and_refuses_new_addresses_when_full() -> None:
    clock = Clock()
    limit = AttemptLimit(attempts_max=3, window_s=60, addresses_max=2, clock=clock)
    assert [limit.allow("a") for _ in range(4)] == [True, True, True, False]
    assert limit.retry_after_s("a") == 61
    clock.now += 30
    assert limit.allow("b")
    assert not limit.allow("c")  # the table is full of addresses seen within the window
    clock.now += 31
    assert limit.allow("a")  # a's attempts slid out of the window
    assert not limit.allow("c")
    clock.now += 30
    assert limit.allow("c")  # b has been quiet for a window: it made room
