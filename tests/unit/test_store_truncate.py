"""Cutting a divergent tail (txmq.store.replica.truncate) on real files, and refetching only it.

Method: a leader and a follower store with small segments (so tails cross segment rolls); the
follower copies the leader (ship/append_shipped, both stamping epoch histories as the broker
does); then a failover at the store level: the follower becomes the leader of a later epoch
and writes its own records while the old leader writes a tail nobody copied. The old leader
cuts where ``divergence_point`` says, reopens and fetches the rest: it must then hold exactly
the new leader's log (records, queues, index), and have fetched only what lies past the cut.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.conftest import SMALL, Clock
from tests.unit.test_store_replica import _fill, _same
from txmq.format.record import enters_queue
from txmq.model import RecordDraft
from txmq.store.derived import checkpoint as cpfile
from txmq.store.files.disk import OsDisk
from txmq.store.files.sim_disk import SimDisk
from txmq.store.replica.epochs import EpochFile, divergence_point
from txmq.store.replica.shipping import append_shipped, ship
from txmq.store.replica.truncate import truncate_closed
from txmq.store.store import Store


def copy(leader: Store, follower: Store, epochs: EpochFile, leader_epochs: EpochFile) -> int:
    """Catch ``follower`` up, adopting the leader's epochs as follower.py does; bytes fetched."""
    start = follower.log_end_offset
    for _ in range(10_000):
        s = ship(leader, follower.log_end_offset, 64 * 1024)
        if not s.data:
            return follower.log_end_offset - start
        epochs.adopt(leader_epochs.history, follower.log_end_offset, s.next_offset)
        append_shipped(follower, s.data)
    raise AssertionError("no catch-up in 10000 fetches")


