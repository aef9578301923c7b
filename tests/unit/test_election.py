"""Leadership and in-sync set rules of a replica group (txmq.broker.leadership.election), clock
injected."""

from __future__ import annotations

import random

import pytest

from txmq import limits
from txmq.broker.leadership.election import Election, InSync, Step
from txmq.coordination.etcd import KeyValue
from txmq.coordination.keys import Confirmed, Leader, decode_confirmed, decode_insync, encode_insync
from txmq.errors import RemoteProtocolError

TTL = limits.REPLICA_LEASE_TTL_MS


def _lead(e: Election, now: int, epoch: int = 7) -> None:
    assert e.next_step(now) is Step.OBSERVE
    e.observed(now, None)
    assert e.next_step(now) is Step.GRANT
    e.granted(now, lease_id=42, ttl_ms=TTL)
    assert e.next_step(now) is Step.CAMPAIGN
    e.observed(now, Leader(e.me, "h:1", epoch, lease=42))
    assert e.leads(now)


def test_a_replica_observes_grants_campaigns_then_leads_and_renews() -> None:
    e = Election("r0")
    _lead(e, 1_000)
    # The loop's steps only wait while it leads (until the lease would lapse); the keepalive
    # thread renews it a period after the grant was sent, and every period after that.
    assert e.next_step(1_000) is Step.WAIT
    assert e.due_ms == 1_000 + TTL - limits.REPLICA_LEASE_SAFETY_MS
    due = e.renewal_at()
    assert due == 1_000 + limits.REPLICA_KEEPALIVE_PERIOD_MS
    assert e.renewal_due(due - 1) is None
    assert e.renewal_due(due) == 42
    e.kept_alive(due, TTL, 42)
    assert e.lease_deadline_ms == due + TTL - limits.REPLICA_LEASE_SAFETY_MS
    assert e.renewal_at() == due + limits.REPLICA_KEEPALIVE_PERIOD_MS
    assert e.next_step(due + 1) is Step.WAIT and e.due_ms == e.lease_deadline_ms


def test_a_keepalive_answer_extends_the_lease_from_when_it_was_sent_however_late() -> None:
    """The keepalive thread's answer may come long after it sent the request (a slow etcd, a
    starved process): the lease runs from the send, never from the answer."""
    e = Election("r0")
    _lead(e, 0)
    sent = limits.REPLICA_KEEPALIVE_PERIOD_MS
    answered = sent + TTL  # later than the lease the request renews would last
    e.kept_alive(sent, TTL, 42)
    assert not e.may_acknowledge(answered)
    assert e.may_acknowledge(sent + TTL - limits.REPLICA_LEASE_SAFETY_MS - 1)
    # An older answer, arriving after a newer one, takes nothing back.
    e.kept_alive(sent - 500, TTL, 42)
    assert e.lease_deadline_ms == sent + TTL - limits.REPLICA_LEASE_SAFETY_MS


def test_a_keepalive_answer_for_a_lease_no_longer_held_changes_nothing() -> None:
    e = Election("r0")
    _lead(e, 0)
    deadline = TTL - limits.REPLICA_LEASE_SAFETY_MS
    assert e.renewal_due(deadline) is None  # lapsed by our clock: nothing to renew
    assert e.next_step(deadline) is Step.OBSERVE  # the loop drops it
    e.kept_alive(deadline - 10, TTL, 42)  # the keepalive thread's answer, sent before
    assert e.lease_id is None and not e.leads(deadline + 1)
    # Nor does an answer about an older lease touch the one granted since.
    e.observed(deadline, None)
    e.granted(deadline, lease_id=43, ttl_ms=TTL)
    e.kept_alive(deadline, 0, 42)
    assert e.lease_id == 43


