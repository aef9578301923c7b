"""The order service: writes an order to its local SQLite database and sends a transactional
"deduct stock" message, so both happen or neither does.

Failure injection (seeded): the local transaction raises (-> rollback), the service "crashes"
after its local commit but before deciding (-> check-back finds the order: COMMIT), or crashes
before its local commit (-> check-back finds nothing: ROLLBACK). The TransactionChecker answers
from the order table, which is the whole point: the database is the source of truth.
"""

from __future__ import annotations

import json
import random
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocketmq import (
    ClientConfiguration,
    Credentials,
    Message,
    Producer,
    TransactionChecker,
    TransactionResolution,
)

TOPIC = "deduct-stock"
SKUS = ["apple", "pear", "plum", "fig", "kiwi"]
POISON_SKU = "poison"


def open_db(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(
        "CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY, sku TEXT, qty INTEGER,"
        " created_ms INTEGER)"
    )
    return db


class OrderChecker(TransactionChecker):  # type: ignore[misc]
    """Check-back: the order exists in the local DB exactly when its transaction committed."""

    def __init__(self, db: sqlite3.Connection, lock: threading.Lock) -> None:
        self.db = db
        self.lock = lock
        self.checks = 0

    def check(self, message: Message) -> TransactionResolution:
        order_id = json.loads(message.body)["order_id"]
        with self.lock:
            self.checks += 1
            row = self.db.execute("SELECT 1 FROM orders WHERE id = ?", (order_id,)).fetchone()
        return TransactionResolution.COMMIT if row else TransactionResolution.ROLLBACK


@dataclass
class OrderStats:
    committed: int = 0
    rolled_back: int = 0
    left_to_check_back: int = 0
    send_latency_ms: list[float] = field(default_factory=list)
    sent_at_ms: dict[str, float] = field(default_factory=dict)


class LocalFailure(Exception):
    """An injected failure of the order service's own database transaction."""


def place_orders(
    endpoints: str, db_path: Path, n: int, *, seed: int, progress: Any = None
) -> OrderStats:
    rng = random.Random(seed)
    db = open_db(db_path)
    lock = threading.Lock()
    checker = OrderChecker(db, lock)
    producer = Producer(ClientConfiguration(endpoints, Credentials()), (TOPIC,), checker)
    producer.startup()
    stats = OrderStats()
    run = f"{int(time.time() * 1000) % 10**9:09d}"  # ids stay unique across runs on one broker
    try:
        for i in range(n):
            order_id = f"o-{run}-{i}"
            sku = POISON_SKU if i % 97 == 13 else rng.choice(SKUS)
            qty = rng.randint(1, 5)
            fate = rng.choices(
                ["ok", "local-error", "crash-after-db", "crash-before-db"], weights=[80, 10, 6, 4]
            )[0]
            body = json.dumps(
                {"order_id": order_id, "sku": sku, "qty": qty, "ts": int(time.time() * 1000)}
            ).encode()
            msg = Message()
            msg.topic = TOPIC
            msg.body = body
            msg.tag = "deduct"
            msg.keys = order_id
            started = time.perf_counter()
            tx = producer.begin_transaction()
            producer.send(msg, tx)
            try:
                with lock:
                    db.execute("BEGIN")
                    try:
                        if fate == "local-error":
                            raise LocalFailure(f"order {order_id}: payment declined")
                        db.execute(
                            "INSERT INTO orders VALUES (?, ?, ?, ?)",
                            (order_id, sku, qty, int(time.time() * 1000)),
                        )
                        if fate == "crash-before-db":
                            db.execute("ROLLBACK")
                            stats.left_to_check_back += 1
                            continue
                        db.execute("COMMIT")
                    except LocalFailure:
                        db.execute("ROLLBACK")
                        raise
                if fate == "crash-after-db":
                    stats.left_to_check_back += 1
                    continue
                tx.commit()
                stats.committed += 1
                stats.sent_at_ms[order_id] = time.time() * 1000
                stats.send_latency_ms.append((time.perf_counter() - started) * 1000)
            except LocalFailure:
                tx.rollback()
                stats.rolled_back += 1
            finally:
                if progress is not None:
                    progress()
        return stats
    finally:
        # Keep the producer alive for check-back until the caller has waited: the caller
        # shuts it down through the returned handle.
        _LIVE.append((producer, checker))


_LIVE: list[tuple[Producer, OrderChecker]] = []


def shutdown_producers() -> int:
    checks = 0
    while _LIVE:
        producer, checker = _LIVE.pop()
        checks += checker.checks
        producer.shutdown()
    return checks
