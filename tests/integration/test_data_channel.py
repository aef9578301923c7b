"""The data channel's record pull (``txmq.data.v1.Data/PullRecords``, broker/data_channel/pull.py)
against a
real broker process: it returns only committed messages, in queue order, as verified records;
every bad request answers a typed refusal and leaves the broker serving.

Method: the Spark connector's BrokerClient (the channel's one user) sends normal and
transactional messages and pulls them back; raw calls send malformed bodies."""

from __future__ import annotations

import json
import struct

import pytest

from tests.integration.conftest import BrokerProcess
from txmq.errors import (
    CODE_BAD_REQUEST,
    IllegalOffsetError,
    IllegalTopicError,
    TopicNotFoundError,
)
from txmq.protocol.channels import DATA_SERVICE
from txmq.spark.client import BrokerClient, build_message


def test_pull_returns_committed_records_in_order(broker: BrokerProcess) -> None:
    with BrokerClient(broker.endpoints) as c:
        c.send([build_message("pull", f"n{i}".encode(), keys=[f"k{i}"]) for i in range(5)])
        halves = c.send(
            [build_message("pull", f"t{i}".encode(), transactional=True) for i in range(4)]
        )
        for i, half in enumerate(halves):
            c.end_transaction(half, commit=i % 2 == 0)
        queues = c.queue_count("pull")
        got = []
        for q in range(queues):
            end = c.query_offset("pull", q, "latest")
            recs = list(c.read_range("pull", q, 0, end))
            assert [r.queue_offset for r in recs] == list(range(end))
            got += [r.body.decode() for r in recs]
        assert sorted(got) == sorted([f"n{i}" for i in range(5)] + ["t0", "t2"])
        first = c.pull("pull", 0, 0, 1)
        assert first.count <= 1 and first.next_offset == len(first.records())


def test_bad_pulls_are_refused_with_typed_errors(broker: BrokerProcess) -> None:
    with BrokerClient(broker.endpoints) as c:
        c.send([build_message("pull2", b"x")])
        with pytest.raises(TopicNotFoundError):
            c.pull("no-such-topic", 0, 0, 10)
        with pytest.raises(IllegalTopicError):
            c.pull("pull2", 999, 0, 10)
        with pytest.raises(IllegalTopicError):
            c.pull("bad topic!", 0, 0, 10)
        with pytest.raises(IllegalOffsetError):
            c.pull("pull2", 0, -1, 10)
        rpc = c.channel.unary_unary(f"/{DATA_SERVICE}/PullRecords")
        for body in (b"{not json", b"[1]", json.dumps({"topic": "pull2"}).encode()):
            raw = rpc(body, timeout=10)
            (n,) = struct.unpack_from(">I", raw)
            header = json.loads(raw[4 : 4 + n])
            assert header["ok"] is False and header["code"] == CODE_BAD_REQUEST, header
            assert len(raw) == 4 + n
        for bad in ({"max_count": 0}, {"max_count": 10**6}, {"max_bytes": 10**12}):
            args = {"topic": "pull2", "queue_id": 0, "offset": 0, **bad}
            raw = rpc(json.dumps(args).encode(), timeout=10)
            (n,) = struct.unpack_from(">I", raw)
            header = json.loads(raw[4 : 4 + n])
            assert header["code"] == CODE_BAD_REQUEST and next(iter(bad)) in header["error"]
        # Still serving after the abuse.
        assert c.queue_count("pull2") >= 1


def test_queue_offsets_lists_every_queue_in_one_call(broker: BrokerProcess) -> None:
    with BrokerClient(broker.endpoints) as c:
        c.send([build_message("ranges", b"x") for _ in range(3)])  # one batch: one queue
        c.send([build_message("ranges", b"y")])
        ranges = c.queue_ranges("ranges")
        assert len(ranges) == c.queue_count("ranges") >= 2
        assert ranges == [
            (c.query_offset("ranges", q, "earliest"), c.query_offset("ranges", q, "latest"))
            for q in range(len(ranges))
        ]
        assert sorted(hi for _, hi in ranges if hi) == [1, 3]
        with pytest.raises(TopicNotFoundError):
            c.queue_ranges("never-created")  # and it stays that way: no auto-create here
        with pytest.raises(TopicNotFoundError):
            c.queue_count("never-created")
        with pytest.raises(IllegalTopicError):
            c.queue_ranges("bad topic!")
        raw = c.channel.unary_unary(f"/{DATA_SERVICE}/QueueOffsets")(b"[1]", timeout=10)
        (n,) = struct.unpack_from(">I", raw)
        assert json.loads(raw[4 : 4 + n])["code"] == CODE_BAD_REQUEST
