"""Transaction benchmark (store level, no network, SYNC mode, 1 KiB bodies): prepare + commit
per transaction with 1 and 16 threads, next to plain durable appends measured in the same run.

Goal (issue 3): a transaction costs at most 2.5x one plain durable send. A transaction is two
durable appends (the half message, then the commit, which is also the visibility), so 2x is the
floor for one thread; with many threads group commit lets both share fsyncs with other writers.

Method: for each thread count, plain and transactional runs alternate ``--rounds`` times, each
in a fresh store, so disk noise hits both alike; the best rate of each is compared (and all
rounds are printed). Every run is bounded by ``--seconds`` and by an operation count.
Usage: python benchmarks/bench_txn.py [--seconds 3] [--rounds 2] [--threads 1,16]
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


def measure(threads: int, seconds: float, transactional: bool) -> tuple[float, float, float]:
    """(operations/s, p50 ms, p99 ms) of one run in a fresh store."""
    d = Path(tempfile.mkdtemp(prefix="txmq-bench-tx-", dir=os.environ.get("TXMQ_BENCH_DIR")))
    try:
        store = Store.open(d / "store", CONFIG, now_ms=clock)
        tx = Transactions.open(store, data_dir=d, now_ms=clock)

        def plain(k: int, i: int) -> None:
            store.append(RecordDraft(topic="b", queue_id=k % 4, body=BODY, message_id=f"{k}-{i}"))

        def txn(k: int, i: int) -> None:
            tid, _ = tx.prepare(
                RecordDraft(topic="b", queue_id=k % 4, body=BODY, message_id=f"{k}-{i}"),
                producer_group="b",
            )
            tx.end(tid, commit=True, source=DecisionSource.PRODUCER)

        rate, lat = run_threads(threads, seconds, txn if transactional else plain, OPS_MAX)
        if transactional:
            expected = store.queue_offsets("b", 0)[1]
            assert expected > 0, "commits must be visible in the real queue"
        tx.close()
        store.close()
        return rate, pct(lat, 0.5), pct(lat, 0.99)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def compare(threads: int, seconds: float, rounds: int) -> float:
    plain: list[tuple[float, float, float]] = []
    txns: list[tuple[float, float, float]] = []
    for _ in range(rounds):
        plain.append(measure(threads, seconds, False))
        txns.append(measure(threads, seconds, True))
    p_rate, p50, p99 = max(plain)
    t_rate, t50, t99 = max(txns)
    ratio = p_rate / t_rate if t_rate else float("inf")
    print(
        f"plain durable append, {threads:2d} threads: {p_rate:8.0f}/s  p50 {p50:6.2f} ms  "
        f"p99 {p99:6.2f} ms   (rounds: {', '.join(f'{r[0]:.0f}' for r in plain)})"
    )
    print(
        f"prepare+commit,       {threads:2d} threads: {t_rate:8.0f}/s  p50 {t50:6.2f} ms  "
        f"p99 {t99:6.2f} ms   (rounds: {', '.join(f'{r[0]:.0f}' for r in txns)})"
    )
    verdict = "meets" if ratio <= 2.5 else "MISSES"
    print(f"  -> a transaction costs {ratio:.2f}x a plain durable send ({verdict} the 2.5x goal)")
    return ratio


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", default="1,16")
    args = ap.parse_args()
    seconds = min(max(args.seconds, 0.2), 60.0)
    rounds = min(max(args.rounds, 1), 10)
    print(f"# transaction benchmark on {machine()}: SYNC, 1 KiB, best of {rounds} x {seconds} s")
    for n in (int(x) for x in args.threads.split(",")):
        compare(min(max(n, 1), 64), seconds, rounds)


if __name__ == "__main__":
    main()
