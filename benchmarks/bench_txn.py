"""Transaction benchmark (store level, no network, SYNC mode, 1 KiB bodies): prepare + commit
per transaction with 1 and 16 threads, next to plain durable appends measured in the same run.

Goal: a transaction costs at most 2.5x one plain durable send. A transaction is two
durable appends (the half message, then the commit, which is also the visibility), so 2x is the
floor for one thread; with many threads group commit lets both share fsyncs with other writers.

Method: for each thread count, one store takes short plain and transactional slices in turn
(``--slices`` of each, ``--seconds`` in total per kind), so machine noise on this shared 2-core
box hits both alike; rates are the mean over slices, percentiles pool every operation, and each
slice's rate is printed. Every slice is bounded by time and by an operation count.
Usage: python benchmarks/bench_txn.py [--seconds 3] [--slices 6] [--threads 1,16]
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
from _common import machine, pct, run_threads

from txmq.model import DecisionSource, FlushMode, RecordDraft
from txmq.store.config import StoreConfig
from txmq.store.store import Store
from txmq.txn.coordinator import Transactions

BODY = b"x" * 1024
CONFIG = StoreConfig(segment_size_bytes=256 * 1024 * 1024, flush_mode=FlushMode.SYNC)
OPS_MAX = 200_000


def clock() -> int:
    return time.time_ns() // 1_000_000


def compare(threads: int, seconds: float, slices: int) -> float:
    """Alternate plain and transactional slices on one store; pooled rates and percentiles."""
    d = Path(tempfile.mkdtemp(prefix="txmq-bench-tx-", dir=os.environ.get("TXMQ_BENCH_DIR")))
    try:
        store = Store.open(d / "store", CONFIG, now_ms=clock)
        tx = Transactions(store, data_dir=d, now_ms=clock)

        def plain(k: int, i: int) -> None:
            store.append(RecordDraft(topic="p", queue_id=k % 4, body=BODY, message_id=f"{k}-{i}"))

        def txn(k: int, i: int) -> None:
            tid, _ = tx.prepare(
                RecordDraft(topic="t", queue_id=k % 4, body=BODY, message_id=f"{k}-{i}"),
                producer_group="t",
            )
            tx.end(tid, commit=True, source=DecisionSource.PRODUCER)

        runs: dict[str, list[tuple[float, list[float]]]] = {"plain": [], "txn": []}
        for _ in range(slices):
            for name, op in (("plain", plain), ("txn", txn)):
                runs[name].append(run_threads(threads, seconds / slices, op, OPS_MAX))
        committed = sum(store.queue_offsets("t", q)[1] for q in range(4))
        assert committed > 0, "commits must be visible in the real queues"
        assert tx.metrics.pending == 0
        tx.close()
        store.close()
    finally:
        shutil.rmtree(d, ignore_errors=True)
    rates = {}
    for name, label in (("plain", "plain durable append"), ("txn", "prepare+commit      ")):
        lat = [x for _, chunk in runs[name] for x in chunk]
        rates[name] = sum(r for r, _ in runs[name]) / slices
        per_slice = ", ".join(f"{r:.0f}" for r, _ in runs[name])
        print(
            f"{label} {threads:2d} threads: {rates[name]:8.0f}/s  p50 {pct(lat, 0.5):6.2f} ms  "
            f"p99 {pct(lat, 0.99):6.2f} ms   (slices: {per_slice})"
        )
    ratio = rates["plain"] / rates["txn"] if rates["txn"] else float("inf")
    verdict = "meets" if ratio <= 2.5 else "MISSES"
    print(f"  -> a transaction costs {ratio:.2f}x a plain durable send ({verdict} the 2.5x goal)")
    return ratio


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--slices", type=int, default=6)
    ap.add_argument("--threads", default="1,16")
    args = ap.parse_args()
    seconds = min(max(args.seconds, 0.2), 60.0)
    slices = min(max(args.slices, 1), 50)
    print(
        f"# transaction benchmark on {machine()}: SYNC, 1 KiB, {seconds} s per kind and thread"
        f" count, in {slices} alternating slices"
    )
    for n in (int(x) for x in args.threads.split(",")):
        compare(min(max(n, 1), 64), seconds, slices)


if __name__ == "__main__":
    main()
