"""Kill -9 crash tests of the store (after sled's crash tests), with real processes and files.

Method: a child process (store_child.py) appends from several threads in SYNC mode and prints
each record's id only after append() returned. The parent SIGKILLs it at a seeded random
moment, reopens the store and checks: every acknowledged record is present with its body
intact; the whole log verifies (no torn record visible); every batch is all or nothing; each
queue is contiguous and holds exactly the log's records of that queue; the index finds every
record by id and key. Rounds accumulate in one data directory, so each round also recovers what
the previous kill left. Then explicit damage to real files: garbage after the tail (a torn
write) is truncated; a cut inside the last record drops that record's whole batch and nothing
else, also when the writer was killed while rolling (the newest file is then an empty segment
created ahead, not the one holding the last record); a flipped byte in the middle of the log is
reported with its offset. Replay with TXMQ_SEED.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import Clock
from tests.crash.store_child import CONFIG, QUEUES, body_of
from txmq.errors import CorruptRecordError
from txmq.format import record as codec
from txmq.model import Record
from txmq.store.log.segment import is_segment_name, segment_name
from txmq.store.store import Store

CHILD = Path(__file__).with_name("store_child.py")
ROOT = Path(__file__).parents[2]


class Acks:
    def __init__(self) -> None:
        self.records: set[str] = set()
        self.batches: list[list[str]] = []  # every batch the child meant to append


def run_child(
    data_dir: Path, round_no: int, rng: random.Random, acks: Acks, *, min_s: float = 0.0
) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    threads = rng.choice([1, 4, 8])
    proc = subprocess.Popen(
        [sys.executable, str(CHILD), str(data_dir), str(round_no), str(threads)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(rng.uniform(min_s, min_s + 0.15))  # sleep: a random kill point, not an event
    proc.send_signal(signal.SIGKILL)
    out, _ = proc.communicate(timeout=30)
    for line in out.splitlines():
        kind, *ids = line.split()
        if kind in ("A", "B"):
            acks.records.update(ids)
        elif kind == "b":
            acks.batches.append(ids)


def index_of(message_id: str) -> int:
    return int(message_id.split("-")[2])


def verify(data_dir: Path, acks: Acks) -> dict[str, Record]:
    store = Store.open(data_dir, CONFIG, now_ms=Clock())
    try:
        log = {r.message_id: r for r in store.scan(0, 10**7)}  # verifies every CRC
        missing = acks.records - set(log)
        assert not missing, f"{len(missing)} acknowledged records lost, e.g. {sorted(missing)[:3]}"
        for mid, rec in log.items():
            assert rec.body == body_of(mid, index_of(mid)), f"body of {mid} intact"
        for ids in acks.batches:
            present = [x in log for x in ids]
            assert all(present) or not any(present), f"batch {ids} is all or nothing"
        for q in range(QUEUES):
            lo, hi = store.queue_offsets("crash", q)
            got: list[Record] = []
            while lo + len(got) < hi:
                read = store.read_queue("crash", q, lo + len(got), 1024)
                assert read.records, "a queue read below max returns records"
                got.extend(read.records)
            assert [r.queue_offset for r in got] == list(range(lo, hi)), "queue is contiguous"
            in_log = [r.message_id for r in log.values() if r.queue_id == q]
            assert [r.message_id for r in got] == in_log, "the queue holds exactly the log's"
        for mid in list(log)[:: max(1, len(log) // 40)]:
            found = store.find_by_message_id(mid)
            assert found is not None and found.physical_offset == log[mid].physical_offset
            assert [r.message_id for r in store.find_by_key("crash", f"key-{mid}", 5)] == [mid]
        return log
    finally:
        store.close()


def kill_rounds(data_dir: Path, seed: int, rounds: int, budget_s: float = 0.0) -> Acks:
    """Up to ``rounds`` kill -9 rounds, each verified; with ``budget_s``, stop starting new
    rounds after that many seconds (each verification reads the whole log, which grows, so a
    long soak's last rounds cost the most) but run at least a tenth of them."""
    rng = random.Random(seed)
    acks = Acks()
    started = time.monotonic()
    for r in range(rounds):
        if budget_s and r >= rounds // 10 and time.monotonic() - started > budget_s:
            break
        run_child(data_dir, r, rng, acks)
        verify(data_dir, acks)
    assert acks.records, "the child acknowledged nothing: the test did not exercise anything"
    return acks


def test_kill9_rounds(tmp_path: Path, seed: int) -> None:
    # 20 rounds (~1 s each, mostly the child's start; was 50): each of 1, 4 and 8 writer
    # threads is drawn ~7 times; test_kill9_rounds_long (slow) runs up to 300 on one growing log.
    kill_rounds(tmp_path, seed, rounds=20)


@pytest.mark.slow
@pytest.mark.timeout(1200)  # its 600 s budget, then the round in flight and its verification
def test_kill9_rounds_long(tmp_path: Path, seed: int) -> None:
    kill_rounds(tmp_path, seed, rounds=300, budget_s=600.0)


def last_segment(data_dir: Path) -> Path:
    return sorted((data_dir / "commitlog").iterdir())[-1]


def segment_holding(data_dir: Path, offset: int) -> Path:
    """The segment file that holds physical ``offset``: the one with the greatest start at or
    below it. Not simply the newest file: a writer killed while rolling leaves the next segment
    created ahead, empty, past the last record."""
    starts = sorted(p for p in (data_dir / "commitlog").iterdir() if is_segment_name(p.name))
    holding = [p for p in starts if int(p.name) <= offset]
    assert holding, f"no segment starts at or below offset {offset}"
    return holding[-1]


def leave_a_segment_created_ahead(data_dir: Path, last: Record) -> None:
    """What a writer killed while rolling leaves: the segment holding ``last`` sealed with the
    end-of-segment blank, and the next segment created (its space reserved with KEEP_SIZE, so
    the file is empty) before any record reached it."""
    size = CONFIG.segment_size_bytes
    start = last.physical_offset - last.physical_offset % size
    end = last.physical_offset + last.size - start
    with (data_dir / "commitlog" / segment_name(start)).open("r+b") as f:
        f.seek(end)
        f.write(codec.blank(size - end))
    (data_dir / "commitlog" / segment_name(start + size)).touch()


def batch_of(acks: Acks, message_id: str) -> list[str]:
    """The ids recovery keeps or drops together with ``message_id``: its batch (all or
    nothing), or the record alone."""
    for ids in acks.batches:
        if message_id in ids:
            return ids
    return [message_id]


def test_garbage_after_a_killed_tail_is_truncated(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    acks = Acks()
    run_child(tmp_path, 0, rng, acks, min_s=0.2)
    seg = last_segment(tmp_path)
    size = seg.stat().st_size
    with seg.open("ab") as f:
        f.write(rng.randbytes(rng.randint(1, 3000)))  # a torn write the crash left
    log = verify(tmp_path, acks)
    assert seg.stat().st_size == size, "exactly the garbage was cut"
    assert len(log) >= len(acks.records)


@pytest.mark.parametrize("ahead", [False, True], ids=["killed", "killed-while-rolling"])
def test_cut_inside_the_last_record_is_truncated(tmp_path: Path, seed: int, ahead: bool) -> None:
    rng = random.Random(seed)
    acks = Acks()
    run_child(tmp_path, 0, rng, acks, min_s=0.2)
    store = Store.open(tmp_path, CONFIG, now_ms=Clock())
    before = store.scan(0, 10**7)
    store.abandon()
    store.log.close()
    last = before[-1]
    if ahead:  # the newest file then holds no record: the cut goes to the segment holding last
        leave_a_segment_created_ahead(tmp_path, last)
    seg = segment_holding(tmp_path, last.physical_offset)
    cut = last.physical_offset - int(seg.name) + rng.randint(1, last.size - 1)
    assert 0 < cut < seg.stat().st_size, f"cut {cut} inside {seg.name}"
    with seg.open("r+b") as f:
        f.truncate(cut)
    (tmp_path / "checkpoint.json").unlink()  # as if the last record lay past the checkpoint
    # Recovery drops the damaged record's whole batch (all or nothing), and nothing else.
    damaged = batch_of(acks, last.message_id)
    acks.records.difference_update(damaged)
    log = verify(tmp_path, acks)
    assert not set(damaged) & set(log), f"the damaged batch {damaged} is gone whole"
    kept = [r.message_id for r in before if r.message_id not in damaged]
    assert list(log) == kept, "every record outside the damaged batch survives, in order"


def test_flipped_byte_mid_log_is_reported_with_its_offset(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    acks = Acks()
    run_child(tmp_path, 0, rng, acks, min_s=0.2)
    run_child(
        tmp_path, 1, rng, acks, min_s=0.2
    )  # the second run's records lie past its open checkpoint
    store = Store.open(tmp_path, CONFIG, now_ms=Clock())
    records = store.scan(0, 10**7)
    store.abandon()
    store.log.close()
    (tmp_path / "abort").write_text("crashed")
    cp = tmp_path / "checkpoint.json"
    cp.unlink()  # recovery must scan the whole log
    victim = records[rng.randrange(len(records) - 1)]  # not the last: valid data follows
    seg = sorted((tmp_path / "commitlog").iterdir())[
        victim.physical_offset // CONFIG.segment_size_bytes
    ]
    pos = victim.physical_offset - int(seg.name) + rng.randint(12, victim.size - 1)
    data = bytearray(seg.read_bytes())
    data[pos] ^= 0xFF
    seg.write_bytes(bytes(data))
    with pytest.raises(CorruptRecordError) as info:
        Store.open(tmp_path, CONFIG, now_ms=Clock())
    assert info.value.offset == victim.physical_offset
    assert seg.read_bytes() == bytes(data), "nothing was truncated or rewritten"