def test_a_leader_stops_acknowledging_before_etcd_could_expire_its_lease() -> None:
    e = Election("r0")
    sent = 1_000
    _lead(e, sent)
    # etcd expires the lease no earlier than sent + TTL (it received the grant after we sent
    # it); a paused leader that resumes at any later time must not acknowledge.
    assert e.may_acknowledge(sent + TTL - limits.REPLICA_LEASE_SAFETY_MS - 1)
    for resumed in (sent + TTL - limits.REPLICA_LEASE_SAFETY_MS, sent + TTL, sent + 60_000):
        assert not e.may_acknowledge(resumed)
    # Its first step after resuming drops the lease and reads the key again.
    assert e.next_step(sent + 60_000) is Step.OBSERVE
    assert e.lease_id is None and e.leader is None


def test_a_keepalive_answered_with_no_ttl_steps_down_at_once() -> None:
    e = Election("r0")
    _lead(e, 0)
    e.kept_alive(500, 0, 42)
    assert not e.leads(501)
    assert e.next_step(501) is Step.OBSERVE


def test_a_follower_waits_while_someone_leads_and_campaigns_once_the_key_is_gone() -> None:
    e = Election("r1")
    assert e.next_step(0) is Step.OBSERVE
    e.observed(0, Leader("r0", "h:1", 5))
    assert e.next_step(1) is Step.WAIT and not e.leads(1)
    assert e.next_step(limits.REPLICA_OBSERVE_PERIOD_MS) is Step.OBSERVE
    e.observed(limits.REPLICA_OBSERVE_PERIOD_MS, None)
    assert e.next_step(limits.REPLICA_OBSERVE_PERIOD_MS) is Step.GRANT


def test_a_key_naming_this_replica_under_another_lease_is_not_led_with() -> None:
    """A replica killed -9 while leading and restarted within its lease's TTL finds its own
    name on the leader key, held by the dead process's lease. If etcd did not answer its first
    read it may have been granted a lease of its own by the time its campaign loses to that
    key: before, it then led on a key etcd deletes when the dead lease expires (whatever its
    keepalives), having never read the in-sync set; it waits for the key to go instead."""
    e = Election("r1")
    assert e.next_step(0) is Step.OBSERVE
    e.observed(0, None)  # a read that raced the dead process's put: no key seen
    assert e.next_step(1) is Step.GRANT
    e.granted(1, lease_id=8, ttl_ms=TTL)
    assert e.next_step(1) is Step.CAMPAIGN
    stale = Leader("r1", "h:1", 9, lease=5)
    e.observed(2, stale)
    assert not e.leads(2) and not e.may_acknowledge(2)
    assert e.next_step(3) is Step.WAIT
    e.observed(limits.REPLICA_OBSERVE_PERIOD_MS, stale)
    assert not e.leads(limits.REPLICA_OBSERVE_PERIOD_MS) and e.lease_id == 8
    gone = 2 * limits.REPLICA_OBSERVE_PERIOD_MS
    e.observed(gone, None)  # etcd expired the dead process's lease: the key is gone
    assert e.next_step(gone) is Step.CAMPAIGN  # with its own lease, kept meanwhile
    e.observed(gone, Leader("r1", "h:1", 30, lease=8))
    assert e.leads(gone)


def test_seeing_another_leader_while_leading_steps_down() -> None:
    e = Election("r0")
    _lead(e, 0, epoch=5)
    e.observed(10, Leader("r1", "h:2", 9))
    assert not e.leads(10) and e.lease_id is None


class FixedDraws:
    """The election's random source: the given draws in turn, the last one repeated."""

    def __init__(self, *draws: float) -> None:
        self.draws = list(draws)

    def __call__(self) -> float:
        return self.draws.pop(0) if len(self.draws) > 1 else self.draws[0]


FIRST, MOST = limits.COORDINATION_RETRY_FIRST_MS, limits.COORDINATION_RETRY_MAX_MS


