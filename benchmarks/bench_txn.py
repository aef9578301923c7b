"""Transaction benchmark (store level, no network, SYNC mode, 1 KiB): prepare + commit per
transaction with 1 and 16 threads, next to plain durable appends measured in the same run.

Goal (issue 3): a transaction costs at most 2.5x one plain durable send.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import machine, pct, run_threads

from txmq.model import DecisionSource, RecordDraft
from txmq.store.config import StoreConfig
from txmq.store.store import Store
from txmq.txn.coordinator import Transactions


def clock() -> int:
    return time.time_ns() // 1_000_000


def measure(threads: int, seconds: float, transactional: bool) -> tuple[float, float, float]:
    d = Path(tempfile.mkdtemp(prefix="txmq-bench-tx-"))
    try:
        s = Store.open(d, StoreConfig(segment_size_bytes=256 * 1024 * 1024), now_ms=clock)
        tx = Transactions(s, d, now_ms=clock)
        body = b"x" * 1024

        def plain(k: int, i: int) -> None:
            s.append(RecordDraft(topic="b", queue_id=k % 4, body=body, message_id=f"{k}-{i}"))

        def txn(k: int, i: int) -> None:
            tid, _ = tx.prepare(
                RecordDraft(topic="b", queue_id=k % 4, body=body, message_id=f"{k}-{i}"),
                producer_group="b",
            )
            tx.end(tid, commit=True, source=DecisionSource.PRODUCER)

        rate, lat = run_threads(threads, seconds, txn if transactional else plain)
        s.close()
        return rate, pct(lat, 0.5), pct(lat, 0.99)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=4.0)
    args = ap.parse_args()
    print(f"# transaction benchmark on {machine()}")
    for n in (1, 16):
        prate, p50, p99 = measure(n, args.seconds, False)
        print(
            f"plain durable appends, {n:2d} threads: {prate:8.0f}/s  p50 {p50:.2f} ms  "
            f"p99 {p99:.2f} ms"
        )
        trate, t50, t99 = measure(n, args.seconds, True)
        print(
            f"prepare+commit,        {n:2d} threads: {trate:8.0f}/s  p50 {t50:.2f} ms  "
            f"p99 {t99:.2f} ms  cost {prate / trate:.2f}x a plain send (goal <= 2.5x)"
        )


if __name__ == "__main__":
    main()
