"""Re-driving a consumer group's DLQ (broker/admin/redrive.py) on a broker's real parts.

Goal: a dead letter goes back to its topic once, however often the re-drive runs (also after a
reopen: the progress is in the log), as its producer sent it (id, keys, tag, properties, body)
plus a re-drive count, and only the group whose DLQ it was receives the copy; ``topic`` and
``max`` split a DLQ into several re-drives that together send each letter once; a letter that
dies again shows the count, and the next re-drive raises it; a letter whose topic is gone
stops the re-drive before it; a dry run writes nothing.
Method: a real broker's parts on a temporary directory; dead letters made by the delivery book
and ``ConsumeRpcs.dead_letter`` as the ForwardMessageToDeadLetterQueue RPC makes them.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from txmq.broker.admin.redrive import Redrive
from txmq.broker.config.broker_config import BrokerConfig
from txmq.broker.consume.positions import Ask, Delivery
from txmq.broker.consume.rpcs import ConsumeRpcs
from txmq.broker.state.parts import Parts
from txmq.model import (
    PROP_REDRIVE_COUNT,
    PROP_REDRIVE_GROUP,
    MessageType,
    Record,
    RecordDraft,
)

NOW = 1_700_000_000_000


def open_parts(path: Path) -> Parts:
    return Parts(BrokerConfig(data_dir=path, port=0), now_ms=lambda: NOW)


def with_topics(p: Parts) -> Parts:
    for name in ("orders", "billing"):
        p.topics.create(name, 2, MessageType.NORMAL)
    return p


@pytest.fixture
def parts(tmp_path: Path) -> Iterator[Parts]:
    p = with_topics(open_parts(tmp_path))
    yield p
    p.close()


def receive(parts: Parts, group: str, topic: str) -> list[Delivery]:
    ask = Ask(tags=None, batch=32, invisible_ms=60_000, now_ms=NOW, fifo=False)
    return parts.deliveries.receive(group, topic, [0, 1], ask)[0]


def kill(parts: Parts, group: str, topic: str, bodies: set[bytes]) -> None:
    """``group`` receives ``topic``: it gives up on ``bodies`` (dead letters) and acks the rest."""
    with ThreadPoolExecutor(1) as pool:
        rpcs = ConsumeRpcs(
            store=parts.store, topics=parts.topics, config=parts.config, now_ms=parts.now_ms,
            executor=pool, metrics=parts.metrics, positions=parts.deliveries,
            endpoint=("127.0.0.1", 0),
        )  # fmt: skip
        for d in receive(parts, group, topic):
            if d.record.body in bodies:
                rpcs.dead_letter(parts.deliveries.take_for_dead_letter(group, d.receipt_handle))
            else:
                parts.deliveries.ack(group, d.receipt_handle)


def send(parts: Parts, topic: str, body: bytes, queue: int = 0, **props: str) -> None:
    draft = RecordDraft(
        topic=topic, queue_id=queue, body=body, message_id=body.hex(), tag="T", keys=("k", "j"),
        properties={"color": "red", **props},
    )  # fmt: skip
    parts.store.append(draft)


def copies(parts: Parts, topic: str) -> list[Record]:
    out: list[Record] = []
    for q in range(parts.topics.get(topic).queue_count):
        out += parts.store.read_queue(topic, q, 0, 1000).records
    return [r for r in out if PROP_REDRIVE_GROUP in r.properties]


def test_a_dead_letter_goes_back_once_as_its_producer_sent_it(tmp_path: Path) -> None:
    parts = with_topics(open_parts(tmp_path))
    try:
        for i in range(3):
            send(parts, "orders", f"o{i}".encode(), queue=i % 2)
        kill(parts, "g", "orders", {b"o0", b"o2"})
        end = parts.store.log_end_offset
        dry = Redrive(parts)({"group": "g", "dry_run": True})
        assert [r["message_id"] for r in dry["redriven"]] == [b"o0".hex(), b"o2".hex()]
        assert parts.store.log_end_offset == end, "a dry run writes nothing"
        got = Redrive(parts)({"group": "g"})
        assert len(got["redriven"]) == 2 and not got["more"] and got["_wake"] == ["orders"]
        sent = copies(parts, "orders")
        assert sorted(r.body for r in sent) == [b"o0", b"o2"]
        for r in sent:
            assert r.message_id == r.body.hex() and r.tag == "T" and r.keys == ("k", "j")
            assert dict(r.properties) == {
                "color": "red", PROP_REDRIVE_COUNT: "1", PROP_REDRIVE_GROUP: "g",
            }  # fmt: skip
        end = parts.store.log_end_offset
        assert Redrive(parts)({"group": "g"})["redriven"] == []
        assert parts.store.log_end_offset == end, "nothing written when nothing is left"
    finally:
        parts.close()
    again = open_parts(tmp_path)  # the progress is in the log: a restart keeps it
    try:
        assert Redrive(again)({"group": "g"})["redriven"] == []
        assert len(copies(again, "orders")) == 2
    finally:
        again.close()


def test_only_its_group_receives_the_copy(parts: Parts) -> None:
    send(parts, "orders", b"poison")
    kill(parts, "h", "orders", set())  # another group of the topic: consumed it
    kill(parts, "g", "orders", {b"poison"})
    Redrive(parts)({"group": "g"})
    assert [d.record.body for d in receive(parts, "g", "orders")] == [b"poison"]
    assert receive(parts, "h", "orders") == []
    rows = {(r[0], r[2]): r[3] for r in parts.deliveries.positions() if r[1] == "orders"}
    assert rows[("h", 0)] == parts.store.queue_offsets("orders", 0)[1], "h settled it unread"


def test_topic_and_max_split_a_redrive_that_sends_each_letter_once(parts: Parts) -> None:
    for i in range(3):
        send(parts, "orders", f"o{i}".encode())
    for i in range(2):
        send(parts, "billing", f"b{i}".encode())
    kill(parts, "g", "orders", {b"o0", b"o1", b"o2"})
    kill(parts, "g", "billing", {b"b0", b"b1"})
    r = Redrive(parts)
    first = r({"group": "g", "topic": "orders", "max": 1})
    assert [x["topic"] for x in first["redriven"]] == ["orders"] and first["more"]
    assert len(r({"group": "g", "topic": "orders"})["redriven"]) == 2
    rest = r({"group": "g"})
    assert sorted(x["topic"] for x in rest["redriven"]) == ["billing", "billing"]
    assert r({"group": "g"})["redriven"] == []
    assert sorted(c.body for c in copies(parts, "orders")) == [b"o0", b"o1", b"o2"]
    assert sorted(c.body for c in copies(parts, "billing")) == [b"b0", b"b1"]


def test_a_letter_that_dies_again_shows_its_count(parts: Parts) -> None:
    send(parts, "orders", b"poison")
    kill(parts, "g", "orders", {b"poison"})
    Redrive(parts)({"group": "g"})
    kill(parts, "g", "orders", {b"poison"})  # the copy dies too
    dlq = parts.store.read_queue("%DLQ%g", 0, 0, 10).records
    assert [r.properties.get(PROP_REDRIVE_COUNT) for r in dlq] == [None, "1"]
    assert Redrive(parts)({"group": "g"})["redriven"][0]["redrives"] == 2


def test_a_letter_whose_topic_is_gone_stops_the_redrive_before_it(parts: Parts) -> None:
    parts.topics.create("gone", 1, MessageType.NORMAL)
    for topic, body in (("orders", b"o0"), ("gone", b"x"), ("orders", b"o1")):
        send(parts, topic, body)
        kill(parts, "g", topic, {body})
    parts.topics.delete("gone")
    first = Redrive(parts)({"group": "g"})
    assert [x["message_id"] for x in first["redriven"]] == [b"o0".hex()]
    assert "'gone', which does not exist" in first["stopped"]
    assert Redrive(parts)({"group": "g"})["redriven"] == []
    assert len(Redrive(parts)({"group": "g", "topic": "orders"})["redriven"]) == 1
