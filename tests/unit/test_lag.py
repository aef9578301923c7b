"""``group_lags``, the one definition of consumer lag: pure, so tested on plain values.

Goal: every queue of every consumed topic counts; a never-read queue lags from its first
retained offset; retention below the ack offset is not lag; subscriptions alone list a group.
"""

from __future__ import annotations

from txmq.broker.consume.lag import group_lags

RANGES = {("t", 0): (0, 5), ("t", 1): (0, 5), ("t", 2): (2, 5), ("t", 3): (0, 5), ("u", 0): (0, 7)}


def count(topic: str) -> int:
    return {"t": 4, "u": 1}.get(topic, 0)


def queue_range(topic: str, queue: int) -> tuple[int, int]:
    return RANGES.get((topic, queue), (0, 0))


def test_never_read_queues_count_from_their_first_retained_offset() -> None:
    [g] = group_lags([("g", "t", 0, 5, 0)], [], count, queue_range)
    assert g.group == "g"
    assert [(q.queue, q.lag, q.read) for q in g.queues] == [
        (0, 0, True),
        (1, 5, False),
        (2, 3, False),
        (3, 5, False),
    ]
    assert g.lag == 13
    assert g.queues[2].acked_to == 2


def test_retention_below_the_ack_offset_is_not_lag_and_inflight_adds_up() -> None:
    [g] = group_lags([("g", "t", 2, 1, 2), ("g", "t", 0, 3, 1)], [], count, queue_range)
    by_queue = {q.queue: q for q in g.queues}
    assert by_queue[2].lag == 3  # acked to 1, but offsets below 2 are gone
    assert by_queue[0].lag == 2
    assert g.inflight == 3


def test_subscriptions_list_groups_and_deleted_topics_keep_read_queues() -> None:
    lags = group_lags([("a", "gone", 1, 0, 0)], [("b", "u"), ("a", "u")], count, queue_range)
    assert [g.group for g in lags] == ["a", "b"]
    a, b = lags
    assert [(q.topic, q.queue) for q in a.queues] == [("gone", 0), ("gone", 1), ("u", 0)]
    assert b.lag == 7
    assert a.as_json()["queues"][2]["lag"] == 7
