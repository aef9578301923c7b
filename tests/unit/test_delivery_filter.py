"""Filter expressions of subscriptions (broker/consume/filter.py): tags, SQL92 filters over what a
record shows them (user properties, TAGS, KEYS; never the broker's own properties), and both
applied by a real store's queue reads and a group's positions: what a filter passes over is
settled, so the group's ack offset moves past it (lag counts it as consumed, as RocketMQ does)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import SMALL, Clock
from txmq import limits
from txmq.broker.consume.filter import RecordProperties, matches, parse_filter, parse_tags
from txmq.broker.consume.positions import Ask, ConsumerPositions
from txmq.errors import IllegalFilterExpressionError
from txmq.model import PROP_MESSAGE_GROUP, PROP_REAL_TOPIC, RecordDraft
from txmq.store.store import Store


def test_parse() -> None:
    assert parse_tags("") is None
    assert parse_tags(" * ") is None
    assert parse_tags("a") == frozenset({"a"})
    assert parse_tags("a || b||c ") == frozenset({"a", "b", "c"})
    assert parse_tags("a || *") is None
    assert matches(None, "x") and matches(frozenset({"x"}), "x")
    assert not matches(frozenset({"x"}), "y")


@pytest.mark.parametrize("text", ["a||", "||", "a|| ||b", "t" * 256])
def test_illegal(text: str) -> None:
    with pytest.raises(IllegalFilterExpressionError):
        parse_tags(text)


def test_too_many_tags() -> None:
    with pytest.raises(IllegalFilterExpressionError):
        parse_tags("||".join(f"t{i}" for i in range(limits.TAGS_PER_EXPRESSION_MAX + 1)))


def test_the_type_decides_how_an_expression_reads() -> None:
    tags = parse_filter("a > 5", sql=False)  # a tag named 'a > 5'
    assert tags.tags == frozenset({"a > 5"}) and tags.where is None
    sql = parse_filter("a > 5", sql=True)
    assert sql.tags is None and sql.where is not None
    assert parse_filter("*", sql=False).where is None


def test_a_refused_expression_is_refused_each_time() -> None:
    """Parsed filters are kept between receives; a refusal is not kept as a filter."""
    for _ in range(2):
        with pytest.raises(IllegalFilterExpressionError, match="column 4"):
            parse_filter("a >", sql=True)


def _store(tmp_path: Path, clock: Clock) -> Store:
    return Store.open(tmp_path / "store", SMALL, now_ms=clock)


def test_what_a_record_shows_a_filter(tmp_path: Path, clock: Clock) -> None:
    store = _store(tmp_path, clock)
    props = {"color": "red", PROP_REAL_TOPIC: "t", PROP_MESSAGE_GROUP: "g1"}
    store.append(RecordDraft("t", 0, b"x", tag="A", keys=("k1", "k2"), properties=props))
    store.append(RecordDraft("t", 0, b"y"))
    with_all, bare = store.read_queue("t", 0, 0, 2).records
    seen = RecordProperties(with_all)
    assert dict(seen) == {"color": "red", "TAGS": "A", "KEYS": "k1 k2"}
    assert seen.get(PROP_REAL_TOPIC) is None and seen.get(PROP_MESSAGE_GROUP) is None
    assert dict(RecordProperties(bare)) == {} and RecordProperties(bare).get("TAGS") is None
    hit = parse_filter("TAGS = 'A' AND color IN ('red') AND KEYS CONTAINS 'k2'", sql=True).where
    assert hit is not None and hit(with_all) and not hit(bare)
    hidden = parse_filter(f"{PROP_REAL_TOPIC} IS NULL AND TAGS IS NOT NULL", sql=True).where
    assert hidden is not None and hidden(with_all) and not hidden(bare)
    store.close()


def test_a_store_read_applies_the_filter_and_passes_what_it_skips(
    tmp_path: Path, clock: Clock
) -> None:
    store = _store(tmp_path, clock)
    for i in range(10):
        store.append(RecordDraft("t", 0, f"m{i}".encode(), properties={"n": str(i)}))
    where = parse_filter("n >= 7", sql=True).where
    read = store.read_queue("t", 0, 0, 2, where=where)
    assert [r.body for r in read.records] == [b"m7", b"m8"]
    assert read.next_offset == 9  # past the skipped ones, before the one not yet read
    none = store.read_queue("t", 0, 0, 32, where=parse_filter("n > 100", sql=True).where)
    assert none.records == () and none.next_offset == 10
    store.close()


def test_a_filtered_read_decodes_a_bounded_number_of_records(tmp_path: Path, clock: Clock) -> None:
    store = _store(tmp_path, clock)
    bound = limits.READ_FILTER_RECORDS_MAX
    store.append_many([RecordDraft("t", 0, b"x", properties={"n": "0"})] * (bound + 10))
    where = parse_filter("n > 100000", sql=True).where
    read = store.read_queue("t", 0, 0, 32, where=where)
    assert read.records == () and read.next_offset == bound
    again = store.read_queue("t", 0, read.next_offset, 32, where=where)
    assert again.records == () and again.next_offset == bound + 10
    store.close()


def test_a_groups_position_passes_filtered_out_messages(tmp_path: Path, clock: Clock) -> None:
    """Lag counts what the filter passed over as consumed: the ack offset reaches the end once
    the matching messages are acked."""
    store = _store(tmp_path, clock)
    for i in range(12):
        store.append(RecordDraft("t", 0, f"m{i}".encode(), properties={"n": str(i)}))
    p = ConsumerPositions(store, tmp_path, attempts_max=3, now_ms=clock)
    where = parse_filter("n IN ('2', '5') OR n > 9", sql=True).where
    ask = Ask(tags=None, where=where, batch=32, invisible_ms=1_000, now_ms=clock.now, fifo=False)
    got, _dead = p.receive("g", "t", [0], ask)
    assert [d.record.body for d in got] == [b"m2", b"m5", b"m10", b"m11"]
    assert p.offset("g", "t", 0) == 2  # m2 is in flight; m0 and m1 are settled
    for d in got:
        p.ack("g", d.receipt_handle)
    assert p.offset("g", "t", 0) == 12
    store.close()
