"""Child process for the transaction kill -9 test: a transactional producer with a checker.

Worker threads prepare transactions with a fixed intended outcome (commit / rollback / unknown,
the producer's "local transaction") and decide them; a check-back thread runs ``due_checks``,
answers each check from the intents it knows (unknown ones stay unanswered until max checks); a
third thread writes snapshots all the time. Every line is printed only after the call it
reports returned, so the parent's model holds only what was acknowledged:

    p <tid> <message id> <intent>   about to prepare (the half may or may not become durable)
    P <tid>                         prepare returned: the half message is durable
    d <tid> <outcome>               about to decide
    D <tid> <outcome>               the decision returned: it is durable and final
    K <tid> <n>                     check n was returned by due_checks: it is recorded durably
"""

from __future__ import annotations

import random
import sys
import threading
import time
import uuid
from pathlib import Path

from txmq.errors import TransactionError
from txmq.model import DecisionSource, RecordDraft
from txmq.store.config import StoreConfig
from txmq.store.store import Store
from txmq.txn.coordinator import Transactions

CONFIG = StoreConfig(segment_size_bytes=256 * 1024, body_size_max=64 * 1024)
TIMEOUT_MS = 30
CHECK_INTERVAL_MS = 40
CHECK_MAX = 3
QUEUES = 2


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


def open_transactions(data_dir: Path, now_ms: object = wall_ms) -> tuple[Store, Transactions]:
    store = Store.open(data_dir / "store", CONFIG, now_ms=wall_ms)
    tx = Transactions(
        store,
        data_dir=data_dir,
        timeout_ms=TIMEOUT_MS,
        check_interval_ms=CHECK_INTERVAL_MS,
        check_max=CHECK_MAX,
        now_ms=wall_ms,
    )
    return store, tx


class Child:
    def __init__(self, data_dir: Path, round_no: int, seed: int) -> None:
        self.store, self.tx = open_transactions(data_dir)
        self.round_no = round_no
        self.seed = seed
        self.out_lock = threading.Lock()
        self.intents: dict[str, str] = {}

    def say(self, line: str) -> None:
        with self.out_lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    def decide(self, tid: str, intent: str, source: DecisionSource) -> None:
        self.say(f"d {tid} {intent}")
        try:
            outcome = self.tx.end(tid, commit=intent == "committed", source=source)
        except TransactionError as exc:
            self.say(f"E {tid} {type(exc).__name__}")
            return
        self.say(f"D {tid} {outcome.value}")

    def worker(self, n: int) -> None:
        rng = random.Random(self.seed * 1000 + n)
        for i in range(100_000):
            tid = uuid.uuid4().hex
            mid = f"r{self.round_no}-w{n}-{i}"
            intent = rng.choice(["committed", "committed", "rolled_back", "unknown"])
            with self.out_lock:
                self.intents[tid] = intent
            self.say(f"p {tid} {mid} {intent}")
            body = (mid * 10).encode()[: 100 + (i * 31) % 900]
            self.tx.prepare(
                RecordDraft(topic="crash", queue_id=i % QUEUES, body=body, message_id=mid),
                producer_group="crash",
                transaction_id=tid,
            )
            self.say(f"P {tid}")
            if intent != "unknown" and rng.random() < 0.8:
                self.decide(tid, intent, DecisionSource.PRODUCER)

    def checker(self) -> None:
        rng = random.Random(self.seed)
        for _ in range(100_000):
            for req in self.tx.due_checks(lambda g: True):
                self.say(f"K {req.transaction_id} {req.check_number}")
                with self.out_lock:
                    intent = self.intents.get(req.transaction_id, "unknown")
                if intent != "unknown" and rng.random() < 0.7:
                    self.decide(req.transaction_id, intent, DecisionSource.CHECK_BACK)
            time.sleep(0.01)  # sleep: the check-back tick period of this workload

    def snapshotter(self) -> None:
        """Snapshots race with prepares, decisions and check ticks, as in the broker."""
        for _ in range(100_000):
            self.tx.snapshot()
            time.sleep(0.03)  # sleep: the snapshot period of this workload


def main() -> None:
    data_dir, round_no, seed, threads = (
        Path(sys.argv[1]),
        int(sys.argv[2]),
        int(sys.argv[3]),
        int(sys.argv[4]),
    )
    child = Child(data_dir, round_no, seed)
    child.say("ready")
    for n in range(threads):
        threading.Thread(target=child.worker, args=(n,), daemon=True).start()
    threading.Thread(target=child.checker, daemon=True).start()
    threading.Thread(target=child.snapshotter, daemon=True).start()
    time.sleep(60)  # sleep: the workers run until the parent's SIGKILL lands


if __name__ == "__main__":
    main()
