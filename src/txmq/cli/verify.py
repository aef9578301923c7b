"""``txmq store verify``: an offline, read-only check of a broker data directory.

Scans the whole commit log verifying every CRC (reporting, never fixing, each bad record and
carrying on past it, and any record inside the span an end-of-segment blank claims), then
checks that every consume-queue entry points at a record of that queue with that offset and
that every message id in the log is found by the index.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from txmq.errors import BadRequestError, CorruptRecordError
from txmq.format import record as codec
from txmq.store.config import StoreConfig
from txmq.store.derived.consume_queue import ConsumeQueue
from txmq.store.derived.index import MessageIndex, id_hash
from txmq.store.files.disk import OsDisk
from txmq.store.health import Health
from txmq.store.log.commit_log import CommitLog
from txmq.store.recovery.repair import Cursor, walk


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
    # Every damaged record is reported, not only the first: the walk resyncs past each one.
    health = Health(log_damage=False)
    for e in walk(log, Cursor(log.start_offset), log.end_offset, health, budget=1 << 62):
        records += 1
        if e.message_id:
            ids.setdefault(e.message_id, e.physical_offset)
    for offset, reason in health.damaged.items():
        problems.append(f"bad record at offset {offset}: {reason}")
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
                if phys in health.damaged:
                    continue  # reported above
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
    path = store_dir / "commitlog" / names[0]
    return _size_from_blank(path) or max(StoreConfig().segment_size_bytes, path.stat().st_size)


def _size_from_blank(path: Path) -> int | None:
    """One segment: its size is where its end-of-segment blank says it ends, if it has one.
    Walks record headers only (offline, so a pread per record is affordable)."""
    with path.open("rb") as f:
        pos, end = 0, path.stat().st_size
        for _ in range(end // codec.RECORD_SIZE_MIN + 1):
            f.seek(pos)
            head = f.read(codec.HEAD_SIZE)
            if len(head) < codec.HEAD_SIZE:
                return None
            size, magic = codec.peek(head)
            if magic == codec.BLANK_MAGIC:
                return pos + size
            if magic != codec.RECORD_MAGIC or size < codec.RECORD_SIZE_MIN:
                return None
            pos += size
    return None


def _entries_per_file(cq: ConsumeQueue) -> int:
    bases = sorted(cq.files)
    return bases[1] - bases[0] if len(bases) >= 2 else StoreConfig().consume_queue_entries_per_file
