"""Kill -9 in the middle of cutting a divergent tail (txmq.store.replica.truncate), with real files.

Method: one store with records across several segments, closed (its checkpoint at the end)
and an epoch history whose last epoch starts past the cut. For each step of the truncation a
child process cuts a copy of it and SIGKILLs itself right after that step. The parent reopens
the copy and checks: it opens (no corruption), its log is the original's up to where it ends
(at the cut, or at a segment boundary past it), queues and index agree with the log; then it
runs the cut again, as a restarted follower does, and checks the store ends exactly at the cut
with an epoch history cut there too.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import SMALL, Clock
from tests.unit.test_store_replica import _fill
from tests.unit.test_store_truncate import consistent
from txmq.store.files.disk import OsDisk
from txmq.store.replica.epochs import EpochFile
from txmq.store.replica.truncate import truncate_closed
from txmq.store.store import Store

CHILD = Path(__file__).with_name("truncate_child.py")
ROOT = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, list[tuple[int, int]]]:
    """A closed store (several segments), a record boundary inside its second segment to cut at,
    and its records' (offset, CRC-bearing size) list."""
    path = tmp_path_factory.mktemp("pristine") / "store"
    store = Store.open(path, SMALL, now_ms=Clock())
    _fill(store, random.Random(19), 80)
    assert len(store.log.segments) >= 4
    records = store.scan(0, 100_000)
    second = store.log.segments[1].start
    cut = next(r.physical_offset for r in records if r.physical_offset > second + 1000)
    epochs = EpochFile(OsDisk(), path, store.log_end_offset)
    epochs.append(11, 0)
    epochs.append(17, cut + 1)  # an epoch whose records the cut removes
    store.close()
    return path, cut, [(r.physical_offset, r.size) for r in records]


@pytest.mark.parametrize("step", ["marked", "checkpoint", "segment", "log", "epochs"])
def test_a_kill_during_a_cut_leaves_a_store_that_opens_whole(
    tmp_path: Path, pristine: tuple[Path, int, list[tuple[int, int]]], step: str
) -> None:
    source, cut, spans = pristine
    path = tmp_path / "store"
    shutil.copytree(source, path)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    at = "checkpoint" if step == "segment" else step
    proc = subprocess.run(
        [sys.executable, str(CHILD), str(path), str(cut), at], env=env, timeout=60, check=False
    )
    assert proc.returncode == -signal.SIGKILL
    if step == "segment":  # killed inside the log step: the last segment file is gone already
        (path / "commitlog" / sorted(os.listdir(path / "commitlog"))[-1]).unlink()
    original = Store.open(source, SMALL, now_ms=Clock())
    store = Store.open(path, SMALL, now_ms=Clock())
    end = store.log_end_offset
    if step in ("log", "epochs"):
        assert end == cut
    elif step == "segment":  # the log ends at the blank of what is now its last segment
        assert cut < end < spans[-1][0] and end % SMALL.segment_size_bytes == 0
    else:
        assert end == spans[-1][0] + spans[-1][1]
    assert store.scan(0, 100_000) == original.scan(0, 100_000)[: len(store.scan(0, 100_000))]
    assert all(o + s <= end for o, s in spans if o < end)  # ends on a record boundary
    consistent(store)
    store.close()
    # A restarted follower computes the same cut and runs it again.
    truncate_closed(path, SMALL, cut, OsDisk())
    store = Store.open(path, SMALL, now_ms=Clock())
    assert store.log_end_offset == cut
    kept = [r for r in original.scan(0, 100_000) if r.physical_offset < cut]
    assert store.scan(0, 100_000) == kept
    consistent(store)
    assert EpochFile(OsDisk(), path, store.log_end_offset).history == [(11, 0)]
    store.close()
    original.close()
