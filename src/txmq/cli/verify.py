"""``txmq store verify``: an offline, read-only check of a broker data directory.

Scans the whole commit log verifying every CRC (reporting, never fixing, a bad record), then
checks that every consume-queue entry points at a record of that queue with that offset and
that every message id in the log is found by the index.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from txmq.errors import BadRequestError, CorruptRecordError
from txmq.store.commit_log import CommitLog
from txmq.store.config import StoreConfig
from txmq.store.consume_queue import ConsumeQueue
from txmq.store.disk import OsDisk
from txmq.store.index import MessageIndex, id_hash


def verify(data_dir: Path) -> dict[str, Any]:
    store_dir = data_dir / "store" if (data_dir / "store").is_dir() else data_dir
    if not (store_dir / "commitlog").is_dir():
        raise BadRequestError(f"{data_dir} is not a txmq data directory (no commitlog/ in it)")
    if not any(p.name.isdigit() for p in (store_dir / "commitlog").iterdir()):
        # Opening an empty log would create its first segment: a check must not write.
        raise BadRequestError(f"{data_dir} has an empty commit log: nothing to verify")
    # Work on a copy of the index/queue files' handles only for reading; nothing is written.
    disk = OsDisk()
    seg_size = _segment_size(store_dir)
    log = CommitLog(store_dir / "commitlog", disk, seg_size)
    problems: list[str] = []
    records = 0
    ids: dict[str, int] = {}
    for rec, end in log.scan_for_recovery(log.start_offset):
        if rec is None:
            if end.bad_reason:
                problems.append(f"bad record at offset {end.offset}: {end.bad_reason}")
            break
        records += 1
        if rec.message_id:
            ids.setdefault(rec.message_id, rec.physical_offset)
    entries = 0
    root = store_dir / "consumequeue"
    for topic in disk.list(root):
        for qid in disk.list(root / topic):
            cq = ConsumeQueue(
                root / topic / qid, disk, StoreConfig().consume_queue_entries_per_file
            )
            if not cq.files:
                continue
            cq.per_file = _entries_per_file(cq)
            for n, (phys, size, _h) in enumerate(cq.entries(cq.min_offset, cq.max_offset)):
                entries += 1
                try:
                    rec = log.read(phys)
                except CorruptRecordError as exc:
                    problems.append(f"{topic}/{qid}@{cq.min_offset + n}: {exc}")
                    continue
                if rec.topic != topic or rec.queue_offset != cq.min_offset + n or rec.size != size:
                    problems.append(f"{topic}/{qid}@{cq.min_offset + n} disagrees with the log")
            cq.close()
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(store_dir / "index" / "index.bin", Path(tmp) / "index.bin")
        index = MessageIndex(Path(tmp), disk)
        missing = [m for m in ids if not index.candidates(id_hash(m))]
        index.close()
    if missing:
        problems.append(f"{len(missing)} message ids missing from the index, e.g. {missing[0]}")
    log.close()
    return {
        # The store writes "abort" while open and removes it on a clean close.
        "state": (
            "open or crashed (abort marker present): stop the broker for an exact check"
            if (store_dir / "abort").exists()
            else "closed cleanly"
        ),
        "records": records,
        "queue entries": entries,
        "message ids": len(ids),
        "problems": "; ".join(problems[:20]),
    }


def _segment_size(store_dir: Path) -> int:
    names = sorted(p.name for p in (store_dir / "commitlog").iterdir() if p.name.isdigit())
    if len(names) >= 2:
        return int(names[1]) - int(names[0])
    size = (store_dir / "commitlog" / names[0]).stat().st_size if names else 0
    return max(StoreConfig().segment_size_bytes, size)


def _entries_per_file(cq: ConsumeQueue) -> int:
    bases = sorted(cq.files)
    return bases[1] - bases[0] if len(bases) >= 2 else StoreConfig().consume_queue_entries_per_file
