"""Model-based test of Store (hypothesis stateful) on the simulated disk.

Goal: any sequence of appends, batches, reads, flushes, retention, clean reopens, failed
fsyncs and simulated power losses leaves the store agreeing with a plain in-memory model.
Method: the model keeps the records the store acknowledged as durable (SYNC appends, or ASYNC
ones after ``flush``) and the batches still in doubt (ASYNC, or caught by a failed fsync).
After a crash (``SimDisk.crash``: unsynced bytes lost, the last write possibly torn) the store
must hold every durable record plus a whole-batch prefix of the doubtful ones, and its queues,
index and scans must agree with that. The ASYNC interval is the maximum, so only explicit
flushes sync and each example replays exactly.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from tests.conftest import Clock
from txmq.errors import StoreFencedError
from txmq.model import OP_TOPIC, FlushMode, RecordDraft, TxnFlag
from txmq.store.config import StoreConfig
from txmq.store.files.sim_disk import SimDisk
from txmq.store.store import Store

ROOT = Path("/sim/model")
SYNC = StoreConfig(segment_size_bytes=64 * 1024, body_size_max=16 * 1024, retention_ms=60_000)
ASYNC = replace(SYNC, flush_mode=FlushMode.ASYNC, flush_interval_ms=60_000)
TOPICS = ("a", "b", OP_TOPIC)
TAGS = ("", "x", "y")


@dataclass
class Rec:
    message_id: str
    topic: str
    queue_id: int
    flag: TxnFlag
    tag: str
    key: str
    size: int
    physical_offset: int = -1
    queue_offset: int = -1

    def draft(self) -> RecordDraft:
        return RecordDraft(
            topic=self.topic,
            queue_id=self.queue_id,
            body=body_of(self.message_id, self.size),
            flag=self.flag,
            message_id=self.message_id,
            tag=self.tag,
            keys=(self.key,),
        )

    @property
    def queued(self) -> bool:
        return self.flag in (TxnFlag.NORMAL, TxnFlag.COMMIT)


def body_of(message_id: str, size: int) -> bytes:
    return (message_id.encode() * (size // max(1, len(message_id)) + 1))[:size]


records = st.builds(
    lambda t, q, f, tag, k, size: Rec("", t, q, f, tag, k, size),
    st.sampled_from(TOPICS),
    st.integers(0, 2),
    st.sampled_from(list(TxnFlag)),
    st.sampled_from(TAGS),
    st.sampled_from(("k1", "k2", "k3")),
    st.integers(0, 3000),
)


class StoreModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.disk = SimDisk()
        self.clock = Clock()
        self.config = SYNC
        self.store = Store.open(ROOT, self.config, now_ms=self.clock, disk=self.disk)
        self.durable: list[Rec] = []
        self.doubtful: list[list[Rec]] = []
        self.next_queue: dict[tuple[str, int], int] = {}
        self.n = 0

    def teardown(self) -> None:
        self.store.close()

    # --- Writes. -----------------------------------------------------------------------------

    def _write(self, batch: list[Rec]) -> None:
        for r in batch:
            r.message_id = f"m{self.n}"
            self.n += 1
        results = self.store.append_many([r.draft() for r in batch])
        for r, res in zip(batch, results, strict=True):
            r.physical_offset = res.physical_offset
            r.queue_offset = res.queue_offset
            if r.queued:
                key = (r.topic, r.queue_id)
                assert res.queue_offset == self.next_queue.get(key, 0)
                self.next_queue[key] = res.queue_offset + 1
            else:
                assert res.queue_offset == -1
        if self.config is SYNC:
            self.durable.extend(batch)
        else:
            self.doubtful.append(batch)

    @rule(rec=records)
    def append(self, rec: Rec) -> None:
        self._write([rec])

    @rule(batch=st.lists(records, min_size=1, max_size=4))
    def append_many(self, batch: list[Rec]) -> None:
        self._write(batch)

    @precondition(lambda self: self.config is SYNC)
    @rule(rec=records, seed=st.integers(0, 2**32))
    def fsync_fails(self, rec: Rec, seed: int) -> None:
        """A failed fsync fences the store; the record in flight is in doubt until a restart
        recovers from what the disk really kept."""
        self.disk.fsync_error_after = self.disk.syncs
        rec.message_id = f"m{self.n}"
        self.n += 1
        with pytest.raises(StoreFencedError):
            self.store.append(rec.draft())
        with pytest.raises(StoreFencedError):
            self.store.append(rec.draft())
        self.doubtful.append([rec])
        self.disk.fsync_error_after = None
        self.crash(seed, torn=True, async_mode=False)

    @rule()
    def flush(self) -> None:
        self.store.flush()
        for batch in self.doubtful:
            self.durable.extend(batch)
        self.doubtful = []

    @rule(ms=st.sampled_from([1, 1_000, 70_000]))
    def advance_clock(self, ms: int) -> None:
        self.clock.advance(ms)

    @rule(keep_all=st.booleans())
    def retention(self, keep_all: bool) -> None:
        self.flush()
        keep_from = 0 if keep_all else self.store.log_end_offset
        deleted = self.store.delete_expired_segments(keep_from_offset=keep_from)
        assert deleted == 0 or not keep_all
        start = self.store.log_start_offset
        self.durable = [r for r in self.durable if r.physical_offset >= start]

    @rule(entries=st.sampled_from((1, 3, 205)))
    def derived_writes_every(self, entries: int) -> None:
        """Queue and index entries wait in memory until a file's buffer holds this many bytes
        (store/derived/dispatch.py): 20 writes them at every publish, 60 leaves a tail in memory at
        most, 4,100 (the default is 4,096) rarely writes before a checkpoint."""
        self.store._dispatcher.write_bytes = entries * 20

    @rule()
    def checkpoint(self) -> None:
        if not self.store.fenced:
            self.store.checkpoint()  # writes every buffered entry out first

    # --- Restarts. ---------------------------------------------------------------------------

    @rule(async_mode=st.booleans())
    def reopen_cleanly(self, async_mode: bool) -> None:
        self.store.close()
        self.flush_model_after_close()
        self.config = ASYNC if async_mode else SYNC
        self.store = Store.open(ROOT, self.config, now_ms=self.clock, disk=self.disk)
        assert not self.store.recovery.crashed

    def flush_model_after_close(self) -> None:
        for batch in self.doubtful:
            self.durable.extend(batch)
        self.doubtful = []

    @rule(seed=st.integers(0, 2**32), torn=st.booleans(), async_mode=st.booleans())
    def crash(self, seed: int, torn: bool, async_mode: bool) -> None:
        self.store.abandon()
        self.disk.crash(random.Random(seed), torn=torn)
        self.config = ASYNC if async_mode else SYNC
        self.store = Store.open(ROOT, self.config, now_ms=self.clock, disk=self.disk)
        assert self.store.recovery.crashed
        scanned = self.store.scan(0, 1_000_000)
        got = [r.message_id for r in scanned]
        base = [r.message_id for r in self.durable]
        assert got[: len(base)] == base, "every durable record survives, in order"
        extra, kept, flat = got[len(base) :], 0, []
        for i, batch in enumerate(self.doubtful):
            if flat == extra:
                break
            flat += [r.message_id for r in batch]
            kept = i + 1
        assert flat == extra, "unflushed records survive only as a prefix of whole batches"
        where = {r.message_id: r for r in scanned}
        for batch in self.doubtful[:kept]:
            for r in batch:  # a fenced append never learned its offsets
                r.physical_offset = where[r.message_id].physical_offset
                r.queue_offset = where[r.message_id].queue_offset
            self.durable.extend(batch)
        self.doubtful = []
        self.next_queue = {}
        for r in self.durable:
            if r.queued:
                self.next_queue[(r.topic, r.queue_id)] = r.queue_offset + 1

    # --- Checks. -----------------------------------------------------------------------------

    def _visible(self) -> list[Rec]:
        return self.durable + [r for batch in self.doubtful for r in batch]

    @precondition(lambda self: self.n > 0)
    @rule(topic=st.sampled_from(TOPICS), queue_id=st.integers(0, 2), tag=st.sampled_from(TAGS))
    def read_queue(self, topic: str, queue_id: int, tag: str) -> None:
        expect = [
            r for r in self._visible() if r.queued and (r.topic, r.queue_id) == (topic, queue_id)
        ]
        tags = frozenset({tag}) if tag else None
        read = self.store.read_queue(topic, queue_id, 0, 1024, tags=tags)
        want = [r.message_id for r in expect if tags is None or r.tag in tags]
        assert [r.message_id for r in read.records] == want
        for got in read.records:
            assert got.body == body_of(got.message_id, len(got.body))
        lo, hi = self.store.queue_offsets(topic, queue_id)
        if expect:
            assert (lo, hi) == (expect[0].queue_offset, expect[-1].queue_offset + 1)
        assert hi == self.next_queue.get((topic, queue_id), 0)

    @precondition(lambda self: self.n > 0)
    @rule(pick=st.integers(0, 10**9))
    def find(self, pick: int) -> None:
        visible = self._visible()
        if not visible:
            return
        r = visible[pick % len(visible)]
        found = self.store.find_by_message_id(r.message_id)
        assert found is not None and found.physical_offset == r.physical_offset
        by_key = self.store.find_by_key(r.topic, r.key, 64)
        want = [x.message_id for x in reversed(visible) if (x.topic, x.key) == (r.topic, r.key)]
        assert [x.message_id for x in by_key] == want[:64]

    @invariant()
    def log_agrees(self) -> None:
        got = [(r.message_id, r.flag) for r in self.store.scan(0, 1_000_000)]
        assert got == [(r.message_id, r.flag) for r in self._visible()]


TestStoreModel = StoreModel.TestCase
TestStoreModel.settings = settings(
    max_examples=int(os.environ.get("TXMQ_MODEL_EXAMPLES", "40")),
    stateful_step_count=30,
    deadline=None,
)
