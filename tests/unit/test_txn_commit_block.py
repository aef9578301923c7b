"""A commit's properties block cut from its half's is byte for byte what the encoder
writes for the commit's properties.

Goal: the commit record on disk is identical to the one the full encoder would write, for any
properties: non-ASCII, quotes, backslashes, keys that end in a half-only key's name, values that
spell a whole pair (``,"REAL_TOPIC":"t"``), half-only keys set by the sender. Method: the edit
against ``properties_json`` of the expected mapping (hypothesis); then real prepares and commits
through a Store and Transactions in a tmp dir, each commit record read back from the log and
compared with the full encoder's output for the same draft at the same place.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import SMALL, Clock
from txmq import model as m
from txmq.format import record as codec
from txmq.format.properties import properties_json
from txmq.model import AppendResult, DecisionSource, RecordDraft, TxnFlag, stored_record
from txmq.store.store import Store
from txmq.txn import records
from txmq.txn.coordinator import Transactions

# The properties a half adds or drops: a sender's among them changes the half's layout.
SPECIAL = {
    m.PROP_REAL_TOPIC, m.PROP_REAL_QUEUE_ID, m.PROP_TRANSACTION_ID, m.PROP_PRODUCER_GROUP,
    m.PROP_CLIENT_ID, m.PROP_DECISION_SOURCE,
}  # fmt: skip
# Text that trips a cut made without the structure: quotes, backslashes, separators, the
# half's keys' names, non-ASCII (escaped as \\uXXXX), control characters.
ODD = [*sorted(SPECIAL), m.PROP_CHECK_IMMUNITY_MS, 'x"REAL_TOPIC', ',"REAL_TOPIC":"t"']
ODD += [',"TRAN_MSG_ID":', "REAL_TOPIC\\", "\\", '"', "t", ""]
PIECES = [*'"\\,:{}aR é€😀\x00\x1f', "REAL_TOPIC", "TRAN_MSG_ID", '":"', '","']
AWKWARD = st.lists(st.sampled_from(PIECES), max_size=8).map("".join)
TEXT = st.one_of(
    st.text(max_size=10),
    AWKWARD,
    st.sampled_from(ODD),
)
PROPS = st.dictionaries(TEXT, TEXT, max_size=6)


def _half(
    user: Mapping[str, object], topic: str, immunity: int | None, pg: str, cid: str
) -> RecordDraft:
    draft = RecordDraft(
        topic=topic, queue_id=0, body=b"\x00body\xff", message_id="m1", tag="t",
        properties=user,  # type: ignore[arg-type]  # a library caller's values, not only str
    )  # fmt: skip
    return records.half_draft(
        draft,
        queue_id=3,
        transaction_id="tid-1",
        producer_group=pg,
        client_id=cid,
        check_immunity_ms=immunity,
    )


def _placed(draft: RecordDraft) -> bytes:
    return codec.place(codec.encode(draft, queue_offset=3, store_timestamp_ms=5), 700)


def _without_block(d: RecordDraft) -> RecordDraft:
    return RecordDraft(
        d.topic, d.queue_id, d.body, d.flag, d.message_id, d.tag, d.keys, d.properties,
        d.born_timestamp_ms, d.born_host, d.reconsume_times, d.prepared_offset,
    )  # fmt: skip


def _check(user: Mapping[str, object], topic: str, immunity: int | None, pg: str, cid: str) -> bool:
    """Half and commit as the new path writes them against the full encoder's; whether the
    commit's block was cut from the half's."""
    half = _half(user, topic, immunity, pg, cid)
    if half.properties_block:
        assert half.properties_block == properties_json(dict(half.properties))
    assert _placed(half) == _placed(_without_block(half))
    rec = stored_record(half, AppendResult(100, len(_placed(half)), -1, 5, "m1"))
    for source in DecisionSource:
        commit = records.commit_draft(rec, source, half.properties_block)
        assert bool(commit.properties_block) == bool(half.properties_block)
        assert _placed(commit) == _placed(records.commit_draft(rec, source)), (user, source)
    return bool(half.properties_block)


@settings(max_examples=400, deadline=None)
@given(
    PROPS,
    st.one_of(st.sampled_from(["orders", 'tö"p\\ic', "話題"]), st.text(min_size=1, max_size=8)),
    st.one_of(st.none(), st.integers(-5, 10**12)),
    TEXT,
    TEXT,
)
def test_the_commit_record_is_the_one_the_encoder_writes(
    user: dict[str, str], topic: str, immunity: int | None, pg: str, cid: str
) -> None:
    cut = _check(user, topic, immunity, pg, cid)
    if not SPECIAL & (user.keys() - {m.PROP_CHECK_IMMUNITY_MS}):
        assert cut, "the sender's properties leave the half's layout as half_draft makes it"


def test_pairs_spelled_inside_strings_and_odd_senders() -> None:
    """What a text search without the structure gets wrong, and the drafts not cut."""
    tid_pair = ',"TRAN_MSG_ID":"tid-1"'
    immunity = ',"CHECK_IMMUNITY_TIME_IN_SECONDS":"5"'
    cut = [
        {},
        {"a": tid_pair, "b": ',"REAL_TOPIC":"orders"'},
        {'x"TRAN_MSG_ID': "tid-1", 'x"REAL_TOPIC': "orders", "z\\": immunity},
        {"é": 'va"l\\ue\\', "k,": "😀\x00\x1f", "{": "}"},
    ]
    for user in cut:
        assert _check(user, "orders", 5, 'p,"CLIENT_ID":"', 'c"1' + immunity), user
        assert _check(user, "話題", None, "", ""), user
    not_cut: list[Mapping[str, object]] = [
        {m.PROP_REAL_TOPIC: "spoof"},
        {m.PROP_TRANSACTION_ID: "mine", "a": "b"},
        {"a": "b", m.PROP_DECISION_SOURCE: "me"},
    ]
    for odd in not_cut:
        assert not _check(odd, "orders", 5, "g", "c"), odd
    # A library caller's container or number: the half as before (its commit's properties are
    # not str -> str, which the compiled commit_draft refuses, as it did before this change).
    for values in ({"a": {"TRAN_MSG_ID": "nested", "x": 1}}, {"a": 1}):
        half = _half(values, "orders", 5, "g", "c")
        assert not half.properties_block
        assert _placed(half) == _placed(_without_block(half))
    assert _check({m.PROP_CHECK_IMMUNITY_MS: "7", "a": "b"}, "orders", None, "g", "c")


def test_commits_written_through_the_store_are_the_full_encoders_bytes(
    tmp_path: Path, clock: Clock
) -> None:
    """Prepare and commit for real; each commit record in the log equals the full encoder's
    output for the commit of the half as read back from the log, at the same place."""
    store = Store.open(tmp_path / "store", SMALL, now_ms=clock)
    tx = Transactions(store, data_dir=tmp_path, now_ms=clock, timeout_ms=1000)
    cases = [
        {},
        {"user": "u"},
        {"é": 'va"l\\ue', "k,": ',"REAL_TOPIC":"orders"', "x": "😀"},
        {m.PROP_REAL_TOPIC: "spoof", m.PROP_DECISION_SOURCE: "me", m.PROP_TRANSACTION_ID: "mine"},
        {'x"REAL_TOPIC': "orders", m.PROP_CHECK_IMMUNITY_MS: "9", "z": "\x00\x1f"},
    ]
    try:
        for n, user in enumerate(cases):
            draft = RecordDraft(
                topic="orders" if n % 2 else "話題", queue_id=n % 2, body=b"b" * n,
                message_id=f"m{n}", tag="t", keys=(f"k{n}",), properties=user,
            )  # fmt: skip
            tid, res = tx.prepare(
                draft, producer_group="g", client_id='c"1', check_immunity_ms=n * 1000 or None
            )
            tx.end(tid, commit=True, source=DecisionSource.PRODUCER)
            half = store.read_at(res.physical_offset)
            (commit,) = [
                r for r in store.scan(res.physical_offset, 1 << 20)
                if r.flag is TxnFlag.COMMIT and r.prepared_offset == res.physical_offset
            ]  # fmt: skip
            want = codec.place(
                codec.encode(
                    records.commit_draft(half, DecisionSource.PRODUCER),
                    queue_offset=commit.queue_offset,
                    store_timestamp_ms=commit.store_timestamp_ms,
                ),
                commit.physical_offset,
            )
            assert store.log.read_raw(commit.physical_offset, commit.size) == want, user
    finally:
        tx.close()
        store.close()
