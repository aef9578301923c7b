"""The preferred-replica rule (txmq.broker.leadership.preferred): when a leader hands the lead back
to its
group's first member, and when a replica holds its campaign back; clock injected."""

from __future__ import annotations

from txmq.broker.leadership.election import InSync
from txmq.broker.leadership.preferred import HandBack, Phase, counts, preferred_of
from txmq.coordination.cluster_file import Group, Member

DRAIN, TAKEOVER, RETRY, DEFER = 2_000, 4_000, 30_000, 1_000


def _leader(me: str = "r1", preferred: str | None = "r0") -> HandBack:
    hb = HandBack(me, preferred, drain_max_ms=DRAIN, takeover_ms=TAKEOVER, retry_ms=RETRY,
                  defer_ms=DEFER)  # fmt: skip
    hb.began_leading()
    return hb


def test_the_preferred_replica_is_the_groups_first_member_as_the_file_lists_them() -> None:
    a, b = Member("replica-0", "h", 2), Member("replica-1", "h", 1)
    assert preferred_of(Group("g", (a, b))) == "replica-0"  # file order, not the lower port
    assert preferred_of(Group("g", (b, a))) == "replica-1"
    assert preferred_of(Group("g", (a,))) is None  # alone (or known from etcd alone): none


def test_a_leader_drains_once_the_preferred_replica_is_caught_up_then_resigns_at_its_mark() -> None:
    hb = _leader()
    # First fetch: nothing to compare with yet (caught up means: it holds what this leader
    # had when its previous fetch came in).
    assert hb.fetched(0, offset=100, leader_end=500, durable_end=400, in_sync=True) is Phase.LEAD
    # Behind what the leader had at that previous fetch: not caught up.
    assert hb.fetched(10, offset=300, leader_end=600, durable_end=600, in_sync=True) is Phase.LEAD
    assert hb.may_acknowledge(10)
    # Holds what the leader had written at its previous fetch (600): drain from 650 on.
    assert hb.fetched(20, offset=600, leader_end=700, durable_end=650, in_sync=True) is Phase.DRAIN
    assert hb.mark == 650
    assert not hb.may_acknowledge(21)  # every write from now is refused (NotLeader)
    assert hb.fetched(30, offset=640, leader_end=720, durable_end=720, in_sync=True) is Phase.DRAIN
    # It holds every byte this leader acknowledged (all below the mark): resign.
    assert hb.fetched(40, offset=650, leader_end=720, durable_end=720, in_sync=True) is Phase.RESIGN
    assert not hb.may_acknowledge(41)
    hb.resigned(42)
    assert hb.hold_until_ms == 42 + TAKEOVER and hb.handed_back == 1


def test_no_hand_back_while_the_preferred_replica_is_out_of_the_in_sync_set() -> None:
    hb = _leader()
    hb.fetched(0, offset=100, leader_end=100, durable_end=100, in_sync=False)
    assert hb.fetched(1, offset=100, leader_end=100, durable_end=100, in_sync=False) is Phase.LEAD
    assert hb.may_acknowledge(2)


def test_a_drain_not_finished_in_time_is_called_off_and_not_tried_again_soon() -> None:
    hb = _leader()
    hb.fetched(0, offset=100, leader_end=200, durable_end=200, in_sync=True)
    assert hb.fetched(5, offset=200, leader_end=900, durable_end=900, in_sync=True) is Phase.DRAIN
    assert not hb.may_acknowledge(5 + DRAIN - 1)
    # No fetch comes (it died, or is stuck): the next write past the bound is acknowledged.
    assert hb.may_acknowledge(5 + DRAIN)
    assert hb.phase is Phase.LEAD and hb.called_off == 1
    # Caught up again soon after: no new drain before the retry period passed (no livelock).
    t = 5 + DRAIN + 1
    assert hb.fetched(t, offset=900, leader_end=900, durable_end=900, in_sync=True) is Phase.LEAD
    # After it, a fetch that holds the whole durable log drains and resigns at once.
    t = 5 + DRAIN + RETRY
    assert hb.fetched(t, offset=900, leader_end=900, durable_end=900, in_sync=True) is Phase.RESIGN


def test_a_drain_falls_through_to_lead_if_the_preferred_replica_leaves_the_set() -> None:
    hb = _leader()
    hb.fetched(0, offset=10, leader_end=10, durable_end=10, in_sync=True)
    assert hb.fetched(1, offset=10, leader_end=50, durable_end=50, in_sync=True) is Phase.DRAIN
    # Out of the set (a new incarnation: it lost its disk): its offset proves nothing.
    assert hb.fetched(2, offset=60, leader_end=60, durable_end=60, in_sync=False) is Phase.DRAIN
    assert hb.fetched(1 + DRAIN, offset=60, leader_end=60, durable_end=60, in_sync=False) is (
        Phase.LEAD
    )


