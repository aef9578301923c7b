"""Store benchmark: SYNC-mode appends with 1/16/64 writer threads (1 KiB records) against the
raw single-writer write+fdatasync floor measured in the same run; then crash-recovery time.

Goal (issue 2): 64 writers >= 3x the raw floor (group commit); recovering 1 GiB of log after a
crash in under 10 s (run with --recovery-mib 1024; the default is smaller to stay quick).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import fsync_floor, machine, pct, run_threads

from txmq.model import RecordDraft
from txmq.store.config import StoreConfig
from txmq.store.store import Store


def clock() -> int:
    return time.time_ns() // 1_000_000


def appends(writers: int, seconds: float) -> tuple[float, float, float]:
    d = Path(tempfile.mkdtemp(prefix="txmq-bench-"))
    try:
        s = Store.open(d, StoreConfig(segment_size_bytes=256 * 1024 * 1024), now_ms=clock)
        body = b"x" * 1024
        rate, lat = run_threads(
            writers,
            seconds,
            lambda k, i: s.append(
                RecordDraft(topic="bench", queue_id=k % 8, body=body, message_id=f"{k}-{i}")
            ),
        )
        s.close()
        return rate, pct(lat, 0.5), pct(lat, 0.99)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def recovery(mib: int) -> tuple[float, float]:
    d = Path(tempfile.mkdtemp(prefix="txmq-bench-rec-"))
    try:
        cfg = StoreConfig(
            segment_size_bytes=256 * 1024 * 1024,
            flush_mode=__import__("txmq.model", fromlist=["FlushMode"]).FlushMode.ASYNC,
        )
        s = Store.open(d, cfg, now_ms=clock)
        body = b"y" * 4000
        batch = [
            RecordDraft(topic="rec", queue_id=i % 4, body=body, message_id=f"r{i}")
            for i in range(256)
        ]
        while s.log_end_offset < mib * 1024 * 1024:
            s.append_many(batch)
        s.flush()
        # Simulate a crash: drop the checkpoint so recovery scans and re-dispatches everything.
        (d / "checkpoint.json").unlink(missing_ok=True)
        size = s.log_end_offset
        t = time.perf_counter()
        s2 = Store.open(d, cfg, now_ms=clock)
        took = time.perf_counter() - t
        assert s2.recovery.crashed and s2.log_end_offset == size
        return size / 1024 / 1024, took
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--recovery-mib", type=int, default=256)
    args = ap.parse_args()
    print(f"# store benchmark on {machine()}")
    floor, f50, f99 = fsync_floor(args.seconds)
    print(
        f"raw write+fdatasync floor (1 KiB, 1 writer): {floor:9.0f} ops/s  "
        f"p50 {f50:.2f} ms  p99 {f99:.2f} ms"
    )
    for n in (1, 16, 64):
        rate, p50, p99 = appends(n, args.seconds)
        print(
            f"store SYNC appends, {n:2d} writers:            {rate:9.0f} ops/s  "
            f"p50 {p50:.2f} ms  p99 {p99:.2f} ms  ratio to floor {rate / floor:5.2f}x"
        )
    mib, took = recovery(args.recovery_mib)
    print(
        f"crash recovery of {mib:.0f} MiB: {took:.2f} s ({mib / took:.0f} MiB/s; "
        f"1 GiB extrapolates to {1024 / (mib / took):.1f} s)"
    )


if __name__ == "__main__":
    main()
