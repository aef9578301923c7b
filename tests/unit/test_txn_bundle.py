"""Bundles (txn/bundle.py): many messages in one transaction, over a real Store and coordinator.

Goal: a bundle is checked before anything is stored (corrupt bytes, a message for another
topic, reserved properties, a wrong count are refused); its commit makes every message visible
in the real queue at once, each with its own id, keys, tag and properties plus the half's; a
rollback shows none; a check-back resolver decides a bundle like any half; and a crash after the
commit replays to the same outcome without a second copy. Method: real files and fsync, a
simulated clock; the broker's PrepareBundle path is exercised by the Spark sink tests.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import Clock
from tests.unit.test_txn_coordinator import open_tx
from txmq.errors import BadRequestError, CorruptRecordError, IllegalPropertyError
from txmq.model import PROP_TRANSACTION_ID, DecisionSource, Outcome, Record, RecordDraft
from txmq.store.store import Store
from txmq.txn import bundle

P = DecisionSource.PRODUCER


def _messages(topic: str, n: int, *, tag: str = "t") -> list[bytes]:
    return [
        bundle.encode_message(
            topic,
            f"row-{i}".encode(),
            message_id=f"M{i}",
            keys=[f"k{i}"],
            tag=tag,
            properties={"user": str(i)},
            born_timestamp_ms=123,
        )
        for i in range(n)
    ]


def _half(topic: str, messages: list[bytes], **props: str) -> RecordDraft:
    return RecordDraft(
        topic=topic,
        queue_id=1,
        body=b"".join(messages),
        message_id="BUNDLE",
        properties={**props, bundle.PROP_BUNDLE: str(len(messages))},
    )


def _queue(store: Store, topic: str, queue_id: int) -> list[Record]:
    return list(store.read_queue(topic, queue_id, 0, 100).records)


def test_a_bundle_is_checked_before_it_is_stored() -> None:
    blob = b"".join(_messages("out", 3))
    assert bundle.check(blob, topic="out", count=3, body_size_max=1024) == len(blob)
    with pytest.raises(BadRequestError, match="announced 4"):
        bundle.check(blob, topic="out", count=4, body_size_max=1024)
    with pytest.raises(BadRequestError, match="holds a message for"):
        bundle.check(blob, topic="other", count=3, body_size_max=1024)
    with pytest.raises(BadRequestError, match=r"1\.\.3 bytes"):
        bundle.check(blob, topic="out", count=3, body_size_max=3)
    torn = bytearray(blob)
    torn[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        bundle.check(bytes(torn), topic="out", count=3, body_size_max=1024)
    with pytest.raises(CorruptRecordError):
        bundle.check(blob[:-5], topic="out", count=3, body_size_max=1024)
    reserved = bundle.encode_message(
        "out", b"x", message_id="M", properties={"TXMQ_X": "1"}, born_timestamp_ms=0
    )
    with pytest.raises(IllegalPropertyError):
        bundle.check(reserved, topic="out", count=1, body_size_max=1024)
    with pytest.raises(BadRequestError, match=r"bundle holds 1\.\."):
        bundle.check(b"", topic="out", count=0, body_size_max=1024)


def test_commit_shows_every_message_at_once_and_rollback_none(tmp_path: Path) -> None:
    clock = Clock()
    store, tx = open_tx(tmp_path, clock)
    try:
        tid, _ = tx.prepare(_half("out", _messages("out", 5), SINK="s1"), producer_group="out")
        rolled, _ = tx.prepare(_half("out", _messages("out", 3, tag="r")), producer_group="out")
        assert _queue(store, "out", 1) == [], "halves are invisible"
        assert tx.end(tid, commit=True, source=P) is Outcome.COMMITTED
        assert tx.end(rolled, commit=False, source=P) is Outcome.ROLLED_BACK
        assert tx.end(tid, commit=True, source=P) is Outcome.COMMITTED, "idempotent"
        got = _queue(store, "out", 1)
        assert [r.body for r in got] == [f"row-{i}".encode() for i in range(5)]
        assert [r.message_id for r in got] == [f"M{i}" for i in range(5)]
        assert [r.keys for r in got] == [(f"k{i}",) for i in range(5)]
        assert {r.tag for r in got} == {"t"} and {r.born_timestamp_ms for r in got} == {123}
        for i, r in enumerate(got):
            assert r.properties["user"] == str(i) and r.properties["SINK"] == "s1"
            assert r.properties[PROP_TRANSACTION_ID] == tid
            assert bundle.PROP_BUNDLE not in r.properties
        assert store.find_by_message_id("M4") is not None
    finally:
        tx.close()
        store.close()
    # A crash-free reopen replays the commit records: same outcome, no second copy.
    store, tx = open_tx(tmp_path, clock)
    try:
        assert tx.end(tid, commit=True, source=P) is Outcome.COMMITTED
        assert len(_queue(store, "out", 1)) == 5
    finally:
        tx.close()
        store.close()


def test_check_back_resolver_commits_an_undecided_bundle(tmp_path: Path) -> None:
    clock = Clock()
    decided: list[str] = []

    def resolver(half: Record) -> Outcome | None:
        decided.append(half.message_id)
        return Outcome.COMMITTED

    store, tx = open_tx(tmp_path, clock, resolvers=[resolver])
    try:
        tid, _ = tx.prepare(_half("out", _messages("out", 4)), producer_group="out")
        clock.now += 5_000
        tx.due_checks(lambda group: True)
        assert decided == ["BUNDLE"]
        assert [r.body for r in _queue(store, "out", 1)] == [f"row-{i}".encode() for i in range(4)]
        assert tx.show(tid)["outcome"] == "committed"
    finally:
        tx.close()
        store.close()
