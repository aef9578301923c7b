"""Store benchmark: SYNC-mode appends with 1/16/64 writer threads (1 KiB records) against the
raw single-writer write+fdatasync floor measured in the same run; then recovery time.

Goals: 64 writers >= 3x the raw floor (group commit); recovering 1 GiB of log after a
crash in under 10 s. Recovery is measured twice on the same log: a crash with a recent
checkpoint (the normal case: scan past the checkpoint only) and the worst case, a crash with no
checkpoint, which verifies every record's CRC and rebuilds every consume queue and the index.
The default log is 256 MiB; MiB/s is printed so 1 GiB extrapolates, or run --recovery-mib 1024.
Every phase is bounded in time and operations. Set TXMQ_BENCH_DIR to measure another disk.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import fsync_floor, machine, pct, run_threads

from txmq import limits
from txmq.model import FlushMode, RecordDraft
from txmq.store.config import StoreConfig
from txmq.store.store import Store


def clock() -> int:
    return time.time_ns() // 1_000_000


def tmpdir(prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix, dir=os.environ.get("TXMQ_BENCH_DIR")))


def appends(writers: int, seconds: float) -> tuple[float, float, float, float]:
    """(appends/s, p50 ms, p99 ms, appends per fdatasync) for SYNC appends of 1 KiB bodies."""
    d = tmpdir("txmq-bench-")
    try:
        s = Store.open(d, StoreConfig(segment_size_bytes=256 * limits.MiB), now_ms=clock)
        body = b"x" * 1024
        rate, lat = run_threads(
            writers,
            seconds,
            lambda k, i: s.append(
                RecordDraft(topic="bench", queue_id=k % 8, body=body, message_id=f"{k}-{i}")
            ),
        )
        per_sync = len(lat) / max(1, s.writes.group.syncs)
        s.close()
        return rate, pct(lat, 0.5), pct(lat, 0.99), per_sync
    finally:
        shutil.rmtree(d, ignore_errors=True)


def build_log(d: Path, mib: int, body_bytes: int) -> tuple[StoreConfig, int, int]:
    """Fill a log quickly (ASYNC, batches), then stop it as a crash would. (config, bytes,
    records)."""
    cfg = StoreConfig(segment_size_bytes=256 * limits.MiB, flush_mode=FlushMode.ASYNC)
    s = Store.open(d, cfg, now_ms=clock)
    body = b"y" * body_bytes
    n = 0
    deadline = time.monotonic() + 600
    while s.log.end_offset < mib * limits.MiB and time.monotonic() < deadline:
        batch = [
            RecordDraft(
                topic=f"rec{i % 4}", queue_id=i % 8, body=body, message_id=f"r{n + i}",
                keys=(f"k{(n + i) % 1000}",),
            )
            for i in range(256)
        ]  # fmt: skip
        s.append_many(batch)
        n += len(batch)
    s.flush()
    size = s.log.end_offset
    s.abandon()  # no close: the abort marker stays, as after kill -9
    return cfg, size, n


def recovery(mib: int, body_bytes: int) -> None:
    d = tmpdir("txmq-bench-rec-")
    try:
        cfg, size, n = build_log(d, mib, body_bytes)
        mib_real = size / limits.MiB
        t = time.perf_counter()
        s = Store.open(d, cfg, now_ms=clock)
        took = time.perf_counter() - t
        scanned = (size - s.recovery.scanned_from) / limits.MiB
        assert s.recovery.crashed and s.log_end_offset == size
        s.abandon()
        print(
            f"crash recovery from the last checkpoint ({mib_real:.0f} MiB log, {scanned:.0f} MiB "
            f"past the checkpoint): {took:.2f} s"
        )
        (d / "checkpoint.json").unlink()
        t = time.perf_counter()
        s = Store.open(d, cfg, now_ms=clock)
        took = time.perf_counter() - t
        assert s.recovery.rebuilt and s.recovery.records_redispatched == n
        s.close()
        rate = mib_real / took
        print(
            f"full rebuild after a crash, no checkpoint ({mib_real:.0f} MiB, {n} records of "
            f"{body_bytes} B): {took:.2f} s = {rate:.0f} MiB/s, {n / took:,.0f} records/s; "
            f"1 GiB extrapolates to {1024 / rate:.1f} s (goal < 10 s)"
        )
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=4.0, help="per append phase")
    ap.add_argument("--recovery-mib", type=int, default=256)
    ap.add_argument("--recovery-body-bytes", type=int, default=1024)
    args = ap.parse_args()
    print(f"# store benchmark on {machine()}")
    # The disk is shared and its speed drifts, so each store phase is compared with the raw
    # floor measured right before and right after it, not with one number from the start.
    floors: list[float] = []
    for n in (1, 16, 64):
        before = fsync_floor(args.seconds / 2)
        rate, p50, p99, per_sync = appends(n, args.seconds)
        after = fsync_floor(args.seconds / 2)
        floor = (before[0] + after[0]) / 2
        floors += [before[0], after[0]]
        print(
            f"store SYNC appends, {n:2d} writers: {rate:8.0f} ops/s  p50 {p50:5.2f} ms  "
            f"p99 {p99:6.2f} ms  {per_sync:5.1f} appends/fsync | raw floor around it "
            f"{floor:6.0f} ops/s (p50 {before[1]:.2f} ms) | ratio {rate / floor:5.2f}x"
            + ("  (goal >= 3x)" if n == 64 else "")
        )
    floors.sort()
    print(
        f"raw write+fdatasync floor (1 KiB, 1 writer), median of {len(floors)} samples: "
        f"{floors[len(floors) // 2]:.0f} ops/s (range {floors[0]:.0f}..{floors[-1]:.0f})"
    )
    recovery(args.recovery_mib, args.recovery_body_bytes)


if __name__ == "__main__":
    main()
