"""A follower's copy of the leader's consumer positions is cut to what its own queues hold."""

from __future__ import annotations

from txmq.broker.replication.follower import clamp_positions


def test_positions_past_a_followers_queue_end_are_cut_back_to_it() -> None:
    doc = {
        "version": 1,
        "positions": [
            {"group": "g", "topic": "t", "queue": 0, "ack": 10, "settled": [[12, 15], [20, 22]],
             "attempts": [[11, 2], [21, 1]]},
            {"group": "g", "topic": "t", "queue": 1, "ack": 3, "settled": [], "attempts": []},
        ],
    }  # fmt: skip
    ends = {("t", 0): 14, ("t", 1): 100}
    out = clamp_positions(doc, lambda topic, q: (0, ends[(topic, q)]))
    q0, q1 = out["positions"]
    assert q0["ack"] == 10 and q0["settled"] == [[12, 13]] and q0["attempts"] == [[11, 2]]
    assert q1 == doc["positions"][1]  # behind the follower's end: kept as is
    behind = clamp_positions(doc, lambda topic, q: (0, 4))["positions"][0]
    assert behind["ack"] == 4 and behind["settled"] == [] and behind["attempts"] == []
