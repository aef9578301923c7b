"""Records kept as written (store/derived/recent.py): a read answered from the draft returns exactly
what decoding the log's bytes returns, only while the log holds those very bytes; the map stays
within its bounds. Real stores in tmp dirs."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import SMALL, Clock
from txmq.format import record as codec
from txmq.model import AppendResult, Record, RecordDraft, TxnFlag
from txmq.store.derived.recent import Recent, record
from txmq.store.log.segment import segment_name
from txmq.store.store import Store

DRAFTS = [
    RecordDraft(topic="t", queue_id=0, body=b"x" * 100, message_id="m0", keys=("k",)),
    RecordDraft(
        topic="t",
        queue_id=1,
        body=bytes(range(256)),
        flag=TxnFlag.COMMIT,
        message_id="m1",
        tag="tag é",
        keys=("a", "b c", "ключ"),
        properties={"TRAN_MSG_ID": "0af", "u": 'quote " and \\ and \n', "ü": "☃"},
        born_timestamp_ms=1_700_000_000_000,
        born_host="10.0.0.1",
        reconsume_times=3,
        prepared_offset=42,
    ),
    RecordDraft(topic="t", queue_id=0, body=b"y", born_host="h" * 300),  # cut by the encoder
    RecordDraft(topic="t", queue_id=0, body=b"z", born_host="hôte"),
    RecordDraft(topic="t", queue_id=0, body=b"w", properties={"n": 5}),  # type: ignore[dict-item]
]


def decoded(store: Store, rec: Record) -> Record:
    raw = store.log.read_raw(rec.physical_offset, rec.size)
    return codec.decode(raw, rec.physical_offset)


def test_a_kept_record_reads_as_its_decoded_bytes(tmp_path: Path, clock: Clock) -> None:
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    results = s.append_many(DRAFTS)
    kept = [s._recent.get(r.physical_offset) for r in results]
    # Not kept: a born host the encoder may cut (long, or not ASCII), a property not a str.
    assert [k is not None for k in kept] == [True, True, False, False, False]
    for r, k in zip(results, kept, strict=True):
        rec = s.read_at(r.physical_offset)  # always decoded from the log
        if k is not None:
            assert record(k) == rec
        got = s.read_queue(rec.topic, rec.queue_id, rec.queue_offset, 1).records
        assert got == (rec,)
    s.close()


def test_a_later_change_to_the_drafts_properties_is_not_read(tmp_path: Path, clock: Clock) -> None:
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    props = {"a": "1"}
    s.append(RecordDraft(topic="t", queue_id=0, body=b"x", properties=props))
    props["a"] = "2"
    assert dict(s.read_queue("t", 0, 0, 1).records[0].properties) == {"a": "1"}
    s.close()


def test_bytes_changed_in_the_log_are_decoded_and_reported(tmp_path: Path, clock: Clock) -> None:
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    results = [s.append(RecordDraft(topic="t", queue_id=0, body=b"x" * 50)) for _ in range(3)]
    r = results[1]
    assert s._recent.get(r.physical_offset) is not None
    seg = tmp_path / "commitlog" / segment_name(0)
    with seg.open("r+b") as f:  # one body byte, while the store is open
        f.seek(r.physical_offset + r.size - 1)
        f.write(b"y")
    got = s.read_queue("t", 0, 0, 10).records
    assert [g.queue_offset for g in got] == [0, 2]
    assert list(s.health.damaged) == [r.physical_offset]
    s.close()


def test_the_oldest_go_past_the_byte_bound_and_big_ones_are_not_kept() -> None:
    d = RecordDraft(topic="t", queue_id=0, body=b"x")
    recent = Recent(bytes_max=250, record_max=100)
    for at in range(0, 500, 100):
        recent.add(b"r" * 100, d, AppendResult(at, 100, at // 100, 7, ""))
    assert [at for at in range(0, 500, 100) if recent.get(at)] == [300, 400]
    recent.add(b"r" * 101, d, AppendResult(500, 101, 5, 7, ""))
    assert recent.get(500) is None
    recent.add(b"s" * 50, d, AppendResult(400, 50, 4, 7, ""))  # written again after a truncation
    entry = recent.get(400)
    assert entry is not None and entry[0] == b"s" * 50
    assert recent.get(300) is not None