def consistent(store: Store) -> None:
    """Queues hold exactly the log's records of each queue; the index finds every record."""
    records = store.scan(0, 100_000)
    want: dict[tuple[str, int], list[int]] = {}
    for r in records:
        if enters_queue(r.flag):
            want.setdefault((r.topic, r.queue_id), []).append(r.physical_offset)
    newest = {r.message_id: r for r in records}  # _fill reuses ids; the index finds the newest
    for r in newest.values():
        assert store.find_by_message_id(r.message_id) == r
    for (topic, qid), offsets in want.items():
        assert store.queue_offsets(topic, qid) == (0, len(offsets))
        got = store.read_queue(topic, qid, 0, 100_000).records
        assert [r.physical_offset for r in got] == offsets
    for topic, qid in [(t, q) for t in ("a", "b") for q in range(3)]:
        if (topic, qid) not in want:
            assert store.queue_offsets(topic, qid)[1] == 0


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_an_old_leader_cuts_only_its_divergent_tail(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    clock, disk = Clock(), OsDisk()
    old = Store.open(tmp_path / "old", SMALL, now_ms=clock)
    new = Store.open(tmp_path / "new", SMALL, now_ms=clock)
    old_epochs = EpochFile(disk, tmp_path / "old", 0)
    new_epochs = EpochFile(disk, tmp_path / "new", 0)
    old_epochs.append(11, 0)  # the old replica leads epoch 11
    _fill(old, rng, 40)
    copy(old, new, new_epochs, old_epochs)
    agreed = new.log_end_offset
    # The old leader writes a tail nobody copies (several segments' worth, or a few records).
    _fill(old, rng, rng.choice([3, 40]))
    cut_ids = {r.message_id for r in old.scan(agreed, 100_000)}
    # The follower takes over as epoch 17 and writes its own records.
    new_epochs.append(17, new.log_end_offset)
    _fill(new, rng, 30)
    point = divergence_point(old_epochs.history, old.log_end_offset, new_epochs.history,
                             new.log_end_offset)  # fmt: skip
    assert point == agreed
    old_end = old.log_end_offset
    old.close()
    assert truncate_closed(tmp_path / "old", SMALL, point, disk) == old_end - agreed
    old = Store.open(tmp_path / "old", SMALL, now_ms=clock)
    assert old.log_end_offset == agreed
    assert old.recovery.records_redispatched == 0  # the checkpoint was moved to the cut
    consistent(old)
    for m in cut_ids:  # _fill reuses ids: an id may name a kept record, never a cut one
        found = old.find_by_message_id(m)
        assert found is None or found.physical_offset < agreed
    old_epochs = EpochFile(disk, tmp_path / "old", old.log_end_offset)
    assert old_epochs.history == [(11, 0)]
    fetched = copy(new, old, old_epochs, new_epochs)
    assert fetched == new.log_end_offset - agreed  # only the new leader's part
    _same(new, old)
    assert old_epochs.history == [(11, 0), (17, agreed)]
    old.close()
    old = Store.open(tmp_path / "old", SMALL, now_ms=clock)
    _same(new, old)
    # The replica carries on as a store: queue offsets continue where the leader's are.
    nxt = old.append(RecordDraft("a", 0, b"after", message_id="after"))
    assert nxt.queue_offset == new.queue_offsets("a", 0)[1]
    old.close()
    new.close()


def test_a_cut_at_a_segment_start_and_at_zero(tmp_path: Path) -> None:
    clock, disk = Clock(), OsDisk()
    store = Store.open(tmp_path / "s", SMALL, now_ms=clock)
    _fill(store, random.Random(5), 60)
    assert len(store.log.segments) >= 3
    second = store.log.segments[1].start
    end = store.log_end_offset
    store.close()
    assert truncate_closed(tmp_path / "s", SMALL, second, disk) == end - second
    store = Store.open(tmp_path / "s", SMALL, now_ms=clock)
    # The segment that starts at the cut stays, empty: the next write lands there.
    assert store.log_end_offset == second and len(store.log.segments) == 2
    consistent(store)
    assert store.append(RecordDraft("a", 0, b"x", message_id="x")).physical_offset == second
    store.close()
    truncate_closed(tmp_path / "s", SMALL, 0, disk)
    store = Store.open(tmp_path / "s", SMALL, now_ms=clock)
    assert store.log_end_offset == 0 and store.scan(0, 10) == []
    assert store.queues() == {} or all(
        store.queue_offsets(t, q)[1] == 0 for t, n in store.queues().items() for q in range(n)
    )
    store.close()


def test_a_checkpoint_below_the_cut_is_kept(tmp_path: Path) -> None:
    clock, disk = Clock(), OsDisk()
    store = Store.open(tmp_path / "s", SMALL, now_ms=clock)
    _fill(store, random.Random(6), 20)
    store.close()
    before = cpfile.load(disk, tmp_path / "s")
    assert before is not None
    store = Store.open(tmp_path / "s", SMALL, now_ms=clock)
    _fill(store, random.Random(7), 20)
    later = store.scan(before.log_offset, 100_000)
    cut = later[len(later) // 2].physical_offset
    store.abandon()  # as a kill: the checkpoint stays where the last close put it
    truncate_closed(tmp_path / "s", SMALL, cut, disk)
    assert cpfile.load(disk, tmp_path / "s") == before
    store = Store.open(tmp_path / "s", SMALL, now_ms=clock)
    assert store.log_end_offset == cut
    assert store.recovery.records_redispatched == len(later) // 2
    consistent(store)
    store.close()


class _PowerLoss(Exception):
    """Raised after a step of the cut, where the simulated disk then loses what was unsynced."""


@pytest.mark.parametrize("step", ["marked", "checkpoint", "log", "epochs"])
@pytest.mark.parametrize("seed", [1, 2])
def test_a_power_loss_after_any_step_of_a_cut_leaves_a_store_that_opens(
    tmp_path: Path, step: str, seed: int
) -> None:
    """The simulated disk (store/files/sim_disk.py) loses every unsynced write or truncate at the
    crash, keeping a seeded prefix of them: each step's durability must not lean on later ones."""
    disk, clock = SimDisk(), Clock()
    path = tmp_path / "s"
    store = Store.open(path, SMALL, now_ms=clock, disk=disk)
    _fill(store, random.Random(seed), 60)
    records = store.scan(0, 100_000)
    second = store.log.segments[1].start
    cut = next(r.physical_offset for r in records if r.physical_offset > second + 1000)
    EpochFile(disk, path, store.log_end_offset).append(11, 0)
    store.close()

    def stop(name: str) -> None:
        if name == step:
            raise _PowerLoss(name)

    with pytest.raises(_PowerLoss):
        truncate_closed(path, SMALL, cut, disk, after_step=stop)
    disk.crash(random.Random(seed))
    store = Store.open(path, SMALL, now_ms=clock, disk=disk)
    end = store.log_end_offset
    assert end == cut if step in ("log", "epochs") else end == records[-1].next_physical_offset
    assert store.scan(0, 100_000) == [r for r in records if r.physical_offset < end]
    consistent(store)
    store.close()
    truncate_closed(path, SMALL, cut, disk)
    disk.crash(random.Random(seed + 100))
    store = Store.open(path, SMALL, now_ms=clock, disk=disk)
    assert store.scan(0, 100_000) == [r for r in records if r.physical_offset < cut]
    consistent(store)
    assert EpochFile(disk, path, store.log_end_offset).history == [(11, 0)]
    store.close()
