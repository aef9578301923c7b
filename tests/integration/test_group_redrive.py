"""Re-driving a consumer group's DLQ (``txmq group redrive``) to a live official client.

Goal: after a poison-message fix, an operator re-drives the DLQ once: the group's consumer,
still running, receives the message again with its id, keys, tag, properties and body (attempt
1), the topic's other group does not, and repeating the command, also after the broker was
killed with SIGKILL and restarted, sends nothing more; a re-drive cut short (``--max``) and
finished after a SIGKILL sends each dead letter exactly once; bad input is one ``txmq:`` line
with exit 2.
Method: a real broker process (3 delivery attempts); the unmodified official Python client
(SimpleConsumers that never ack the poison, with a 1 s invisible time, so it dies in seconds);
the CLI as a subprocess; the copies counted with ``message find --json``.
"""

from __future__ import annotations

import json
import time

from rocketmq import Message, SimpleConsumer

from tests.cli.test_cli import ok, txmq
from tests.integration.clients import consumer, message, producer
from tests.integration.conftest import BrokerProcess, wait_until
from tests.integration.test_topic_update import one_line_error
from txmq.client.admin import call

DEADLINE_S = 60.0


def dlq_size(broker: BrokerProcess, group: str) -> int:
    return int(call(broker.endpoints, "GroupDetail", {"group": group})["dlq_size"])


def fail_until_dead(broker: BrokerProcess, c: SimpleConsumer, group: str, n: int) -> set[str]:
    """Receive with a 1 s invisible time, ack what is not poison, until ``n`` letters died;
    the bodies acked."""
    acked: set[str] = set()
    deadline = time.monotonic() + DEADLINE_S
    while dlq_size(broker, group) < n:
        assert time.monotonic() < deadline, "the poison never reached the DLQ"
        for m in c.receive(32, 1) or []:
            if not m.body.startswith(b"poison"):
                c.ack(m)
                acked.add(m.body.decode())
    return acked


def take(c: SimpleConsumer, n: int) -> list[Message]:
    """The first ``n`` messages ``c`` receives (30 s invisible), not acked."""
    got: list[Message] = []
    deadline = time.monotonic() + DEADLINE_S
    while len(got) < n and time.monotonic() < deadline:
        got += c.receive(32, 30) or []
    return got


def redrive(broker: BrokerProcess, *args: str) -> dict[str, object]:
    got: dict[str, object] = json.loads(
        ok("group", "redrive", *args, "--json", "--endpoints", broker.endpoints)
    )
    return got


def test_a_poison_message_goes_back_once_to_its_live_consumer(broker: BrokerProcess) -> None:
    ep = ["--endpoints", broker.endpoints]
    ok("topic", "create", "jobs", "--queues", "2", *ep)
    p = producer(broker.endpoints, ("jobs",))
    sent = {}
    for body in ("ok-0", "ok-1", "poison"):
        m = message("jobs", body.encode(), tag="T", keys=f"key-{body}")
        m.add_property("color", "red")
        sent[body] = p.send(m).message_id
    p.shutdown()
    auditors = consumer(broker.endpoints, "auditors", "jobs")
    workers = consumer(broker.endpoints, "workers", "jobs")
    try:
        got = take(auditors, 3)
        for m in got:
            auditors.ack(m)
        assert sorted(m.body for m in got) == [b"ok-0", b"ok-1", b"poison"]
        assert fail_until_dead(broker, workers, "workers", 1) == {"ok-0", "ok-1"}
        plan = redrive(broker, "workers", "--dry-run")
        assert plan["total"] == 1 and plan["dry_run"] is True
        assert not (workers.receive(32, 30) or []), "a dry run sends nothing"
        shown = ok("group", "redrive", "workers", *ep)
        assert "sent back 1 dead letters" in " ".join(shown.split())
        again = take(workers, 1)
        assert [m.body for m in again] == [b"poison"]
        back = again[0]
        assert back.message_id == sent["poison"] and back.tag == "T"
        assert list(back.keys) == ["key-poison"] and back.properties == {"color": "red"}
        assert back.delivery_attempt == 1
        workers.ack(back)
        assert not (auditors.receive(32, 30) or []), "the other group never sees the copy"
        assert redrive(broker, "workers")["total"] == 0
        broker.kill9()
        broker.start()
        assert redrive(broker, "workers")["total"] == 0, "once, also after a crash"
    finally:
        workers.shutdown()
        auditors.shutdown()
    found = json.loads(
        ok("message", "find", "--key", "key-poison", "--topic", "jobs", "--json", *ep)
    )
    counts = sorted(m["properties"].get("TXMQ_REDRIVE_COUNT", "-") for m in found["messages"])
    assert counts == ["-", "1"], "the original and one copy, which says it was re-driven"


def test_an_interrupted_redrive_sends_each_letter_exactly_once(broker: BrokerProcess) -> None:
    ep = ["--endpoints", broker.endpoints]
    ok("topic", "create", "batch", "--queues", "2", *ep)
    p = producer(broker.endpoints, ("batch",))
    for i in range(6):
        p.send(message("batch", f"poison-{i}".encode(), keys="poisoned"))
    p.shutdown()
    c = consumer(broker.endpoints, "crunchers", "batch")
    try:
        fail_until_dead(broker, c, "crunchers", 6)
    finally:
        c.shutdown()
    assert redrive(broker, "crunchers", "--max", "2")["total"] == 2
    broker.kill9()  # the command stopped there, and the broker with it
    broker.start()
    assert redrive(broker, "crunchers")["total"] == 4
    assert redrive(broker, "crunchers")["total"] == 0
    found = json.loads(ok("message", "find", "--key", "poisoned", "--topic", "batch", "--json",
                          "--max", "100", *ep))  # fmt: skip
    copies = [m["body"] for m in found["messages"] if "TXMQ_REDRIVE_COUNT" in m["properties"]]
    assert sorted(copies) == [f"poison-{i}" for i in range(6)], "each exactly once"
    c = consumer(broker.endpoints, "crunchers", "batch")
    try:
        got: list[bytes] = []
        wait_until(lambda: got.extend(m.body for m in _acked(c)) or len(got) >= 6, 30, "copies")
        assert sorted(got) == sorted(f"poison-{i}".encode() for i in range(6))
    finally:
        c.shutdown()


def _acked(c: SimpleConsumer) -> list[object]:
    got = c.receive(32, 30) or []
    for m in got:
        c.ack(m)
    return got


def test_bad_redrives_are_one_line_exit_2(broker: BrokerProcess) -> None:
    ep = ["--endpoints", broker.endpoints]
    assert "consumer group" in one_line_error(txmq("group", "redrive", "bad group!", *ep), 2)
    assert "nosuch" in one_line_error(txmq("group", "redrive", "g", "--topic", "nosuch", *ep), 2)
    one_line_error(txmq("group", "redrive", "g", "--max", "0", *ep), 2)
    assert redrive(broker, "never-failed")["total"] == 0, "a group without a DLQ: nothing"