@pytest.mark.parametrize("failing", [Step.GRANT, Step.CAMPAIGN, Step.OBSERVE])
def test_after_etcd_did_not_answer_no_step_comes_before_the_backoff(failing: Step) -> None:
    """Whatever step failed, the next is WAIT until the backoff delay passed, then that step
    again: a replica that cannot reach etcd does not call it in a loop (it did: after a failed
    grant, GRANT was due again at once, 3,000-4,500 calls a second)."""
    e = Election("r0", rand=FixedDraws(0.999))
    now = 0
    if failing is not Step.OBSERVE:
        assert e.next_step(now) is Step.OBSERVE
        e.observed(now, None)
    if failing is Step.CAMPAIGN:
        e.granted(now, lease_id=8, ttl_ms=TTL)
    assert e.next_step(now, eligible=True) is failing
    e.unreachable(now)
    assert e.next_step(now, eligible=True) is Step.WAIT
    assert now + FIRST // 2 <= e.due_ms <= now + FIRST
    assert e.next_step(e.due_ms - 1, eligible=True) is Step.WAIT
    assert e.next_step(e.due_ms, eligible=True) is failing


def test_the_backoff_grows_with_each_failure_in_a_row_is_bounded_and_resets() -> None:
    e = Election("r0", rand=FixedDraws(0.999))
    now, delays = 0, []
    for _ in range(8):
        assert e.next_step(now) is Step.OBSERVE
        e.unreachable(now)
        assert e.next_step(now) is Step.WAIT
        delays.append(e.due_ms - now)
        now = e.due_ms
    bounds = [min(MOST, FIRST << n) for n in range(8)]
    assert all(b * 0.99 <= d <= b for d, b in zip(delays, bounds, strict=True)), delays
    assert max(delays) <= MOST and delays[-1] > MOST * 0.99  # grown to the bound, held there
    e.observed(now, None)  # an answer: the next failure starts from the first delay again
    e.unreachable(now)
    assert e.due_ms - now <= FIRST


