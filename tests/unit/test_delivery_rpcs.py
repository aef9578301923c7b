"""ConsumeRpcs handlers called directly (no network) over a real store and topic registry in a
temp directory, with a manual clock: the ReceiveMessage reply shape (status, delivery
timestamp, messages with handle, MD5 digest and attempt), MESSAGE_NOT_FOUND after a long poll,
a long poll woken by notify_appended, per-entry ack statuses, client-forwarded dead letters
readable from the DLQ topic, the sweep, assignments and the offset RPCs."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as sv

from tests.conftest import SMALL, Clock
from txmq import errors, limits
from txmq.broker.config.broker_config import BrokerConfig
from txmq.broker.consume.positions import ConsumerPositions
from txmq.broker.consume.rpcs import ConsumeRpcs
from txmq.broker.metrics.prometheus import Metrics
from txmq.broker.topics.registry import TopicRegistry
from txmq.model import PROP_ORIGIN_MESSAGE_ID, RecordDraft
from txmq.store.store import Store


@pytest.fixture
async def rpcs(tmp_path: Path, clock: Clock) -> AsyncIterator[ConsumeRpcs]:
    config = BrokerConfig(
        data_dir=tmp_path, port=0, delivery_attempts_max=2, retry_backoff_initial_ms=100
    )
    store = Store.open(tmp_path / "store", SMALL, now_ms=clock)
    topics = TopicRegistry(tmp_path / "topics.json", store.disk, auto_create=True, default_queues=2)
    executor = ThreadPoolExecutor(max_workers=4)
    r = ConsumeRpcs(
        store=store,
        topics=topics,
        config=config,
        now_ms=clock,
        executor=executor,
        metrics=Metrics(),
        positions=ConsumerPositions(
            store,
            tmp_path,
            store.disk,
            attempts_max=config.delivery_attempts_max,
            backoff_initial_ms=config.retry_backoff_initial_ms,
            backoff_max_ms=config.retry_backoff_max_ms,
            now_ms=clock,
        ),
        endpoint=("127.0.0.1", 4242),
    )
    await r.start()
    yield r
    await r.close()
    executor.shutdown(wait=True)
    store.close()


def _append(r: ConsumeRpcs, topic: str, body: bytes, queue_id: int = 0, tag: str = "") -> None:
    r.topics.ensure(topic)
    r.store.append(
        RecordDraft(topic=topic, queue_id=queue_id, body=body, tag=tag, message_id=body.hex())
    )


def _receive_request(topic: str, *, poll_ms: int = 0, tags: str = "*", batch: int = 32) -> Any:
    req = sv.ReceiveMessageRequest(batch_size=batch)
    req.group.name = "g"
    req.message_queue.topic.name = topic
    req.filter_expression.type = pb.TAG
    req.filter_expression.expression = tags
    req.invisible_duration.seconds = 5
    req.long_polling_timeout.FromMilliseconds(poll_ms)
    return req


async def _receive(r: ConsumeRpcs, req: Any) -> list[Any]:
    """The replies as the client reads them (a message's reply comes as its bytes)."""
    return [
        sv.ReceiveMessageResponse.FromString(item) if isinstance(item, bytes) else item
        async for item in r.ReceiveMessage(req, None)
    ]


async def test_receive_reply_shape_and_ack_statuses(rpcs: ConsumeRpcs, clock: Clock) -> None:
    _append(rpcs, "t", b"hello", tag="A")
    _append(rpcs, "t", b"other", tag="B")
    items = await _receive(rpcs, _receive_request("t", tags="A"))
    assert [i.WhichOneof("content") for i in items] == ["status", "delivery_timestamp", "message"]
    assert items[0].status.code == errors.CODE_OK
    msg = items[2].message
    assert msg.body == b"hello"
    assert msg.system_properties.body_digest.checksum == hashlib.md5(b"hello").hexdigest().upper()
    assert msg.system_properties.delivery_attempt == 1
    assert msg.system_properties.queue_offset == 0
    ack = sv.AckMessageRequest()
    ack.group.name = "g"
    ack.entries.add(message_id="m", receipt_handle=msg.system_properties.receipt_handle)
    ack.entries.add(message_id="x", receipt_handle="forged")
    res = sv.AckMessageResponse.FromString(await rpcs.AckMessage(ack, None))
    assert [e.status.code for e in res.entries] == [
        errors.CODE_OK,
        errors.CODE_INVALID_RECEIPT_HANDLE,
    ]
    assert res.status.code == errors.CODE_INVALID_RECEIPT_HANDLE


async def test_empty_long_poll_then_woken_by_notify(rpcs: ConsumeRpcs) -> None:
    items = await _receive(rpcs, _receive_request("t", poll_ms=50))
    assert [i.status.code for i in items] == [errors.CODE_MESSAGE_NOT_FOUND]
    task = asyncio.create_task(_receive(rpcs, _receive_request("t", poll_ms=10_000)))
    for _ in range(1000):  # until the long poll is parked, so only the notify can wake it
        if rpcs.waiting("t"):
            break
        await asyncio.sleep(0.005)  # sleep: poll interval of this bounded wait
    assert rpcs.waiting("t")
    _append(rpcs, "t", b"late", queue_id=1)
    rpcs.notify_appended("t", 1)
    items = await asyncio.wait_for(task, timeout=5)
    assert [i.message.body for i in items[2:]] == [b"late"]


async def test_a_cancelled_long_poll_leaves_the_others_waiting(rpcs: ConsumeRpcs) -> None:
    """Long polls on one topic share its wake-up: a client that goes away (its RPC cancelled)
    must not wake or cancel the others, and a woken topic leaves no waiter behind."""
    polls = [asyncio.create_task(_receive(rpcs, _receive_request("t", poll_ms=10_000)))]
    for _ in range(1000):  # until the first long poll is parked
        if rpcs.waiting("t"):
            break
        await asyncio.sleep(0.005)  # sleep: poll interval of this bounded wait
    polls.append(asyncio.create_task(_receive(rpcs, _receive_request("t", poll_ms=10_000))))
    for _ in range(1000):  # until the second long poll is parked beside the first
        if rpcs.waiting("t") == 2:
            break
        await asyncio.sleep(0.005)  # sleep: poll interval of this bounded wait
    assert rpcs.waiting("t") == 2
    polls[0].cancel()
    await asyncio.gather(polls[0], return_exceptions=True)
    assert rpcs.waiting("t") == 1 and not polls[1].done()
    _append(rpcs, "t", b"late")
    rpcs.notify_appended("t", 0)
    items = await asyncio.wait_for(polls[1], timeout=5)
    assert [i.message.body for i in items[2:]] == [b"late"]
    assert rpcs.waiting("t") == 0


async def test_forward_to_dlq_then_read_the_dlq(rpcs: ConsumeRpcs, clock: Clock) -> None:
    _append(rpcs, "t", b"poison")
    (msg,) = [i.message for i in (await _receive(rpcs, _receive_request("t")))[2:]]
    req = sv.ForwardMessageToDeadLetterQueueRequest(
        receipt_handle=msg.system_properties.receipt_handle, delivery_attempt=1
    )
    req.group.name = "g"
    assert (await rpcs.ForwardMessageToDeadLetterQueue(req, None)).status.code == errors.CODE_OK
    again = await rpcs.ForwardMessageToDeadLetterQueue(req, None)
    assert again.status.code == errors.CODE_INVALID_RECEIPT_HANDLE
    dlq = rpcs.store.read_queue("%DLQ%g", 0, 0, 10).records
    assert [(d.body, d.properties[PROP_ORIGIN_MESSAGE_ID]) for d in dlq] == [
        (b"poison", msg.system_properties.message_id)
    ]
    reader = _receive_request("%DLQ%g")
    reader.group.name = "dlq-reader"
    items = await _receive(rpcs, reader)
    assert [i.message.body for i in items[2:]] == [b"poison"]


async def test_sweep_dead_letters_an_abandoned_last_attempt(
    rpcs: ConsumeRpcs, clock: Clock
) -> None:
    _append(rpcs, "t", b"slow")
    for attempt in (1, 2):  # delivery_attempts_max=2
        items = await _receive(rpcs, _receive_request("t"))
        assert items[2].message.system_properties.delivery_attempt == attempt
        clock.advance(5_000)
    await rpcs.sweep()
    assert [d.body for d in rpcs.store.read_queue("%DLQ%g", 0, 0, 10).records] == [b"slow"]
    assert rpcs.positions.offset("g", "t", 0) == 1


async def test_assignment_and_offset_rpcs(rpcs: ConsumeRpcs, clock: Clock) -> None:
    for i in range(3):
        _append(rpcs, "t", f"m{i}".encode())
        clock.advance(1_000)
    qa = sv.QueryAssignmentRequest()
    qa.topic.name = "t"
    res = await rpcs.QueryAssignment(qa, None)
    assert [a.message_queue.id for a in res.assignments] == [0, 1]
    assert res.assignments[0].message_queue.broker.endpoints.addresses[0].port == 4242
    pull = sv.PullMessageRequest(offset=1, batch_size=10)
    pull.message_queue.topic.name = "t"
    items = [i async for i in rpcs.PullMessage(pull, None)]
    assert [i.message.body for i in items[1:-1]] == [b"m1", b"m2"]
    assert items[-1].next_offset == 3
    q = sv.QueryOffsetRequest(query_offset_policy=pb.END)
    q.message_queue.topic.name = "t"
    assert (await rpcs.QueryOffset(q, None)).offset == 3
    q.query_offset_policy = pb.TIMESTAMP
    q.timestamp.FromMilliseconds(clock.now - 1_500)
    assert (await rpcs.QueryOffset(q, None)).offset == 2
    up = sv.UpdateOffsetRequest(offset=2)
    up.group.name = "g"
    up.message_queue.topic.name = "t"
    assert (await rpcs.UpdateOffset(up, None)).status.code == errors.CODE_OK
    get = sv.GetOffsetRequest()
    get.group.name = "g"
    get.message_queue.topic.name = "t"
    assert (await rpcs.GetOffset(get, None)).offset == 2
    up.offset = 99
    assert (await rpcs.UpdateOffset(up, None)).status.code == errors.CODE_ILLEGAL_OFFSET


async def test_sql92_filters_on_receive_and_pull(rpcs: ConsumeRpcs) -> None:
    rpcs.topics.ensure("t")
    for i in range(6):
        props = {"n": str(i)} if i != 4 else {}
        draft = RecordDraft("t", 0, f"m{i}".encode(), tag="A" if i % 2 else "B", properties=props)
        rpcs.store.append(draft)
    req = _receive_request("t")
    req.filter_expression.type = pb.SQL
    req.filter_expression.expression = "n >= 2 AND TAGS <> 'A' OR n IS NULL"
    items = await _receive(rpcs, req)
    assert [i.message.body for i in items[2:]] == [b"m2", b"m4"]
    pull = sv.PullMessageRequest(offset=0, batch_size=10)
    pull.message_queue.topic.name = "t"
    pull.filter_expression.type = pb.SQL
    pull.filter_expression.expression = "n IN ('1', '5')"
    pulled = [i async for i in rpcs.PullMessage(pull, None)]
    assert [i.message.body for i in pulled[1:-1]] == [b"m1", b"m5"]
    assert pulled[-1].next_offset == 6
    req.filter_expression.expression = "n >= 2 AND"
    refused = await _receive(rpcs, req)
    assert [i.status.code for i in refused] == [errors.CODE_ILLEGAL_FILTER_EXPRESSION]
    assert "column 11 (at the end)" in refused[0].status.message
    pull.filter_expression.expression = "n BETWEEN 'a' AND 'b'"
    pulled = [i async for i in rpcs.PullMessage(pull, None)]
    assert [i.status.code for i in pulled] == [errors.CODE_ILLEGAL_FILTER_EXPRESSION]


async def test_a_sql92_long_poll_crosses_a_skipped_backlog_without_waiting(
    rpcs: ConsumeRpcs,
) -> None:
    """Each look reads READ_FILTER_RECORDS_MAX records a queue; a look that moved the scan is
    followed by the next at once, not after the long poll's REDELIVERY_POLL_S: six looks fit in
    a 2 s long poll only that way (waiting would take 2.5 s)."""
    rpcs.topics.ensure("t")
    skipped = 6 * limits.READ_FILTER_RECORDS_MAX - 100
    skip = RecordDraft("t", 0, b"no", properties={"n": "0"})
    for start in range(0, skipped, 1000):  # batches that fit the test store's small segments
        rpcs.store.append_many([skip] * min(1000, skipped - start))
    rpcs.store.append(RecordDraft("t", 0, b"yes", properties={"n": "1"}))
    req = _receive_request("t", poll_ms=2_000)
    req.filter_expression.type = pb.SQL
    req.filter_expression.expression = "n = 1"
    items = await _receive(rpcs, req)
    assert [i.message.body for i in items[2:]] == [b"yes"]
    assert rpcs.positions.offset("g", "t", 0) == skipped  # all passed over, the match in flight
