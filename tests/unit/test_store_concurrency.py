"""Concurrency test: writers, readers and retention at once on one store (real files).

Goal: no reader ever sees an error, a torn record, a gap or a reordering while writers append
and retention deletes segments under it; every acknowledged record that retention did not
delete is readable afterwards. Bounded: fixed operation counts and a join timeout.
"""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

from tests.conftest import Clock
from txmq.model import RecordDraft
from txmq.store.config import StoreConfig
from txmq.store.store import Store

CONFIG = StoreConfig(segment_size_bytes=64 * 1024, body_size_max=16 * 1024)
WRITERS, PER_WRITER, QUEUES = 4, 250, 2


def body_of(message_id: str) -> bytes:
    return (message_id.encode() * 50)[: 300 + len(message_id) * 7]


def test_writers_readers_and_retention_together(tmp_path: Path, seed: int) -> None:
    clock = Clock()
    store = Store.open(tmp_path, CONFIG, now_ms=clock)
    errors: list[BaseException] = []
    acked: list[str] = []
    done = threading.Event()

    def guard(fn: object) -> object:
        def run(*args: object) -> None:
            try:
                fn(*args)  # type: ignore[operator]
            except BaseException as exc:  # recorded and asserted below
                errors.append(exc)

        return run

    def writer(n: int) -> None:
        for i in range(PER_WRITER):
            mid = f"w{n}-{i}"
            store.append(RecordDraft("t", n % QUEUES, body_of(mid), message_id=mid, keys=(mid,)))
            acked.append(mid)

    def reader(k: int) -> None:
        rng = random.Random(seed + k)
        for _ in range(2_000):
            if done.is_set():
                return
            q = rng.randrange(QUEUES)
            lo, _hi = store.queue_offsets("t", q)
            read = store.read_queue("t", q, lo, 64)
            offsets = [r.queue_offset for r in read.records]
            assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
            for r in read.records:
                assert r.body == body_of(r.message_id) and r.queue_id == q
            if acked:
                mid = acked[rng.randrange(len(acked))]
                found = store.find_by_message_id(mid)
                assert found is None or found.body == body_of(mid)
            for r in store.scan(store.log_start_offset, 50):
                assert r.body == body_of(r.message_id)

    def retention() -> None:
        for _ in range(10_000):
            if done.is_set():
                return
            clock.advance(CONFIG.retention_ms // 20)
            store.delete_expired_segments(keep_from_offset=store.log_end_offset)
            time.sleep(0.002)  # sleep: paces retention against the writers (a workload)

    threads = [threading.Thread(target=guard(writer), args=(n,)) for n in range(WRITERS)]
    others = [threading.Thread(target=guard(reader), args=(k,)) for k in range(2)]
    others.append(threading.Thread(target=guard(retention)))
    for t in threads + others:
        t.start()
    for t in threads:
        t.join(60)
    # Retention goes on (readers too, within their counts) until it deleted a segment: how many
    # of its passes fit while the writers write depends on the machine's load.
    deadline = time.monotonic() + 30
    while store.log_start_offset == 0 and time.monotonic() < deadline and not errors:
        time.sleep(0.01)  # sleep: poll interval of this bounded wait
    done.set()
    for t in others:
        t.join(60)
    assert not errors, errors[:3]
    start = store.log_start_offset
    assert start > 0, "retention deleted something while the others ran"
    live = {r.message_id for r in store.scan(0, 10**6)}
    for mid in acked:
        rec = store.find_by_message_id(mid)
        assert (rec is not None) == (mid in live), f"{mid}: index and log agree"
    for q in range(QUEUES):
        lo, hi = store.queue_offsets("t", q)
        got = []
        while lo + len(got) < hi:
            got.extend(store.read_queue("t", q, lo + len(got), 1024).records)
        assert [r.queue_offset for r in got] == list(range(lo, hi))
    store.close()
