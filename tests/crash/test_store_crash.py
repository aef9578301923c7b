"""Kill -9 crash test of the store (after sled's crash tests).

Method: a child process appends from several threads and prints each record's id only after
append() returned (fsync done). The parent SIGKILLs it at a seeded random moment, reopens the
store and checks: every acknowledged record is present and intact, no torn record is visible,
each queue is contiguous, and the index agrees with the log. Rounds accumulate in one data
directory, so each round also recovers what the previous kill left. Replay with TXMQ_SEED.
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

from tests.conftest import SMALL, Clock
from txmq.store.store import Store

CHILD = Path(__file__).with_name("store_child.py")


def _round(data_dir: Path, round_no: int, rng: random.Random) -> list[str]:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[2]))
    proc = subprocess.Popen(
        [sys.executable, str(CHILD), str(data_dir), str(round_no), str(rng.choice([1, 4, 8]))],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(rng.uniform(0.0, 0.25))
    proc.send_signal(signal.SIGKILL)
    out, _ = proc.communicate(timeout=30)
    return [line for line in out.splitlines() if line and "-w" in line]


def _verify(data_dir: Path, acked: set[str]) -> None:
    store = Store.open(data_dir, SMALL, now_ms=Clock())
    try:
        seen: set[str] = set()
        for q in range(3):
            lo, hi = store.queue_offsets("crash", q)
            offset = lo
            while offset < hi:
                read = store.read_queue("crash", q, offset, 500)
                for expect, rec in enumerate(read.records, start=offset):
                    assert rec.queue_offset == expect, "queue must be contiguous"
                    body = (rec.message_id * 20).encode()
                    assert body.startswith(rec.body), "record body intact"
                    seen.add(rec.message_id)
                offset = read.next_offset
        missing = acked - seen
        assert not missing, f"{len(missing)} acknowledged records lost, e.g. {sorted(missing)[:3]}"
        for mid in list(acked)[:: max(1, len(acked) // 50)]:
            rec = store.find_by_message_id(mid)
            assert rec is not None and rec.message_id == mid, "index agrees with the log"
        assert len(store.scan(0, 10**9)) >= len(seen)
    finally:
        store.close()


def _run(tmp_path: Path, seed: int, rounds: int) -> None:
    rng = random.Random(seed)
    acked: set[str] = set()
    for r in range(rounds):
        acked.update(_round(tmp_path, r, rng))
        _verify(tmp_path, acked)
    assert acked, "the child acknowledged nothing: the test did not exercise anything"


def test_kill9_rounds(tmp_path: Path, seed: int) -> None:
    _run(tmp_path, seed, rounds=50)


@pytest.mark.slow
def test_kill9_rounds_long(tmp_path: Path, seed: int) -> None:
    _run(tmp_path, seed, rounds=300)
