"""Consumer-group lag covers every queue of every topic a group consumes.

Method: a real broker with a metrics port; 20 messages on a 4-queue topic sent with the official
client; a group consumes 5 with ``txmq consume`` (one receive batch, so one queue). Before the
fix, ``group describe`` listed only that queue and ``group list`` said lag 0. Now lag is 15 in
``group list``, in ``group describe`` (all 4 queues, the never-read ones counted from their
earliest offset) and in the Prometheus metrics; a group that only subscribed shows lag 20, and
consuming the rest brings the first group to 0.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families

from tests.cli.test_cli import ok
from tests.integration import clients
from tests.integration.conftest import FAST, BrokerProcess
from tests.ports import free_port

DEADLINE_S = 30.0


def scraped_lag(metrics_port: int, group: str) -> float | None:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    for family in text_string_to_metric_families(text):
        if family.name == "txmq_consumer_group_lag":
            for sample in family.samples:
                if sample.labels.get("group") == group:
                    return sample.value
    return None


def groups(ep: list[str]) -> dict[str, dict[str, object]]:
    return {g["group"]: g for g in json.loads(ok("group", "list", "--json", *ep))["groups"]}


def wait_for(what: str, cond: Callable[[], bool]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)  # sleep: polling a condition with a bounded deadline


def test_lag_counts_queues_the_group_never_read(
    start_broker: Callable[..., BrokerProcess],
) -> None:
    metrics_port = free_port()
    broker = start_broker(*FAST, "--metrics-port", str(metrics_port))
    ep = ["--endpoints", broker.endpoints]
    ok("topic", "create", "lagged", "--queues", "4", *ep)
    producer = clients.producer(broker.endpoints, ("lagged",))
    try:
        for i in range(20):
            producer.send(clients.message("lagged", f"m{i}".encode()))
    finally:
        producer.shutdown()
    described = json.loads(ok("topic", "describe", "lagged", "--json", *ep))
    assert sum(q["max"] - q["min"] for q in described["queues"]) == 20

    lines = ok("consume", "lagged", "--group", "g5", "--max", "5", "--wait-s", "10", *ep)
    assert len(lines.splitlines()) == 5
    assert groups(ep)["g5"]["lag"] == 15
    queues = json.loads(ok("group", "describe", "g5", "--json", *ep))["queues"]
    assert sorted(q["queue"] for q in queues) == [0, 1, 2, 3]
    assert sum(q["lag"] for q in queues) == 15
    assert any(not q["read"] and q["lag"] > 0 for q in queues), queues
    assert "g5" in ok("group", "describe", "g5", *ep)
    assert scraped_lag(metrics_port, "g5") == 15

    # A live consumer that has received nothing yet: its subscription alone makes it count.
    idle = clients.SimpleConsumer(
        clients.config(broker.endpoints), "idle", {"lagged": clients.FilterExpression("*")}
    )
    idle.startup()
    try:
        wait_for("the idle group's subscription", lambda: "idle" in groups(ep))
        assert groups(ep)["idle"]["lag"] == 20
    finally:
        idle.shutdown()

    rest = ok("consume", "lagged", "--group", "g5", "--max", "15", "--wait-s", "20", *ep)
    assert len(rest.splitlines()) == 15
    assert groups(ep)["g5"]["lag"] == 0
    assert scraped_lag(metrics_port, "g5") == 0
