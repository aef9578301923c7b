"""A store opened with a read hold (``Store.open(visible_end=...)``) and the acknowledged end
kept beside the log (store/replica/acked.py): ADR 0005, "readers see only what the in-sync replicas
have", from the moment a replica opens as a SYNC leader.

Real stores in tmp dirs with small segments (so a hold and a cut cross segment rolls).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import SMALL, Clock
from txmq.errors import OffsetNotFoundError
from txmq.model import RecordDraft, TxnFlag
from txmq.store.files.disk import OsDisk
from txmq.store.replica.acked import (
    FILE_NAME,
    AckedEnd,
    cut_acked_end,
    load_acked_end,
    save_acked_end,
)
from txmq.store.replica.hold import Hold
from txmq.store.replica.truncate import truncate_closed
from txmq.store.store import Store


def _bodies(store: Store, topic: str = "a") -> list[bytes]:
    return [r.body for r in store.read_queue(topic, 0, 0, 100).records]


def _written(path: Path, n: int) -> list[int]:
    """A closed store of ``n`` 9 KiB records in queue a/0 (several segments); each record's
    end offset."""
    store = Store.open(path, SMALL, now_ms=Clock())
    ends = []
    for i in range(n):
        r = store.append(RecordDraft("a", 0, bytes([i]) * 9_000, message_id=f"m{i}"))
        ends.append(r.physical_offset + r.size)
    store.checkpoint()  # the checkpoint vouches for all of them: the open must cut it back
    store.close()
    return ends


def test_a_store_opened_with_a_visible_end_holds_the_rest_back(tmp_path: Path) -> None:
    ends = _written(tmp_path / "s", 8)
    store = Store.open(tmp_path / "s", SMALL, now_ms=Clock(), visible_end=ends[2])
    # Readers see the first three records only; the rest is durable, held, not readable.
    assert [b[0] for b in _bodies(store)] == [0, 1, 2]
    assert store.queue_offsets("a", 0) == (0, 3)
    assert store.log_end_offset == ends[2] and store.durable_end_offset == ends[-1]
    with pytest.raises(OffsetNotFoundError):
        store.read_at(ends[2])
    # The transaction book reads through the hold (its decisions are this leader's).
    assert store.read_at(ends[2], held=True).body[0] == 3
    assert [r.body[0] for r in store.scan(0, 100, held=True)] == list(range(8))
    assert len(store.scan(0, 100)) == 3
    # A write takes the queue offset after the held records, not after the visible ones.
    hold = Hold(store)
    assert hold.held == 5
    late = store.append(RecordDraft("a", 0, b"late", message_id="late"))
    assert late.queue_offset == 8 and hold.held == 6
    # The in-sync replicas have it all: readable in log order.
    hold.release(ends[5])
    assert store.queue_offsets("a", 0) == (0, 6) and hold.held == 3
    hold.release(store.durable_end_offset)
    assert [b[0] for b in _bodies(store)] == [*range(8), ord("l")]
    store.close()
    # Reopened without a hold: everything readable, nothing lost or doubled.
    again = Store.open(tmp_path / "s", SMALL, now_ms=Clock())
    assert len(_bodies(again)) == 9 and again.queue_offsets("a", 0) == (0, 9)
    again.close()


def test_what_a_hold_never_released_is_held_again_or_shown_by_the_next_open(
    tmp_path: Path,
) -> None:
    ends = _written(tmp_path / "s", 5)
    store = Store.open(tmp_path / "s", SMALL, now_ms=Clock(), visible_end=ends[1])
    Hold(store)
    store.close()  # the checkpoint vouches only for what was readable
    held = Store.open(tmp_path / "s", SMALL, now_ms=Clock(), visible_end=ends[3])
    assert len(_bodies(held)) == 4
    Hold(held)
    held.close()
    shown = Store.open(tmp_path / "s", SMALL, now_ms=Clock())
    assert len(_bodies(shown)) == 5
    shown.close()


def test_a_half_message_past_the_visible_end_is_still_the_books(tmp_path: Path) -> None:
    """A held tail's half and commit records are read by the transaction book's replay."""
    store = Store.open(tmp_path / "s", SMALL, now_ms=Clock())
    first = store.append(RecordDraft("a", 0, b"plain", message_id="p"))
    half = store.append(RecordDraft("a", 0, b"half", message_id="h", flag=TxnFlag.PREPARED))
    store.close()
    again = Store.open(
        tmp_path / "s", SMALL, now_ms=Clock(), visible_end=first.physical_offset + first.size
    )
    Hold(again)
    assert again.read_at(half.physical_offset, held=True).flag is TxnFlag.PREPARED
    assert [r.message_id for r in again.scan(0, 10, held=True)] == ["p", "h"]
    again.close()


def test_the_kept_end_is_never_past_the_log_and_comes_down_with_a_cut(tmp_path: Path) -> None:
    disk = OsDisk()
    ends = _written(tmp_path / "s", 6)
    store_dir = tmp_path / "s"
    assert load_acked_end(disk, store_dir, ends[-1]) == 0  # none kept: everything held
    kept = AckedEnd(disk, store_dir, ends[-1])
    assert kept.due(ends[3], now_ms=0)  # the first one at once
    kept.save(ends[3], now_ms=0)
    assert not kept.due(ends[4], now_ms=999) and kept.due(ends[4], now_ms=1_000)
    assert not kept.due(ends[2], now_ms=5_000)  # never lower
    assert load_acked_end(disk, store_dir, ends[-1]) == ends[3]
    assert load_acked_end(disk, store_dir, ends[1]) == ends[1]  # read no further than the log
    # A divergent tail cut below it: the kept end comes down before the log does.
    truncate_closed(store_dir, SMALL, ends[2], disk)
    assert load_acked_end(disk, store_dir, 10**12) == ends[2]
    cut_acked_end(disk, store_dir, ends[4])  # above it: unchanged
    assert load_acked_end(disk, store_dir, 10**12) == ends[2]
    (store_dir / FILE_NAME).write_text("{not json")
    assert load_acked_end(disk, store_dir, 10**12) == 0  # unreadable: the safe direction
    save_acked_end(disk, store_dir, ends[0])
    assert AckedEnd(disk, store_dir, ends[-1]).saved == ends[0]
