"""A follower's copy of the leader's consumer positions is cut to what its own queues hold,
when it arrives and again when the follower closes (txmq.broker.replication.positions_copy)."""

from __future__ import annotations

import json
from pathlib import Path

from txmq.broker.replication.positions_copy import PositionsCopy, clamp_positions
from txmq.store.files.disk import OsDisk


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


def test_a_copy_cut_while_catching_up_is_cut_again_to_the_queues_at_close(tmp_path: Path) -> None:
    """A follower catching up receives positions cut to its short queues; promoted before the
    next shipment (a hand-back right after it caught up), it would deliver again everything the
    group acknowledged past that cut. ``settle`` writes the last shipment cut to the queues as
    they are when it closes; and cut back again after its log lost a divergent tail."""
    shipped = {
        "version": 1,
        "positions": [{"group": "g", "topic": "t", "queue": 0, "ack": 500,
                       "settled": [[502, 510]], "attempts": [[501, 1]]}],
    }  # fmt: skip
    path = tmp_path / "consumer-positions.json"
    copy = PositionsCopy(OsDisk(), path)
    assert not copy.settle(lambda t, q: (0, 0))  # nothing shipped: nothing to write
    ends = {"end": 100}
    copy.offer(shipped, lambda t, q: (0, ends["end"]))
    assert json.loads(path.read_text())["positions"][0]["ack"] == 100  # cut while behind
    ends["end"] = 600  # caught up
    assert copy.settle(lambda t, q: (0, ends["end"]))
    assert json.loads(path.read_text()) == shipped
    assert not copy.settle(lambda t, q: (0, ends["end"]))  # unchanged: not written again
    ends["end"] = 505  # a divergent tail cut: records 505.. are gone and may come back others
    assert copy.settle(lambda t, q: (0, ends["end"]))
    row = json.loads(path.read_text())["positions"][0]
    assert row["ack"] == 500 and row["settled"] == [[502, 504]] and row["attempts"] == [[501, 1]]