def test_the_preferred_replica_itself_and_a_group_without_one_never_hand_back() -> None:
    for hb in (_leader("r0", "r0"), _leader("r1", None)):
        for t in range(5):
            assert hb.fetched(t, offset=9, leader_end=9, durable_end=9, in_sync=True) is Phase.LEAD
        assert hb.may_acknowledge(5)
        assert hb.may_campaign(6, leader=None, preferred_stored=True)


def test_a_new_term_acknowledges_again_and_forgets_the_last_fetch() -> None:
    hb = _leader()
    hb.fetched(0, offset=10, leader_end=10, durable_end=10, in_sync=True)
    assert hb.fetched(1, offset=10, leader_end=20, durable_end=20, in_sync=True) is Phase.DRAIN
    hb.began_leading()
    assert hb.may_acknowledge(2)
    assert hb.fetched(3, offset=20, leader_end=20, durable_end=20, in_sync=True) is Phase.LEAD


def test_after_resigning_a_replica_holds_its_campaign_back_for_the_takeover_bound() -> None:
    hb = _leader()
    hb.may_campaign(0, leader="r1", preferred_stored=True)  # it led
    hb.resigned(100)
    assert not hb.may_campaign(100, leader=None, preferred_stored=True)
    assert not hb.may_campaign(100 + TAKEOVER - 1, leader=None, preferred_stored=True)
    # The preferred replica took over: nothing to campaign for anyway.
    assert hb.may_campaign(600, leader="r0", preferred_stored=True)
    # It never did: campaign normally once the bound passed (and the defer, counted from when
    # no leader was seen, is long over).
    hb2 = _leader()
    hb2.may_campaign(0, leader="r1", preferred_stored=True)
    hb2.resigned(100)
    hb2.may_campaign(100, leader=None, preferred_stored=True)
    assert hb2.may_campaign(100 + TAKEOVER, leader=None, preferred_stored=True)


def test_a_replica_defers_its_campaign_for_a_live_preferred_one_but_not_for_a_dead_one() -> None:
    hb = HandBack("r2", "r0", defer_ms=DEFER)
    # The leader r1 (not preferred) went; the stored set names r0: r0 should win.
    assert hb.may_campaign(0, leader="r1", preferred_stored=True)
    assert not hb.may_campaign(10, leader=None, preferred_stored=True)
    assert not hb.may_campaign(10 + DEFER - 1, leader=None, preferred_stored=True)
    assert hb.may_campaign(10 + DEFER, leader=None, preferred_stored=True)  # bounded
    # The leader that went was the preferred one: no one to wait for.
    hb = HandBack("r1", "r0", defer_ms=DEFER)
    hb.may_campaign(0, leader="r0", preferred_stored=True)
    assert hb.may_campaign(10, leader=None, preferred_stored=True)
    # The stored set does not name it (it may not lead): no wait either.
    hb = HandBack("r1", "r0", defer_ms=DEFER)
    hb.may_campaign(0, leader="r2", preferred_stored=False)
    assert hb.may_campaign(10, leader=None, preferred_stored=False)


def test_counts_the_set_etcd_holds_by_incarnation_else_the_lag_rule() -> None:
    s = InSync(["r0"], now_ms=0, lag_max_ms=100)
    assert counts(s, None, "r0", 50)  # no set stored: a new leader's followers count for lag_max
    assert not counts(s, None, "r0", 500)
    stored = [("r1", "inc-l"), ("r0", "inc-a")]
    s.keep_stored([("r0", "inc-a")], 0)
    s.fetched("r0", 0, 10, 600, "inc-a")
    assert counts(s, stored, "r0", 600)
    s.fetched("r0", 0, 10, 700, "inc-b")  # its data directory started empty: another member
    assert not counts(s, stored, "r0", 700)
    # Caught up under inc-b, the leader starts storing it: until etcd has that set, no.
    s.fetched("r0", 10, 10, 800, "inc-b")
    s.stored = {("r0", "inc-a"), ("r0", "inc-b")}  # as Replication._store_set holds it meanwhile
    assert not counts(s, stored, "r0", 800)
    assert counts(s, [("r1", "inc-l"), ("r0", "inc-b")], "r0", 800)  # stored
    assert counts(s, [("r1", "inc-l"), ("r0", None)], "r0", 800)  # stored before incarnations
    assert not counts(s, [("r1", "inc-l")], "r0", 800)  # left the set
