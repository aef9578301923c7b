"""Model-based test of the store under a full disk, bit rot and transient read errors.

Goal: on top of the crash model (test_store_model.py), ENOSPC injected at any write point
(log reservation, record, blank, consume queue, index, checkpoint, markers) and bit flips in
the log never make the store disagree with what it acknowledged: a refused append changes
nothing and leaves the store writable; an append the disk stopped half-way fences the store and
is in doubt like a crash; a flipped body byte below the checkpoint loses that one record to
readers (reported in ``health``) and nothing else; a bit flipped in flight (a transient read
error) loses nothing.
Method: hypothesis stateful over SimDisk. ``disk_full`` makes the k-th write-side call from now
fail with ENOSPC (k drawn by hypothesis, so every write point of an append is reached);
``bit_rot`` flips the last body byte of a record below the checkpoint; ``flaky_read`` flips one
bit of the next commit-log read.
"""

from __future__ import annotations

import os

from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from tests.model.test_store_model import ROOT, SYNC, Rec, StoreModel, records
from txmq.errors import DiskFullError, StoreFencedError
from txmq.store.log.segment import segment_name


class FaultModel(StoreModel):
    def __init__(self) -> None:
        super().__init__()
        self.damaged: list[Rec] = []

    def _visible(self) -> list[Rec]:
        gone = {r.message_id for r in self.damaged}
        return [r for r in super()._visible() if r.message_id not in gone]

    @rule(rec=records, after=st.integers(0, 8), seed=st.integers(0, 2**32))
    def disk_full(self, rec: Rec, after: int, seed: int) -> None:
        self.disk.fail_writes_after = self.disk.writes + after
        outcome = "ok"
        try:
            self._write([rec])
        except DiskFullError:
            outcome = "refused"
        except StoreFencedError:
            outcome = "fenced"
        finally:
            self.disk.fail_writes_after = None
        event(f"disk full: {outcome}")
        if outcome == "refused":
            assert not self.store.fenced, "a refusal does not fence"
            return  # nothing written: the invariant checks the log is unchanged
        if outcome == "fenced":
            # The disk failed after the record reached the log: in doubt, as after a crash.
            self.doubtful.append([rec])
            self.crash(seed, torn=False, async_mode=self.config is not SYNC)

    @precondition(lambda self: self.durable)
    @rule(pick=st.integers(0, 10**9))
    def bit_rot(self, pick: int) -> None:
        limit = self.store._checkpoints.checkpointed
        gone = {r.message_id for r in self.damaged}
        cands = [
            r
            for r in self.durable
            if r.size > 0 and r.message_id not in gone and r.physical_offset >= 0
        ]
        cands = [r for r in cands if r.physical_offset + r.size + 200 < limit]
        if not cands:
            return
        r = cands[pick % len(cands)]
        size = self.store.read_at(r.physical_offset).size
        last = r.physical_offset + size - 1  # the body's last byte
        seg = last - last % SYNC.segment_size_bytes
        self.disk.flip(ROOT / "commitlog" / segment_name(seg), last - seg, 0x20)
        self.damaged.append(r)
        event("bit rot below the checkpoint")

    @precondition(lambda self: self.durable)
    @rule(pick=st.integers(0, 10**9), byte=st.integers(0, 11), mask=st.sampled_from([1, 0x40]))
    def queue_rot(self, pick: int, byte: int, mask: int) -> None:
        """A flipped bit in a consume-queue entry (its offset or size): readers must still get
        exactly the queue's records, the queue rebuilt from the log."""
        gone = {r.message_id for r in self.damaged}
        cands = [r for r in self.durable if r.queued and r.message_id not in gone]
        if not cands:
            return
        r = cands[pick % len(cands)]
        per_file = SYNC.consume_queue_entries_per_file
        base = r.queue_offset - r.queue_offset % per_file
        path = ROOT / "consumequeue" / r.topic / str(r.queue_id) / segment_name(base)
        if not self.disk.exists(path):
            return
        self.disk.flip(path, (r.queue_offset - base) * 20 + byte, mask)
        event("consume-queue entry rot")
        self.read_queue_skips_only_damage(r.topic, r.queue_id)

    @precondition(lambda self: self.n > 0)
    @rule()
    def flaky_read(self) -> None:
        self.disk.flip_next_read = True
        self.log_agrees()
        self.disk.flip_next_read = False

    @rule(keep_all=st.booleans())
    def retention(self, keep_all: bool) -> None:
        super().retention(keep_all)
        start = self.store.log_start_offset
        self.damaged = [r for r in self.damaged if r.physical_offset >= start]

    def crash(self, seed: int, torn: bool, async_mode: bool) -> None:
        gone = {r.message_id for r in self.damaged}
        self.durable = [r for r in self.durable if r.message_id not in gone]
        super().crash(seed, torn, async_mode)
        self.durable += [r for r in self.damaged]
        self.durable.sort(key=lambda r: r.physical_offset)
        for r in self.damaged:
            if r.queued:
                key = (r.topic, r.queue_id)
                self.next_queue[key] = max(self.next_queue.get(key, 0), r.queue_offset + 1)

    @precondition(lambda self: self.n > 0)
    @rule(topic=st.sampled_from(("a", "b")), queue_id=st.integers(0, 2))
    def read_queue_skips_only_damage(self, topic: str, queue_id: int) -> None:
        want = [
            r.message_id
            for r in self._visible()
            if r.queued and (r.topic, r.queue_id) == (topic, queue_id)
        ]
        read = self.store.read_queue(topic, queue_id, 0, 1024)
        assert [r.message_id for r in read.records] == want
        for r in self.damaged:
            if (r.topic, r.queue_id) == (topic, queue_id) and r.queued:
                assert r.physical_offset in self.store.health.damaged

    # The base class's read_queue checks queue bounds against visible records only.
    read_queue = None  # type: ignore[assignment]


TestFaultModel = FaultModel.TestCase
TestFaultModel.settings = settings(
    max_examples=int(os.environ.get("TXMQ_MODEL_EXAMPLES", "40")),
    stateful_step_count=30,
    deadline=None,
)
