"""The official Node.js client (npm ``rocketmq-client-nodejs`` 1.0.8), unmodified, against the
real broker: normal, FIFO and delay sends from a Producer declaring five topics at construction,
transactions committed, rolled back and decided by check-back, SimpleConsumer with a tag filter
and changeInvisibleDuration, PushConsumer with failures retried on a normal and a FIFO topic, and
no message flagged corrupted.

Method: the session's ``node_client`` fixture (tests/tools.py) installs the client with npm once
into a cache directory kept between runs; without node, npm or the package the test skips with
the reason (and fails under TXMQ_REQUIRE_TOOLS=1). ``node/compat.js`` runs every step with
bounded waits and prints one JSON line, checked here. Topics are created explicitly.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.integration.conftest import BrokerProcess
from txmq.client.admin import call

SCRIPT = Path(__file__).with_name("node") / "compat.js"
RUN_TIMEOUT_S = 240
TOPICS = {
    "normal": ("node-normal", "normal"),
    "fifo": ("node-fifo", "fifo"),
    "delay": ("node-delay", "delay"),
    "txn": ("node-txn", "transaction"),
    "push": ("node-push", "normal"),
    "pushFifo": ("node-push-fifo", "fifo"),
}


def test_node_client_end_to_end(broker: BrokerProcess, node_client: Path, tmp_path: Path) -> None:
    for name, kind in TOPICS.values():
        call(broker.endpoints, "TopicCreate", {"name": name, "queues": 2, "type": kind})
    names = {key: name for key, (name, _) in TOPICS.items()}
    # HOME: the client's FIFO service logs to ~/logs/rocketmq whatever logger it is given.
    env = dict(os.environ, NODE_PATH=str(node_client), HOME=str(tmp_path))
    r = subprocess.run(
        ["node", str(SCRIPT), broker.endpoints, json.dumps(names)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    assert r.returncode == 0, r.stderr[-3000:] + broker.log_tail()
    got = json.loads(r.stdout.strip().splitlines()[-1])
    # Five topics declared at construction: startup used to hang (the Settings reply came
    # before the client listened for it); the broker repeats that reply.
    assert got["startupMs"] < 10_000
    simple = got["simple"]
    assert simple["bodies"] == ["A0", "A3", "B1"] and simple["tags"] == ["A", "B"]
    assert simple["keys"] == ["key-0", "key-1", "key-3"]
    assert simple["redelivered"] == [[simple["first"], 2]], "back after changeInvisibleDuration"
    assert got["fifoDelay"]["fifoOrder"] == ["f0", "f1", "f2", "f3", "f4"]
    assert got["fifoDelay"]["delayBody"] == "later"
    assert got["fifoDelay"]["delayWaitedMs"] >= 1_900, "a 2 s delay message came early"
    assert got["txn"]["checked"] == ["commit-by-check", "rollback-by-check"]
    assert got["txn"]["received"] == ["commit-by-check", "tx-commit"]
    assert got["push"]["normal"] == [[f"p{i}", 2] for i in range(4)], "failed once, redelivered"
    assert [body for body, _ in got["push"]["fifo"]] == ["q0", "q1", "q2", "q3"], "in order"
    assert dict(got["push"]["fifo"])["q1"] == 2, "the failed FIFO message was retried"
    assert got["views"] >= 20
    assert got["corrupted"] == [], "body digests the client rejects"
