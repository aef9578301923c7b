"""Which followers wrote an operator's change of consumer positions
(txmq.broker.replication.positions_version): a follower confirms only the version it reports
under its leader's token, a restart on either side confirms nothing, and a damaged report
confirms nothing."""

from __future__ import annotations

from txmq.broker.replication.positions_version import PositionsVersion, not_confirmed


def test_a_verb_waits_for_the_followers_that_have_not_written_its_version() -> None:
    pv = PositionsVersion("t1")
    assert not pv.behind("r1")  # no verb yet: fetches carry positions on their own cadence
    v = pv.bump()
    assert pv.behind("r1") and pv.behind("r2")
    assert pv.missing(["r2", "r1"], v) == ["r1", "r2"]
    assert pv.report("r1", pv.stamp())  # r1 wrote what the leader shipped
    assert not pv.behind("r1") and pv.behind("r2")
    assert pv.missing(["r1", "r2"], v) == ["r2"]
    assert not pv.report("r1", pv.stamp())  # the same again: nothing new
    v2 = pv.bump()
    assert pv.missing(["r1"], v) == [] and pv.missing(["r1"], v2) == ["r1"]


def test_a_report_of_another_leadership_confirms_nothing() -> None:
    old = PositionsVersion("old")
    for _ in range(5):
        old.bump()
    stale = old.stamp()  # a follower wrote version 5 of the leader before a restart
    new = PositionsVersion("new")
    v = new.bump()  # version 1 of the new leadership
    assert not new.report("r1", stale)
    assert new.missing(["r1"], v) == ["r1"] and new.behind("r1")


def test_a_restarted_follower_or_a_damaged_report_confirms_nothing() -> None:
    pv = PositionsVersion("t")
    v = pv.bump()
    assert pv.report("r1", ["t", v])
    assert not pv.report("r1", None)  # restarted: it wrote nothing since
    assert pv.behind("r1") and pv.missing(["r1"], v) == ["r1"]
    for bad in (["t", v + 1], ["t", "1"], ["t", -1], ["t"], "t", 7, ["t", True]):
        assert not pv.report("r2", bad)
        assert pv.missing(["r2"], v) == ["r2"]


def test_the_refusal_names_the_replicas_and_says_the_change_stands_on_the_leader() -> None:
    text = not_confirmed("r0", ["r1"], 4.75, "the call's deadline")
    assert "applied and durable on the leader r0" in text
    assert "r1 did not confirm" in text and "4750 ms" in text and "call's deadline" in text