def test_backoff_delays_are_jittered_within_the_upper_half_of_their_bound() -> None:
    """Replicas that lost etcd together must not retry in step: each delay is drawn from
    [bound / 2, bound] (a seeded source here)."""
    delays = []
    for seed in range(20):
        e = Election("r0", rand=random.Random(seed).random)
        for _ in range(5):
            e.unreachable(0)
        delays.append(e.retry_ms)  # the fifth delay: at the bound
    assert all(MOST // 2 <= d <= MOST for d in delays), delays
    assert len(set(delays)) > 10, delays  # spread, not one value
    low = Election("r0", rand=FixedDraws(0.0))
    low.unreachable(0)
    assert low.retry_ms == FIRST // 2  # never sooner than half the bound


def test_a_replica_heard_by_neither_etcd_nor_a_leader_for_a_lease_is_isolated() -> None:
    """ADR 0006, "a replica cut off": such a replica closes its client port."""
    e = Election("r1")
    assert e.isolated(0, None)  # nothing heard yet
    e.observed(100, Leader("r0", "h:1", 5))
    assert not e.isolated(100 + TTL, None)
    assert e.isolated(100 + TTL + 1, None)
    e.unreachable(100 + TTL + 1)  # failures are not contact
    assert e.isolated(100 + TTL + 1, None)
    assert not e.isolated(100 + TTL + 1, leader_answered_ms=2_000)  # its leader answers
    assert e.isolated(2_000 + TTL + 1, 2_000)
    # Contact from before ``since_ms`` does not count: a leader whose lease lapsed while cut
    # off from etcd heard etcd within a TTL, but must hear it again before it serves.
    assert e.isolated(200, None, since_ms=150)
    e.kept_alive(300, 0, None)  # any answer of etcd, even about a lease it no longer holds
    assert not e.isolated(400, None, since_ms=150)
    leader = Election("r0")
    _lead(leader, 0)
    assert not leader.isolated(10, None, since_ms=5)  # it leads: etcd answered within its lease


def test_etcd_unreachable_keeps_a_leader_only_until_its_own_deadline() -> None:
    e = Election("r0")
    _lead(e, 0)
    e.unreachable(limits.REPLICA_KEEPALIVE_PERIOD_MS)
    assert e.leads(TTL - limits.REPLICA_LEASE_SAFETY_MS - 1)
    assert not e.leads(TTL - limits.REPLICA_LEASE_SAFETY_MS)


def test_in_sync_set_and_durable_end() -> None:
    isr = InSync(["r1", "r2"], now_ms=0, lag_max_ms=2_000)
    assert isr.members(0) == ["r1", "r2"]
    isr.fetched("r1", 100, leader_end=100, now_ms=1_000)
    isr.fetched("r2", 40, leader_end=100, now_ms=1_000)
    assert isr.durable_end(100, min_insync=2, now_ms=1_000) == 100
    assert isr.durable_end(100, min_insync=3, now_ms=1_000) == 40
    # r2 never catches up: it leaves the set after lag_max_ms; r1 keeps fetching to the end.
    isr.fetched("r1", 150, leader_end=150, now_ms=2_500)
    assert isr.members(2_500) == ["r1"]
    assert isr.durable_end(150, min_insync=3, now_ms=2_500) == -1
    assert isr.durable_end(150, min_insync=2, now_ms=2_500) == 150
    assert isr.lag_bytes(150) == {"r1": 0, "r2": 110}
    # r2 catches up: it rejoins.
    isr.fetched("r2", 150, leader_end=150, now_ms=2_600)
    assert isr.members(2_600) == ["r1", "r2"]


def test_a_follower_that_reaches_the_end_it_last_saw_stays_in_sync() -> None:
    """Under steady writes the leader's end moves on during every round trip, so a follower
    may never be exactly at the end when its fetch arrives (Kafka's rule: it holds what the
    leader had at its previous fetch, so it was caught up then)."""
    isr = InSync(["r1"], now_ms=0, lag_max_ms=2_000)
    end = 0
    for t in range(1_000, 10_000, 500):
        isr.fetched("r1", end, leader_end=end + 100, now_ms=t)  # always one group behind
        end += 100
    assert isr.members(10_000) == ["r1"]
    # A follower that stops gaining on the end it last saw leaves the set.
    for t in range(10_000, 13_000, 500):
        isr.fetched("r1", end - 50, leader_end=end + 100, now_ms=t)
    assert isr.members(13_000) == []
    assert isr.followers_end(2, 13_000) == -1


def test_one_replica_group_acknowledges_on_the_leader_alone() -> None:
    isr = InSync([], now_ms=0)
    assert isr.durable_end(77, min_insync=1, now_ms=10**9) == 77
    assert isr.durable_end(77, min_insync=2, now_ms=0) == -1


# --- The in-sync set stored in etcd (ADR 0005). ------------------------------------------------

R1, R2 = ("r1", "i1"), ("r2", "i2")


def fetch(isr: InSync, m: tuple[str, str], offset: int, end: int, now: int) -> bool:
    return isr.fetched(m[0], offset, leader_end=end, now_ms=now, incarnation=m[1])


def test_a_shrink_is_stored_before_acks_proceed_without_the_dropped_member() -> None:
    isr = InSync([], now_ms=0, lag_max_ms=2_000)
    isr.keep_stored([R1, R2], now_ms=0)
    fetch(isr, R1, 100, 100, 500)
    fetch(isr, R2, 100, 100, 500)
    isr.acked = 100
    assert isr.wanted(min_insync=2, now_ms=500) is None  # both in sync: nothing to store
    assert isr.durable_end(100, min_insync=2, now_ms=500) == 100
    # r2 stops fetching (paused); r1 keeps up with new writes.
    for t in range(1_000, 4_000, 500):
        fetch(isr, R1, 100 + t, 100 + t, t)
    assert isr.members(3_500) == ["r1"]
    # Until etcd stores the smaller set, acks still wait for r2: every stored member holds them.
    assert isr.durable_end(3_600, min_insync=2, now_ms=3_500) == 100
    assert isr.wanted(min_insync=2, now_ms=3_500) == {R1}
    isr.stored = {R1}  # what Replication does once etcd answered the put
    assert isr.durable_end(3_600, min_insync=2, now_ms=3_500) == 3_600


def test_the_set_never_shrinks_below_min_insync_and_joins_only_who_holds_every_ack() -> None:
    isr = InSync([], now_ms=0, lag_max_ms=2_000)
    isr.keep_stored([R1], now_ms=0)
    isr.acked = 0
    # r1 is gone past the lag: with min_insync 2 it stays (acks wait for it, it may lead).
    assert isr.wanted(min_insync=2, now_ms=5_000) is None
    assert isr.durable_end(500, min_insync=2, now_ms=5_000) == 0
    # r2 appears behind what was acknowledged: not a member yet; once it holds it, it joins.
    isr.acked = 300
    fetch(isr, R2, 200, 500, 5_000)
    assert isr.wanted(min_insync=2, now_ms=5_000) is None
    fetch(isr, R2, 500, 500, 5_100)
    assert isr.wanted(min_insync=2, now_ms=5_100) == {R2}  # r1 left, r2 joined: 2 remain
    isr.stored = {R2}
    assert isr.durable_end(500, min_insync=2, now_ms=5_100) == 500
    # Fewer than min_insync stored: refused.
    isr.stored = set()
    assert isr.durable_end(500, min_insync=2, now_ms=5_100) == -1


def test_a_replica_outside_the_stored_set_never_campaigns() -> None:
    """A paused follower that resumes thinks itself in sync by its last fetch (eligible), but
    the set in etcd dropped it while it slept: it must not lead without the last acks."""
    e = Election("r3", incarnation="i3")
    for now in range(0, 60_000, limits.REPLICA_OBSERVE_PERIOD_MS):
        step = e.next_step(now, eligible=True)
        assert step in (Step.OBSERVE, Step.WAIT), step
        if step is Step.OBSERVE:
            e.insync = [R1, R2]
            e.observed(now, None)  # no leader at all: still not its turn
    e.insync = [R1, R2, ("r3", "i3")]  # caught up and re-admitted by a leader
    e.observed(60_000, None)
    assert e.next_step(60_000, eligible=True) is Step.GRANT


def test_a_stored_set_alone_decides_whether_a_member_behind_the_dead_leader_campaigns() -> None:
    """A follower not caught up by its own last fetch (the dead leader's unacknowledged tail
    was ahead of it for longer than REPLICA_LAG_MAX_MS) may campaign when the stored set names
    it: every acknowledged write is on each stored member. The code before asked its own view
    too, which a dead leader never updates again: the group stayed leaderless."""
    e = Election("r3", incarnation="i3")
    e.insync = [R1, ("r3", "i3")]
    assert e.may_campaign(caught_up=False) and e.may_campaign(caught_up=True)
    e.insync = [R1, R2]
    assert not e.may_campaign(caught_up=True) and not e.may_campaign(caught_up=False)
    e.insync = None  # no stored set (a fresh group, or ASYNC): its own view decides
    assert e.may_campaign(caught_up=True) and not e.may_campaign(caught_up=False)


def test_a_fresh_group_without_a_stored_set_lets_everyone_campaign() -> None:
    e = Election("r9")
    assert e.next_step(0) is Step.OBSERVE
    e.observed(0, None)
    assert e.insync is None and e.next_step(0) is Step.GRANT


# --- Incarnations: a member restarted on an empty data directory (KIP-966). -------------------


def test_a_replica_named_under_another_incarnation_never_campaigns() -> None:
    """r1 was wiped and restarted under its old name: the stored set names the r1 that held
    the acknowledged records, not this one; it may not lead, however long no one does. (The
    rule before incarnations looked at the name alone, and let it lead.)"""
    e = Election("r1", incarnation="new")
    for now in range(0, 30_000, limits.REPLICA_OBSERVE_PERIOD_MS):
        step = e.next_step(now, eligible=True)  # a fresh process believes itself in sync
        assert step in (Step.OBSERVE, Step.WAIT), step
        if step is Step.OBSERVE:
            e.insync = [("r0", "i0"), ("r1", "old")]
            e.observed(now, None)
    e.insync = [("r0", "i0"), ("r1", "new")]  # caught up, stored again by a leader
    e.observed(30_000, None)
    assert e.next_step(30_000, eligible=True) is Step.GRANT


def test_a_set_stored_before_incarnations_accepts_any_incarnation() -> None:
    """The old format names members only: read as unknown incarnations, which match (the old
    rule), so an upgraded group still elects a leader; the leader stores them again with their
    incarnations at their first fetch."""
    e = Election("r1", incarnation="x")
    old = KeyValue(b'{"epoch": 5, "members": ["r0", "r1"]}', 5, 6, 0)
    e.insync = decode_insync(old)
    assert e.insync == [("r0", None), ("r1", None)]
    e.observed(0, None)
    assert e.next_step(0) is Step.GRANT
    isr = InSync([], now_ms=0, lag_max_ms=2_000)
    isr.keep_stored([("r1", None)], now_ms=0)
    fetch(isr, ("r1", "x"), 100, 100, 10)
    assert isr.durable_end(100, min_insync=2, now_ms=10) == 100  # accepted as it is
    assert isr.wanted(min_insync=2, now_ms=10) == {("r1", "x")}  # upgraded
    raw = encode_insync(9, [("r0", "i0"), ("r1", "x")])
    assert decode_insync(KeyValue(raw, 9, 9, 0)) == [("r0", "i0"), ("r1", "x")]


def test_a_follower_reborn_empty_holds_nothing_for_acks_and_leaves_the_set_at_once() -> None:
    """Three replicas, min_insync 2: r1 comes back on a wiped disk. Its old incarnation holds
    nothing now (acks do not count what it held), it is out of sync at once (not after the lag
    window), and the set is stored without it; the new incarnation joins once it caught up."""
    isr = InSync([], now_ms=0, lag_max_ms=2_000)
    isr.keep_stored([R1, R2], now_ms=0)
    fetch(isr, R1, 500, 500, 100)
    fetch(isr, R2, 500, 500, 100)
    isr.acked = 500
    assert isr.durable_end(500, min_insync=2, now_ms=100) == 500
    reborn = ("r1", "i1-new")
    assert fetch(isr, reborn, 0, 600, 200)  # a new incarnation: said so
    assert isr.durable_end(600, min_insync=2, now_ms=200) == 0
    assert isr.members(200) == ["r2"]  # out of sync at once, though r1 fetched 100 ms ago
    assert isr.wanted(min_insync=2, now_ms=200) == {R2}
    isr.stored = {R2}
    fetch(isr, R2, 600, 600, 300)
    assert isr.durable_end(600, min_insync=2, now_ms=300) == 600
    # Catching up at 600 (everything acknowledged): it joins under its new incarnation.
    isr.acked = 600
    assert not fetch(isr, reborn, 300, 600, 400)
    assert isr.wanted(min_insync=2, now_ms=400) is None
    fetch(isr, reborn, 600, 600, 500)
    assert isr.wanted(min_insync=2, now_ms=500) == {R2, reborn}


def test_below_min_insync_a_reborn_member_is_replaced_only_once_it_caught_up() -> None:
    """Two replicas, min_insync 2: the stored set keeps the old incarnation of r1 (the set
    never shrinks below min_insync: acks are refused anyway, as r1's old life holds nothing)
    until the new one holds every acknowledged byte; then the new pair replaces the old."""
    isr = InSync([], now_ms=0, lag_max_ms=2_000)
    isr.keep_stored([R1], now_ms=0)
    fetch(isr, R1, 500, 500, 100)
    isr.acked = 500
    reborn = ("r1", "i1-new")
    fetch(isr, reborn, 0, 500, 200)
    assert isr.durable_end(500, min_insync=2, now_ms=200) == 0  # nothing acknowledged now
    assert isr.wanted(min_insync=2, now_ms=200) is None  # below min: the old pair stays
    fetch(isr, reborn, 400, 500, 300)
    assert isr.wanted(min_insync=2, now_ms=300) is None  # not everything acknowledged yet
    fetch(isr, reborn, 500, 500, 400)
    assert isr.wanted(min_insync=2, now_ms=400) == {reborn}
    isr.stored = {R1, reborn}  # while etcd stores it (Replication counts both)
    assert isr.durable_end(500, min_insync=2, now_ms=400) == 0
    isr.stored = {reborn}
    assert isr.durable_end(500, min_insync=2, now_ms=400) == 500


def test_a_follower_that_comes_back_empty_holds_only_what_it_fetches_again() -> None:
    isr = InSync([], now_ms=0, lag_max_ms=2_000)
    isr.keep_stored([R1], now_ms=0)
    fetch(isr, R1, 500, 500, 100)
    assert isr.durable_end(500, min_insync=2, now_ms=100) == 500
    fetch(isr, R1, 0, 600, 200)  # cut its divergent tail (same incarnation)
    assert isr.durable_end(600, min_insync=2, now_ms=200) == 0


# --- What the stored set's members confirmed (ADR 0005, "restored backups"). -----------------


def test_a_log_holds_a_confirmed_end_only_reaching_it_in_its_epoch() -> None:
    c = Confirmed(end=900, epoch=7, start=400)
    assert c.held_by([(3, 0), (7, 400)], 900)
    assert c.held_by([(3, 0), (7, 400), (9, 950)], 1_000)
    assert not c.held_by([(3, 0), (7, 400)], 899)  # a restored backup: shorter
    assert not c.held_by([(3, 0), (7, 400), (9, 800)], 1_000)  # another leader's records at 800
    assert not c.held_by([(3, 0)], 1_000)  # never had epoch 7: not this history
    assert not c.held_by([], 1_000)  # no history at all (an unreadable file counts as none)


def test_a_stored_member_fetching_from_below_what_it_confirmed_lost_records() -> None:
    """A new leader knows what each stored member held from the stored set; what it fetches
    from under the same incarnation must never go below that, nor below its own highest
    fetch since. Another incarnation (a wiped disk) is a new member: nothing to compare."""
    isr = InSync([], now_ms=0, lag_max_ms=2_000)
    isr.keep_stored([R1, ("r2", None)], now_ms=0, confirmed=500)
    assert isr.lost("r1", 300, "i1") == 500
    assert isr.lost("r1", 500, "i1") is None
    assert isr.lost("r1", 0, "i1-new") is None  # another incarnation: the reborn rule
    assert isr.lost("r2", 0, "i2") is None  # stored without incarnation: nothing known
    fetch(isr, R1, 700, 800, 100)
    assert isr.lost("r1", 600, "i1") == 700
    assert isr.lost("r9", 0, "i9") is None  # never seen


def test_the_confirmed_end_is_what_every_current_member_and_the_leader_hold() -> None:
    isr = InSync([], now_ms=0, lag_max_ms=2_000)
    isr.keep_stored([R1, R2], now_ms=0, confirmed=500)
    assert isr.confirmed_end({R1, R2}, leader_durable=900) == 500
    fetch(isr, R1, 800, 900, 100)
    fetch(isr, R2, 700, 900, 100)
    assert isr.confirmed_end({R1, R2}, leader_durable=900) == 700
    assert isr.confirmed_end({R1, R2}, leader_durable=650) == 650
    fetch(isr, ("r2", "i2-new"), 0, 900, 200)  # r2 reborn: its old pair holds nothing
    assert isr.confirmed_end({R1, R2}, leader_durable=900) == 800


def test_the_confirmed_end_rides_with_the_stored_set() -> None:
    c = Confirmed(end=900, epoch=7, start=400)
    kv = KeyValue(encode_insync(7, [R1, R2], c), 1, 2, 0)
    assert decode_confirmed(kv) == c and decode_insync(kv) == [R1, R2]
    assert decode_confirmed(KeyValue(encode_insync(7, [R1]), 1, 2, 0)) is None  # not recorded
    assert decode_confirmed(None) is None
    with pytest.raises(RemoteProtocolError, match="confirmed end"):
        decode_confirmed(KeyValue(b'{"members": [], "confirmed": ["x"]}', 1, 2, 0))
