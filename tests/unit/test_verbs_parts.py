"""The operator verbs (docs/operations.md) on a broker's real parts, without a server.

Goal: the parts of each verb that a process test cannot steer into: a replica leader gives a
topic the queues its log holds records in (a follower promoted before it copied its leader's
growth of the topic).
Method: a real broker's parts (store, topics, positions) on a temporary directory.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from txmq.broker.config.broker_config import BrokerConfig
from txmq.broker.state.parts import Parts
from txmq.model import MessageType, RecordDraft


@pytest.fixture
def parts(tmp_path: Path) -> Iterator[Parts]:
    p = Parts(BrokerConfig(data_dir=tmp_path, port=0), now_ms=lambda: 1_700_000_000_000)
    yield p
    p.close()


def test_a_leader_gives_a_topic_the_queues_its_log_holds(parts: Parts) -> None:
    parts.topics.create("orders", 2, MessageType.NORMAL)
    parts.topics.create("quiet", 3, MessageType.NORMAL)
    # What a follower's copy of the log holds when its old leader had grown "orders" to 6.
    parts.store.append(RecordDraft(topic="orders", queue_id=5, body=b"x", message_id="m1"))
    parts.grow_topics_to_log()
    assert parts.topics.get("orders").queue_count == 6
    assert parts.topics.get("quiet").queue_count == 3, "a topic is never shrunk to its log"
