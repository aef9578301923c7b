"""Resetting a consumer group's position (``txmq group reset``) under a live official client.

Goal: after a consumer bug, an operator rewinds the group to a time and the official
SimpleConsumer, still running, receives again every message stored from then on and nothing
before; a reset with messages in flight drops their leases (their acks fail) and delivers again
those at or after the new position; bad input is one ``txmq:`` line with exit 2 and moves no
queue, also when only one of the named queues cannot take the offset; on a cluster every
broker's queues move, and with a member down none do; a replica group's followers get the new
positions, and after a failover the consumer carries on from them.
Method: real broker processes (one, a 2-broker cluster, a replica group of 2 through etcd);
the unmodified official Python client; the CLI as a subprocess; positions read back with
``group describe --json`` and from a follower's positions file.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path

import pytest
from rocketmq import SimpleConsumer

from tests.cli.test_cli import ok, txmq
from tests.integration.clients import consumer, message, producer
from tests.integration.conftest import BrokerProcess, wait_until
from tests.integration.test_cluster import Cluster, definitions
from tests.integration.test_replication import create_topic, leader_of, replicas, status
from tests.integration.test_topic_update import one_line_error
from txmq.client.admin import call

from .etcd_fixtures import etcd_endpoint  # noqa: F401  (fixture)

DEADLINE_S = 30.0


def send(endpoints: str, topic: str, bodies: list[str]) -> list[str]:
    p = producer(endpoints, (topic,))
    try:
        return [p.send(message(topic, b.encode())).message_id for b in bodies]
    finally:
        p.shutdown()


def receive(c: SimpleConsumer, want: int, *, ack: bool = True) -> list[str]:
    """Bodies of ``want`` messages (more if more come within the wait), acked unless not."""
    got: list[str] = []
    deadline = time.monotonic() + DEADLINE_S
    while len(got) < want and time.monotonic() < deadline:
        for m in c.receive(32, 30) or []:
            got.append(m.body.decode())
            if ack:
                c.ack(m)
    return got


def nothing_more(c: SimpleConsumer) -> bool:
    """One more receive (the consumer's 2 s long poll) brings nothing."""
    return not (c.receive(32, 30) or [])


def acked_to(endpoints: str, group: str) -> dict[tuple[str, int], int]:
    """(broker, queue) -> the group's ack offset, from ``group describe --json``."""
    shown = json.loads(ok("group", "describe", group, "--json", "--endpoints", endpoints))
    return {(q["broker"], int(q["queue"])): int(q["acked_to"]) for q in shown["queues"]}


def test_a_live_consumer_rewound_to_a_time_gets_exactly_what_was_stored_since(
    broker: BrokerProcess,
) -> None:
    ep = ["--endpoints", broker.endpoints]
    ok("topic", "create", "rw", "--queues", "2", *ep)
    early = send(broker.endpoints, "rw", [f"early-{i}" for i in range(8)])
    stored = json.loads(ok("message", "show", early[-1], *ep))["store_timestamp_ms"]
    at = int(stored) + 1
    wait_until(lambda: time.time() * 1000 > at + 1, 5, "the clock past the rewind time")
    send(broker.endpoints, "rw", [f"late-{i}" for i in range(8)])
    c = consumer(broker.endpoints, "g-rw", "rw")
    try:
        assert len(receive(c, 16)) == 16
        when = dt.datetime.fromtimestamp(at / 1000, dt.UTC).isoformat(timespec="milliseconds")
        shown = ok("group", "reset", "g-rw", "--topic", "rw", "--to", when, *ep)
        assert "moved to the first message stored" in " ".join(shown.split())
        again = receive(c, 8)  # the same consumer, never restarted
        assert sorted(again) == sorted(f"late-{i}" for i in range(8))
        assert nothing_more(c), "nothing stored before the time comes back"
        # The same by ms since the epoch, as JSON: every queue named with its old and new offset.
        r = json.loads(
            ok("group", "reset", "g-rw", "--topic", "rw", "--to", str(at), "--json", *ep)
        )
        rows = {q["queue"]: q for q in r["brokers"][0]["queues"]}
        assert set(rows) == {0, 1} and r["dry_run"] is False and r["failed"] == {}
        assert all(q["old"] == q["max"] and q["new"] < q["max"] for q in rows.values())
        assert sorted(receive(c, 8)) == sorted(f"late-{i}" for i in range(8))
    finally:
        c.shutdown()


def test_messages_in_flight_when_a_reset_lands(broker: BrokerProcess) -> None:
    """Received, not acked: their acks fail after the reset; a rewind delivers them again
    (attempt 1), a skip to latest never does."""
    ep = ["--endpoints", broker.endpoints]
    ok("topic", "create", "fl", "--queues", "1", *ep)
    send(broker.endpoints, "fl", [f"m{i}" for i in range(6)])
    c = consumer(broker.endpoints, "g-fl", "fl")
    try:
        held = [m for _ in range(3) for m in (c.receive(32, 60) or [])]
        assert sorted(m.body.decode() for m in held) == [f"m{i}" for i in range(6)]
        plan = json.loads(ok("group", "reset", "g-fl", "--topic", "fl", "--to", "earliest",
                             "--dry-run", "--json", *ep))  # fmt: skip
        assert plan["brokers"][0]["queues"][0]["inflight"] == 6 and plan["dry_run"]
        assert len(c.receive(32, 60) or []) == 0, "a dry run moves nothing"
        ok("group", "reset", "g-fl", "--topic", "fl", "--to", "earliest", *ep)
        with pytest.raises(Exception, match="stale"):
            c.ack(held[0])
        redelivered = [m for _ in range(3) for m in (c.receive(32, 60) or [])]
        assert sorted(m.body.decode() for m in redelivered) == [f"m{i}" for i in range(6)]
        assert {m.delivery_attempt for m in redelivered} == {1}
        ok("group", "reset", "g-fl", "--topic", "fl", "--to", "latest", *ep)
        with pytest.raises(Exception, match="stale"):
            c.ack(redelivered[0])
        assert nothing_more(c), "skipped: never delivered again"
        assert acked_to(broker.endpoints, "g-fl") == {("txmq", 0): 6}
    finally:
        c.shutdown()


def test_bad_resets_are_one_line_exit_2_and_move_nothing(broker: BrokerProcess) -> None:
    ep = ["--endpoints", broker.endpoints]
    ok("topic", "create", "bad", "--queues", "2", *ep)
    send(broker.endpoints, "bad", [f"b{i}" for i in range(5)])
    c = consumer(broker.endpoints, "g-bad", "bad")
    try:
        assert len(receive(c, 5)) == 5
    finally:
        c.shutdown()
    before = acked_to(broker.endpoints, "g-bad")
    ends = sorted(before.values())
    assert ends[0] < ends[1], "one queue holds more than the other (5 messages, 2 queues)"

    def refused(*args: str) -> str:
        return one_line_error(txmq("group", "reset", *args, *ep), 2)

    assert "nosuch" in refused("g-bad", "--topic", "nosuch", "--to", "earliest")
    assert "--to" in refused("g-bad", "--topic", "bad", "--to", "yesterday")
    assert "queues 0..1" in refused("g-bad", "--topic", "bad", "--to", "0", "--queue", "2")
    assert "consumer group" in refused("bad group!", "--topic", "bad", "--to", "earliest")
    assert "outside queue" in refused("g-bad", "--topic", "bad", "--to", "999")
    # Valid for the longer queue only: refused as a whole, the shorter one names itself.
    assert "outside queue" in refused("g-bad", "--topic", "bad", "--to", str(ends[1]))
    one_line_error(txmq("group", "reset", "g-bad", "--topic", "bad", *ep), 2)  # no --to
    assert acked_to(broker.endpoints, "g-bad") == before


def test_a_cluster_resets_every_broker_or_none(tmp_path: Path) -> None:
    cl = Cluster(tmp_path, 2)
    cl.start()
    try:
        b0, b1 = cl.brokers
        ok("topic", "create", "cr", "--queues", "2", "--endpoints", b0.endpoints)
        wait_until(lambda: "cr" in definitions(b1), 15, "the topic on b1")
        for b in cl.brokers:
            send(b.endpoints, "cr", [f"{b.data_dir.name}-{i}" for i in range(4)])
        c = consumer(cl.endpoints, "g-cr", "cr")
        try:
            assert len(receive(c, 8)) == 8
            shown = ok("group", "reset", "g-cr", "--topic", "cr", "--to", "earliest",
                       "--endpoints", b1.endpoints)  # fmt: skip
            assert "b0" in shown and "b1" in shown
            assert sorted(receive(c, 8)) == sorted(f"b{n}-{i}" for n in (0, 1) for i in range(4))
            before = acked_to(cl.endpoints, "g-cr")
            b1.stop()
            line = one_line_error(
                txmq("group", "reset", "g-cr", "--topic", "cr", "--to", "earliest",
                     "--endpoints", b0.endpoints), 1,
            )  # fmt: skip
            assert "b1" in line and "unreachable" in line
            b1.start()
            assert acked_to(cl.endpoints, "g-cr") == before, "nothing moved anywhere"
        finally:
            c.shutdown()
    finally:
        cl.stop()


def test_a_replica_groups_followers_take_the_reset_and_keep_it_through_a_failover(
    tmp_path: Path,
    etcd_endpoint: str,  # noqa: F811
) -> None:
    group = replicas(tmp_path, etcd_endpoint, "--min-insync-replicas", "2")
    try:
        leader, follower = leader_of(group)
        create_topic(leader, follower, "rr")
        both = f"{leader.endpoints};{follower.endpoints}"
        send(both, "rr", [f"r{i}" for i in range(10)])
        c = consumer(both, "g-rr", "rr")
        try:
            assert len(receive(c, 10)) == 10
            call(leader.endpoints, "GroupReset", {"group": "g-rr", "topic": "rr", "to": "earliest"})
            positions = follower.data_dir / "consumer-positions.json"

            def follower_rewound() -> bool:
                rows = json.loads(positions.read_bytes())["positions"] if positions.exists() else []
                mine = [r for r in rows if r["group"] == "g-rr" and r["topic"] == "rr"]
                return bool(mine) and all(r["ack"] == 0 for r in mine)

            wait_until(follower_rewound, 10, "the follower's copy of the reset")
            leader.kill9()
            wait_until(lambda: status(follower.endpoints).get("role") == "leader", 20, "lead")
            assert sorted(receive(c, 10)) == sorted(f"r{i}" for i in range(10))
        finally:
            c.shutdown()
    finally:
        for b in group:
            if b.running:
                b.stop()
