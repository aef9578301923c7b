"""The inventory service: consumes "deduct stock" messages idempotently.

The processed message id is stored with the stock update in one SQLite transaction, so a
redelivered message (at-least-once) never deducts twice. Failure injection (seeded): a
transient error before the local commit (the message is not acked and comes back), and a
poison SKU that always fails, which the broker moves to the dead-letter queue after its
maximum delivery attempts.
"""

from __future__ import annotations

import json
import random
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer

from txmq.demo.orders import POISON_SKU, TOPIC

GROUP = "inventory-service"


def open_db(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE IF NOT EXISTS stock (sku TEXT PRIMARY KEY, deducted INTEGER)")
    db.execute(
        "CREATE TABLE IF NOT EXISTS processed (message_id TEXT PRIMARY KEY,"
        " order_id TEXT, received_ms REAL)"
    )
    return db


@dataclass
class InventoryStats:
    deliveries: int = 0
    duplicates_skipped: int = 0
    transient_failures: int = 0
    poison_failures: int = 0
    received_at_ms: dict[str, float] = field(default_factory=dict)


class Inventory:
    def __init__(self, endpoints: str, db_path: Path, *, seed: int) -> None:
        self.db = open_db(db_path)
        self.rng = random.Random(seed)
        self.stats = InventoryStats()
        self.consumer = SimpleConsumer(
            ClientConfiguration(endpoints, Credentials()),
            GROUP,
            {TOPIC: FilterExpression("deduct")},
        )
        self.consumer.startup()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="inventory", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self.consumer.shutdown()

    def _run(self) -> None:
        while not self._stop.is_set():
            for m in self.consumer.receive(16, 2) or []:
                self.stats.deliveries += 1
                if self._handle(m.message_id, json.loads(m.body)):
                    self.consumer.ack(m)
                else:
                    # Not acked: back off briefly, then the broker redelivers it.
                    self.consumer.change_invisible_duration(m, 1)

    def _handle(self, message_id: str, order: dict[str, object]) -> bool:
        if order["sku"] == POISON_SKU:
            self.stats.poison_failures += 1
            return False
        if self.rng.random() < 0.05:
            self.stats.transient_failures += 1
            return False
        self.db.execute("BEGIN")
        seen = self.db.execute(
            "SELECT 1 FROM processed WHERE message_id = ?", (message_id,)
        ).fetchone()
        if seen:
            self.db.execute("ROLLBACK")
            self.stats.duplicates_skipped += 1
            return True
        self.db.execute(
            "INSERT INTO stock VALUES (?, ?) ON CONFLICT(sku) DO UPDATE SET"
            " deducted = deducted + excluded.deducted",
            (order["sku"], order["qty"]),
        )
        self.db.execute(
            "INSERT INTO processed VALUES (?, ?, ?)",
            (message_id, order["order_id"], time.time() * 1000),
        )
        self.db.execute("COMMIT")
        self.stats.received_at_ms[str(order["order_id"])] = time.time() * 1000
        return True
