"""Growing a topic (``txmq topic update T --queues N``) while the official client sends and
receives, on one broker and on a cluster.

Goal: a topic grows from 4 to 8 queues under a bounded load without losing or duplicating a
committed message; the queues it had keep their messages and offsets, the new ones take sends at
once; a shrink, an unknown topic or an impossible count is one ``txmq:`` line with exit 2 and
changes nothing; on a cluster every member grows, and with a member down nothing grows anywhere.
Method: real broker processes; the unmodified official Python client (a Producer thread sending
600 messages, a SimpleConsumer thread receiving and acking); the CLI as a subprocess; results
read back with ``topic describe --json`` and ``group describe --json``.
"""

from __future__ import annotations

import functools
import json
import threading
from pathlib import Path

from rocketmq import Message

from tests.cli.test_cli import ok, txmq
from tests.integration.clients import consumer, group_settled, message, producer
from tests.integration.conftest import BrokerProcess, wait_until
from tests.integration.test_cluster import Cluster, definitions
from txmq.client.admin import call

SENDS = 600
DEADLINE_S = 90.0


def queues_of(endpoints: str, topic: str) -> dict[int, tuple[int, int]]:
    shown = json.loads(ok("topic", "describe", topic, "--json", "--endpoints", endpoints))
    return {int(q["queue"]): (int(q["min"]), int(q["max"])) for q in shown["queues"]}


def one_line_error(r: object, code: int) -> str:
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)  # type: ignore[attr-defined]
    lines = r.stderr.strip().splitlines()  # type: ignore[attr-defined]
    assert len(lines) == 1 and lines[0].startswith("txmq: "), lines
    return str(lines[0])


class Load:
    """One Producer thread sending SENDS numbered messages, one SimpleConsumer thread
    receiving and acking; ``sent`` holds what the broker acknowledged (committed)."""

    def __init__(self, endpoints: str, topic: str, group: str) -> None:
        self.p = producer(endpoints, (topic,))
        self.c = consumer(endpoints, group, topic)
        self.topic = topic
        self.sent: list[bytes] = []
        self.got: list[bytes] = []
        self.stop = threading.Event()
        self.threads = [
            threading.Thread(target=self._send, daemon=True),
            threading.Thread(target=self._receive, daemon=True),
        ]

    def _send(self) -> None:
        for i in range(SENDS):
            if self.stop.is_set():
                return
            self.p.send(message(self.topic, f"{i}".encode()))
            self.sent.append(f"{i}".encode())

    def _receive(self) -> None:
        while not self.stop.is_set():
            batch: list[Message] = self.c.receive(16, 20) or []
            for m in batch:
                self.got.append(m.body)
                self.c.ack(m)

    def __enter__(self) -> Load:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=30)
        self.c.shutdown()
        self.p.shutdown()


