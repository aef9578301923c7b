"""Pure parts of the Spark connector, without Spark or a broker process: option parsing, the
admission-control split, the Java version probe, and the sink ledger resolver over a real store.

Goal: the offset arithmetic is deterministic and fair; the resolver commits exactly what the
ledger lists, rolls back the rest of a recorded batch, and waits for an unrecorded one. Method:
table cases, a seeded random check of ``admit`` invariants, and a real ``Store`` in tmp_path
holding ledger records for ``SinkLedger(store.find_by_key)``.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import SMALL, Clock
from txmq.broker.cluster.membership import PeerError
from txmq.errors import BadRequestError
from txmq.model import PROP_TRANSACTION_ID, Outcome, Record, RecordDraft, TxnFlag
from txmq.spark import numbering
from txmq.spark import options as opt
from txmq.spark.options import TxmqOptionError
from txmq.spark.session import java_major
from txmq.store.store import Store
from txmq.txn.ledger import (
    LEDGER_TOPIC,
    PROP_SINK_BATCH,
    PROP_SINK_LEDGER,
    PROP_SINK_QUERY,
    LedgerEntry,
    LedgerFormatError,
    SinkLedger,
    ledger_home,
)

NEEDS_JAVA = False  # no Spark session here (tests/spark/conftest.py's ``_java``)


def test_parse_spec() -> None:
    assert opt.parse_spec("earliest", "s", [0, 1], -2) == {0: -2, 1: -2}
    assert opt.parse_spec("latest", "s", [0, 1], -2) == {0: -1, 1: -1}
    assert opt.parse_spec('{"1": 7}', "s", [0, 1, 2], -1) == {0: -1, 1: 7, 2: -1}
    assert opt.parse_spec('{"257": 3}', "s", [0, 1, 256, 257], -2)[257] == 3
    for bad in ("{bad", "[1]", '{"x": 1}', '{"0": -3}', '{"0": true}', '{"5": 1}', '{"2": 0}'):
        with pytest.raises(TxmqOptionError):
            opt.parse_spec(bad, "startingOffsets", [0, 1, 256], -2)
    with pytest.raises(TxmqOptionError, match="queues are 0-1, 256"):
        opt.parse_spec('{"9": 0}', "startingOffsets", [0, 1, 256], -2)


def test_numbering_keeps_every_number_when_a_topic_grows() -> None:
    """Queue q of member m is m * 256 + q; one broker's numbers are its queue ids; a grown
    topic adds numbers and changes none (4 -> 8 queues on 2 members)."""
    four, eight = numbering.numbers([4, 4]), numbering.numbers([8, 8])
    assert four == [0, 1, 2, 3, 256, 257, 258, 259]
    assert set(four) < set(eight) and numbering.numbers([8]) == list(range(8))
    assert all(numbering.locate(numbering.number(m, q)) == (m, q) for m in (0, 2) for q in (0, 9))
    offsets = numbering.encode({0: 5, 256: 7}, 2)
    assert offsets == {"0": 5, "256": 7, "stride": 256}
    assert numbering.decode(offsets, 2) == {0: 5, 256: 7}
    assert numbering.encode({0: 5, 1: 2}, 1) == {"0": 5, "1": 2}
    assert numbering.decode({"0": 5, "1": 2}, 1) == {0: 5, 1: 2}


def test_numbering_reads_offsets_of_the_older_cluster_numbering() -> None:
    """A cluster checkpoint written before the stride (member after member, no gaps: 2
    members x 3 queues) means the same queues after it."""
    older = {"0": 10, "1": 11, "2": 12, "3": 20, "4": 21, "5": 22}
    assert numbering.decode(older, 2) == {0: 10, 1: 11, 2: 12, 256: 20, 257: 21, 258: 22}
    for bad in ({"0": 1, "1": 1, "2": 1}, {"0": 1, "2": 1}, {"0": 1, "stride": 4}):
        with pytest.raises(TxmqOptionError):
            numbering.decode(bad, 2)


def test_options() -> None:
    assert opt.lower_keys({"startingOffsets": "x"}) == {"startingoffsets": "x"}
    with pytest.raises(TxmqOptionError, match="unknown option"):
        opt.check_known({"typo": "1"}, opt.SOURCE_OPTIONS, "source")
    opt.check_known({"path": "p", "topic": "t"}, opt.SOURCE_OPTIONS, "source")
    assert opt.positive_int({"n": "5"}, "n") == 5
    for bad in ("0", "-1", "x"):
        with pytest.raises(TxmqOptionError):
            opt.positive_int({"n": bad}, "n")
    assert opt.boolean({}, "b", True) is True
    with pytest.raises(TxmqOptionError):
        opt.boolean({"b": "yes"}, "b", True)
    with pytest.raises(TxmqOptionError):
        opt.parse_checkpointed({"0": -1})


def test_ranges_are_deterministic_and_skip_empty_queues() -> None:
    got = opt.ranges({0: 5, 1: 3, 2: 9}, {2: 9, 0: 8, 1: 4})
    assert got == [opt.QueueRange(0, 5, 8), opt.QueueRange(1, 3, 4)]


def test_admit_shares_the_budget_fairly() -> None:
    assert opt.admit({0: 0, 1: 0}, {0: 100, 1: 100}, 10) == {0: 5, 1: 5}
    assert opt.admit({0: 0, 1: 0}, {0: 2, 1: 100}, 10) == {0: 2, 1: 8}
    assert opt.admit({0: 4}, {0: 4, 1: 3}, 10) == {0: 4, 1: 3}  # a new queue starts at 0


def test_admit_invariants_random(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(500):
        queues = rng.randint(1, 8)
        start = {q: rng.randint(0, 50) for q in range(queues)}
        latest = {q: start[q] + rng.choice([0, 0, rng.randint(0, 60)]) for q in range(queues)}
        budget = rng.randint(1, 200)
        end = opt.admit(start, latest, budget)
        taken = sum(end[q] - start[q] for q in range(queues))
        backlog = sum(latest[q] - start[q] for q in range(queues))
        assert all(start[q] <= end[q] <= latest[q] for q in range(queues))
        assert taken == min(budget, backlog)
        assert end == opt.admit(start, latest, budget)


def test_java_major() -> None:
    assert java_major('openjdk version "17.0.15" 2025-04-15') == 17
    assert java_major('java version "1.8.0_412"') == 8
    assert java_major("nonsense") == 0


def _half(tid: str, query: str = "q", batch: str = "7", home: str = "") -> Record:
    props = {PROP_TRANSACTION_ID: tid, PROP_SINK_QUERY: query, PROP_SINK_BATCH: batch}
    if home:
        props[PROP_SINK_LEDGER] = home
    return Record(
        topic="RMQ_SYS_TRANS_HALF_TOPIC",
        queue_id=0,
        queue_offset=-1,
        physical_offset=0,
        size=1,
        flag=TxnFlag.PREPARED,
        store_timestamp_ms=0,
        born_timestamp_ms=0,
        born_host="",
        reconsume_times=0,
        prepared_offset=-1,
        message_id="m",
        tag="",
        keys=(),
        properties=props,
        body=b"x",
    )


def test_ledger_resolver_over_a_real_store(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "store", SMALL, now_ms=Clock())
    try:
        ledger = SinkLedger(store.find_by_key)
        assert ledger.claims(_half("a")) and not ledger.claims(_half("a", query="")), (
            "only the sink's halves"
        )
        assert ledger.resolve(_half("a")) is None, "no record yet: ask again later"
        entry = LedgerEntry("q", "7", frozenset({"a", "b"}), ((0, 0), (1, 1)))
        assert LedgerEntry.decode(entry.key, entry.encode()) == entry
        store.append(
            RecordDraft(topic=LEDGER_TOPIC, queue_id=0, body=entry.encode(), keys=(entry.key,))
        )
        assert ledger.resolve(_half("a")) is Outcome.COMMITTED
        assert ledger(_half("b")) is Outcome.COMMITTED
        assert ledger.resolve(_half("zombie")) is Outcome.ROLLED_BACK, "failed attempt/replay"
        assert ledger.resolve(_half("a", batch="8")) is None, "another batch"
        store.append(RecordDraft(topic=LEDGER_TOPIC, queue_id=0, body=b"{", keys=("q:9",)))
        with pytest.raises(LedgerFormatError):
            ledger.resolve(_half("a", batch="9"))
    finally:
        store.close()


def test_ledger_record_is_read_once_per_batch_not_once_per_half(tmp_path: Path) -> None:
    """Check-back of a big batch asks the ledger once per half: the record (which lists every
    committed transaction) is looked up and decoded once, not once per half (O(n^2))."""
    store = Store.open(tmp_path / "store", SMALL, now_ms=Clock())
    try:
        lookups: list[str] = []

        def lookup(topic: str, key: str, max_count: int) -> list[Record]:
            lookups.append(key)
            return store.find_by_key(topic, key, max_count)

        ledger = SinkLedger(lookup)
        assert ledger.resolve(_half("a")) is None
        assert ledger.resolve(_half("a")) is None, "an unrecorded batch is asked again"
        assert len(lookups) == 2
        ids = frozenset(f"t{i}" for i in range(1000))
        entry = LedgerEntry("q", "7", ids, ((0, 0),))
        store.append(
            RecordDraft(topic=LEDGER_TOPIC, queue_id=0, body=entry.encode(), keys=(entry.key,))
        )
        for i in range(1000):
            assert ledger.resolve(_half(f"t{i}")) is Outcome.COMMITTED
        assert ledger.resolve(_half("zombie")) is Outcome.ROLLED_BACK
        assert len(lookups) == 3, "one more lookup for the whole recorded batch"
    finally:
        store.close()


def test_missing_java_is_one_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from txmq.spark.session import JavaMissingError, require_java

    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    with pytest.raises(JavaMissingError, match="has no bin/java"):
        require_java()
    monkeypatch.delenv("JAVA_HOME")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(JavaMissingError, match="Spark needs Java 17\\+ and none was found"):
        require_java()


def test_a_batch_has_one_ledger_home_whoever_asks() -> None:
    """The home depends on the batch and the member names only (not their order or who is up),
    and batches spread over the members."""
    members = ["b0", "b1", "b2"]
    homes = [ledger_home(f"q:{b}", members) for b in range(300)]
    assert homes == [ledger_home(f"q:{b}", list(reversed(members))) for b in range(300)]
    assert {h: homes.count(h) > 60 for h in members} == dict.fromkeys(members, True)
    assert ledger_home("q:1", ["solo"]) == "solo"
    with pytest.raises(BadRequestError):
        ledger_home("q:1", [])


def test_check_back_reads_the_ledger_on_the_batch_home(tmp_path: Path) -> None:
    """A half whose home is another member is decided from that member's ledger; while the home
    cannot answer the resolver raises (the coordinator asks again without spending a check);
    a half of this member, or naming none, reads the local ledger."""
    store = Store.open(tmp_path / "store", SMALL, now_ms=Clock())
    try:
        entry = LedgerEntry("q", "7", frozenset({"a"}), ((0, 0),))
        remote_log: dict[str, list[tuple[list[str], bytes]]] = {"b1": []}
        asked: list[str] = []

        def remote(member: str, topic: str, key: str, max_count: int) -> list[Any]:
            asked.append(member)
            if member not in remote_log:
                raise PeerError(f"{member} did not answer")
            return [r for r in remote_log[member] if key in r[0]][:max_count]

        ledger = SinkLedger(store.find_by_key)
        ledger.place("b0", remote)
        assert ledger.resolve(_half("a", home="b1")) is None, "nothing recorded on b1 yet"
        with pytest.raises(PeerError):
            ledger.resolve(_half("a", home="b2"))
        remote_log["b1"].append(([entry.key], entry.encode()))
        assert ledger.resolve(_half("a", home="b1")) is Outcome.COMMITTED
        assert ledger.resolve(_half("z", home="b1")) is Outcome.ROLLED_BACK
        assert asked == ["b1", "b2", "b1"], "the recorded batch is read once"
        local = LedgerEntry("q", "8", frozenset({"c"}), ((0, 0),))
        store.append(
            RecordDraft(topic=LEDGER_TOPIC, queue_id=0, body=local.encode(), keys=(local.key,))
        )
        assert ledger.resolve(_half("c", batch="8", home="b0")) is Outcome.COMMITTED
        assert ledger.resolve(_half("c", batch="8")) is Outcome.COMMITTED
        assert asked == ["b1", "b2", "b1"], "this member's own ledger is read locally"
    finally:
        store.close()
