"""The inventory service of the txmq demo: consumes "deduct stock" messages idempotently.

Application code: it imports only the official RocketMQ client and sqlite3. Delivery is
at-least-once (a message whose ack is lost comes back), so the service stores each processed
message id *in the same local transaction* as the stock update; a redelivered message finds its
id and is acked without deducting twice.

Failure injection (seeded):
- transient failure before the local transaction: the message is not acked and is retried
  shortly (``change_invisible_duration``);
- lost ack after the local transaction committed: redelivered, then skipped as a duplicate;
- a poison SKU that always fails: after the broker's maximum delivery attempts the message
  moves to the group's dead-letter queue ``%DLQ%inventory-service``.

Run by hand against a broker (Ctrl-C or SIGTERM stops it and prints its counters):

    .venv/bin/python -m txmq.demo.inventory_service --endpoints 127.0.0.1:8081
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sqlite3
import threading
import time
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer

from txmq.protocol.client_security import ClientSecurity

GROUP = "inventory-service"
TOPIC = "deduct-stock"
TAG = "deduct"
POISON_SKU = "poison"
# Seconds a received message stays invisible to the group while this service works on it.
INVISIBLE_S = 10
# Seconds until a message this service failed on is delivered again.
RETRY_S = 1


@dataclass
class InventoryStats:
    deliveries: int = 0
    deducted: int = 0
    duplicates_skipped: int = 0
    transient_failures: int = 0
    acks_lost: int = 0
    poison_failures: int = 0


class Poison(Exception):
    """A message this service can never process."""


class InventoryDb:
    """Stock levels plus the processed message ids, in one SQLite file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        with closing(self.connect()) as conn:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS stock (sku TEXT PRIMARY KEY, deducted INTEGER)"
            )
            conn.execute(
                "CREATE TABLE IF NOT EXISTS processed (message_id TEXT PRIMARY KEY,"
                " order_id TEXT NOT NULL, sku TEXT NOT NULL, qty INTEGER NOT NULL,"
                " processed_ms REAL NOT NULL)"
            )
            conn.commit()

    def connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        return conn

    def deduct_once(self, conn: sqlite3.Connection, message_id: str, order: dict[str, Any]) -> bool:
        """Deduct stock unless this message id was processed; False for a duplicate."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            seen = conn.execute(
                "SELECT 1 FROM processed WHERE message_id = ?", (message_id,)
            ).fetchone()
            if seen:
                conn.execute("ROLLBACK")
                return False
            conn.execute(
                "INSERT INTO stock VALUES (?, ?) ON CONFLICT(sku) DO UPDATE SET"
                " deducted = deducted + excluded.deducted",
                (order["sku"], order["qty"]),
            )
            conn.execute(
                "INSERT INTO processed VALUES (?, ?, ?, ?, ?)",
                (message_id, order["order_id"], order["sku"], order["qty"], time.time() * 1000),
            )
            conn.execute("COMMIT")
            return True
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def processed(self, prefix: str = "") -> dict[str, tuple[str, int, float]]:
        """order id -> (sku, qty, processed at ms) for processed orders with this id prefix."""
        with closing(self.connect()) as conn:
            rows = conn.execute(
                "SELECT order_id, sku, qty, processed_ms FROM processed WHERE order_id LIKE ?",
                (prefix + "%",),
            ).fetchall()
        return {r[0]: (r[1], int(r[2]), float(r[3])) for r in rows}

    def processed_rows(self, prefix: str = "") -> int:
        """Processed message ids for orders with this id prefix (one per order unless a
        message was duplicated)."""
        with closing(self.connect()) as conn:
            row = conn.execute(
                "SELECT COUNT(*) FROM processed WHERE order_id LIKE ?", (prefix + "%",)
            ).fetchone()
        return int(row[0])

    def stock(self) -> dict[str, int]:
        with closing(self.connect()) as conn:
            return {r[0]: int(r[1]) for r in conn.execute("SELECT sku, deducted FROM stock")}


class InventoryService:
    """A SimpleConsumer on its own thread, deducting stock for each message once."""

    def __init__(
        self,
        endpoints: str,
        db_path: Path,
        *,
        topic: str = TOPIC,
        group: str = GROUP,
        seed: int = 1,
        failure_rate: float = 0.05,
    ) -> None:
        self.db = InventoryDb(db_path)
        self.rng = random.Random(seed)
        self.failure_rate = failure_rate
        self.stats = InventoryStats()
        # Credentials and TLS from the environment, as in order_service.py.
        security = ClientSecurity.from_env(os.environ)
        self.consumer = SimpleConsumer(
            ClientConfiguration(endpoints, Credentials(*security.official_credentials)),
            group,
            {topic: FilterExpression(TAG)},
            await_duration=2,
            tls_enable=security.tls,
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="inventory", daemon=True)
        self.error: BaseException | None = None

    def start(self) -> None:
        self.consumer.startup()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self.consumer.shutdown()

    def _run(self) -> None:
        try:
            with closing(self.db.connect()) as conn:
                while not self._stop.is_set():
                    for m in self.consumer.receive(16, INVISIBLE_S) or []:
                        self._deliver(conn, m)
        except BaseException as exc:
            # Surface the failure to whoever runs the service instead of dying silently.
            self.error = exc
            raise

    def _deliver(self, conn: sqlite3.Connection, m: Any) -> None:
        self.stats.deliveries += 1
        order = json.loads(m.body)
        try:
            if order["sku"] == POISON_SKU:
                self.stats.poison_failures += 1
                raise Poison(order["order_id"])
            if self.rng.random() < self.failure_rate:
                self.stats.transient_failures += 1
                raise TimeoutError("stock database busy")
        except (Poison, TimeoutError):
            self.consumer.change_invisible_duration(m, RETRY_S)
            return
        if self.db.deduct_once(conn, m.message_id, order):
            self.stats.deducted += 1
        else:
            self.stats.duplicates_skipped += 1
        if self.rng.random() < self.failure_rate:
            # Committed locally but the ack is "lost": the broker delivers it again.
            self.stats.acks_lost += 1
            self.consumer.change_invisible_duration(m, RETRY_S)
            return
        self.consumer.ack(m)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--endpoints", default=os.environ.get("TXMQ_ENDPOINTS", "127.0.0.1:8081"))
    ap.add_argument("--db", type=Path, default=Path("inventory.db"))
    ap.add_argument("--topic", default=TOPIC)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    service = InventoryService(args.endpoints, args.db, topic=args.topic, seed=args.seed)
    stopping = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopping.set())
    service.start()
    try:
        while service.error is None and not stopping.wait(1.0):
            pass
    finally:
        service.stop()
    print(json.dumps({"stats": vars(service.stats), "stock": service.db.stock()}))


if __name__ == "__main__":
    main()