def test_growing_4_to_8_under_load_loses_and_duplicates_nothing(broker: BrokerProcess) -> None:
    ep = ["--endpoints", broker.endpoints]
    ok("topic", "create", "grow", "--queues", "4", *ep)
    with Load(broker.endpoints, "grow", "g-grow") as load:
        wait_until(lambda: len(load.sent) >= SENDS // 4, DEADLINE_S, "a quarter of the sends")
        before = queues_of(broker.endpoints, "grow")
        before_update = len(load.sent)
        assert ok("topic", "update", "grow", "--queues", "8", *ep).startswith(
            "topic grow: 4 -> 8 queues"
        )
        load.threads[0].join(timeout=DEADLINE_S)
        assert len(load.sent) == SENDS
        wait_until(lambda: len(load.got) >= SENDS, DEADLINE_S, "every message received")
        # No duplicate can come later: the consumer records a message before it acks it, so
        # once the group holds nothing unread or in flight, every delivery is in ``got``.
        settled = functools.partial(group_settled, broker.endpoints, "g-grow", "grow")
        wait_until(settled, DEADLINE_S, "nothing left to deliver")
    after = queues_of(broker.endpoints, "grow")
    assert sorted(load.got, key=int) == sorted(load.sent, key=int), "each message exactly once"
    assert set(after) == set(range(8))
    for q, (lo, hi) in before.items():  # the old queues kept their offsets and messages
        assert after[q][0] == lo and after[q][1] >= hi
    assert sum(hi for _lo, hi in before.values()) >= SENDS // 4
    new = sum(after[q][1] for q in range(4, 8))
    assert new > 0, "sends went to the new queues at once"
    assert new <= SENDS - before_update, "no message sent before the growth is in a new queue"
    lag = json.loads(ok("group", "describe", "g-grow", "--json", *ep))
    assert {int(q["queue"]) for q in lag["queues"]} == set(range(8))
    assert lag["lag"] == 0


def test_bad_updates_are_one_line_exit_2_and_change_nothing(broker: BrokerProcess) -> None:
    ep = ["--endpoints", broker.endpoints]
    ok("topic", "create", "ordered", "--queues", "4", "--type", "fifo", *ep)
    line = one_line_error(txmq("topic", "update", "ordered", "--queues", "2", *ep), 2)
    assert "only grows" in line and "4 queues" in line
    one_line_error(txmq("topic", "update", "nosuch", "--queues", "8", *ep), 2)
    one_line_error(txmq("topic", "update", "ordered", "--queues", "257", *ep), 2)
    one_line_error(txmq("topic", "update", "ordered", *ep), 2)  # --queues is required
    assert set(queues_of(broker.endpoints, "ordered")) == set(range(4))
    same = ok("topic", "update", "ordered", "--queues", "4", *ep)
    assert "already has 4 queues" in same
    grown = ok("topic", "update", "ordered", "--queues", "6", *ep)
    assert "4 -> 6" in grown and "fifo" in grown  # the reordering note for message groups
    r = json.loads(ok("topic", "update", "ordered", "--queues", "6", "--json", *ep))
    assert (r["was"], r["queues"], r["result"], r["type"]) == (6, 6, "unchanged", "fifo")


def test_a_cluster_grows_everywhere_or_nowhere(tmp_path: Path) -> None:
    c = Cluster(tmp_path, 2)
    c.start()
    try:
        b0, b1 = c.brokers
        ok("topic", "create", "wide", "--queues", "2", "--endpoints", b0.endpoints)
        wait_until(lambda: definitions(b1).get("wide") == 2, 15, "the topic on b1")
        ok("topic", "update", "wide", "--queues", "4", "--endpoints", b1.endpoints)
        assert definitions(b0)["wide"] == 4 and definitions(b1)["wide"] == 4
        b1.stop()
        line = one_line_error(
            txmq("topic", "update", "wide", "--queues", "6", "--endpoints", b0.endpoints), 1
        )
        assert "b1" in line and "unreachable" in line
        assert definitions(b0)["wide"] == 4, "nothing grew while a member could not"
        b1.start()
        wait_until(lambda: _answers(b1), 15, "b1 back")
        wait_until(
            lambda: (
                txmq(
                    "topic", "update", "wide", "--queues", "6", "--endpoints", b0.endpoints
                ).returncode
                == 0
            ),
            15,
            "the update once b0 sees b1 again",
        )
        assert definitions(b0)["wide"] == 6 and definitions(b1)["wide"] == 6
        # A route from either member lists 6 queues on each of the 2 brokers.
        p = producer(b1.endpoints, ("wide",))
        try:
            for i in range(24):
                p.send(message("wide", f"{i}".encode()))
        finally:
            p.shutdown()
        for b in c.brokers:
            shown = call(b.endpoints, "TopicDescribe", {"name": "wide"})["queues"]
            assert [q["queue"] for q in shown] == list(range(6))
        used = [
            q["queue"]
            for b in c.brokers
            for q in call(b.endpoints, "TopicDescribe", {"name": "wide"})["queues"]
            if q["max"] > 0
        ]
        assert any(q >= 4 for q in used), "sends reach the new queues of both brokers"
    finally:
        c.stop()


def _answers(b: BrokerProcess) -> bool:
    return txmq("topic", "list", "--endpoints", b.endpoints).returncode == 0
