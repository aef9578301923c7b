"""The order service of the txmq demo: an order row in the service's own database and a
"deduct stock" message happen together or not at all, with RocketMQ transactional messages.

This is application code, not broker code: it imports only the official RocketMQ client
(``rocketmq-python-client``) and a database driver, so it runs unchanged against txmq or
Apache RocketMQ. The pattern, per order:

1. send the message as a *half* message (stored durably by the broker, invisible),
2. run the local database transaction (insert the order),
3. commit the message if the local transaction committed, roll it back if it failed.

If step 3 never arrives (the service hangs or crashes), the broker asks back: the
``OrderChecker`` answers from the order table, the source of truth: the order row exists
exactly when the local transaction committed. An order still inside its local transaction in
this process gets no answer yet (the broker asks again later).

Failure injection (a seeded plan, see ``plan_orders``): ``local-error`` (the local transaction
raises: rollback), ``slow-local`` (the local transaction outlasts the broker's transaction
timeout: the check-back that arrives meanwhile gets no answer, then the service commits),
``hang`` (committed locally, the decision never sent: check-back commits),
``crash-after-db`` and ``crash-before-db`` (a second service process is killed with SIGKILL
before deciding, after or during its local transaction: check-back, answered by the surviving
instance, commits or rolls back).

The database is SQLite (a file path) or PostgreSQL (a ``postgresql://`` URL, needs psycopg).

Run by hand against a broker:

    .venv/bin/txmq broker --data-dir /tmp/txmq --port 8081 &
    .venv/bin/python -m txmq.demo.order_service --endpoints 127.0.0.1:8081 --orders 50
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
from collections.abc import Iterator
from contextlib import ExitStack, closing, contextmanager
from dataclasses import dataclass
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

from txmq.protocol.client_security import ClientSecurity

TOPIC = "deduct-stock"
TAG = "deduct"
SKUS = ("apple", "pear", "plum", "fig", "kiwi")
# The inventory service can never process this SKU: its messages end in the dead-letter queue.
POISON_SKU = "poison"

OK = "ok"
LOCAL_ERROR = "local-error"
HANG = "hang"
CRASH_AFTER_DB = "crash-after-db"
CRASH_BEFORE_DB = "crash-before-db"
SLOW = "slow-local"
# Share of each fate in a plan; every fate appears at least once in plans of 10+ orders.
FATE_SHARES = {
    LOCAL_ERROR: 0.10,
    HANG: 0.05,
    CRASH_AFTER_DB: 0.05,
    CRASH_BEFORE_DB: 0.04,
    SLOW: 0.01,
}
CRASH_FATES = (CRASH_AFTER_DB, CRASH_BEFORE_DB)
POISON_SHARE = 0.01


@dataclass(frozen=True, slots=True)
class Order:
    order_id: str
    sku: str
    qty: int
    fate: str


@dataclass(frozen=True, slots=True)
class Placed:
    """What the service did with one order. ``decision`` is None when it never decided."""

    order: Order
    decision: str | None
    decided_at_ms: float
    latency_ms: float


class PaymentDeclined(Exception):
    """The injected failure of a local transaction."""


def plan_orders(n: int, seed: int, run_id: str) -> list[Order]:
    """A deterministic plan of ``n`` orders and their injected fates."""
    rng = random.Random(seed)
    fates: list[str] = []
    for fate, share in FATE_SHARES.items():
        fates += [fate] * max(1 if n >= 10 else 0, round(n * share))
    fates = fates[:n] + [OK] * max(0, n - len(fates))
    rng.shuffle(fates)
    healthy = [i for i, f in enumerate(fates) if f == OK]
    poison = set(rng.sample(healthy, min(len(healthy), max(1, round(n * POISON_SHARE)))))
    return [
        Order(
            order_id=f"o-{run_id}-{i:05d}",
            sku=POISON_SKU if i in poison else rng.choice(SKUS),
            qty=rng.randint(1, 5),
            fate=fate,
        )
        for i, fate in enumerate(fates)
    ]


class OrderDb:
    """The order table in SQLite (a path) or PostgreSQL (a ``postgresql://`` URL)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.postgres = url.startswith(("postgresql://", "postgres://"))
        self.mark = "%s" if self.postgres else "?"

    def connect(self) -> Any:
        if self.postgres:
            import psycopg  # optional: only PostgreSQL users need it

            return psycopg.connect(self.url)
        conn = sqlite3.connect(self.url.removeprefix("sqlite:///"), timeout=30)
        conn.execute("PRAGMA journal_mode=WAL")
        return conn

    def create(self) -> None:
        with closing(self.connect()) as conn:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY, sku TEXT NOT NULL,"
                " qty INTEGER NOT NULL, created_ms BIGINT NOT NULL)"
            )
            conn.commit()

    def insert(self, conn: Any, order: Order) -> None:
        m = self.mark
        conn.execute(
            f"INSERT INTO orders (id, sku, qty, created_ms) VALUES ({m}, {m}, {m}, {m})",
            (order.order_id, order.sku, order.qty, int(time.time() * 1000)),
        )

    def exists(self, order_id: str) -> bool:
        with closing(self.connect()) as conn:
            row = conn.execute(
                f"SELECT 1 FROM orders WHERE id = {self.mark}", (order_id,)
            ).fetchone()
            conn.rollback()
            return row is not None

    def orders(self, prefix: str) -> dict[str, tuple[str, int]]:
        """Committed orders whose id starts with ``prefix``: id -> (sku, qty)."""
        with closing(self.connect()) as conn:
            rows = conn.execute(
                f"SELECT id, sku, qty FROM orders WHERE id LIKE {self.mark}", (prefix + "%",)
            ).fetchall()
            conn.rollback()
        return {r[0]: (r[1], int(r[2])) for r in rows}


class OrderChecker(TransactionChecker):  # type: ignore[misc]
    """Check-back: the order row exists exactly when its local transaction committed."""

    def __init__(self, db: OrderDb, *, local_txn_max_ms: int = 6_000) -> None:
        self.db = db
        # The longest a local transaction may run. Another instance's transaction is invisible
        # to this one until it commits, so "no row" means "never" only once the half message is
        # older than this; before that the honest answer is "ask later".
        self.local_txn_max_ms = local_txn_max_ms
        self.lock = threading.Lock()
        self.inflight: set[str] = set()
        self.answers = {"commit": 0, "rollback": 0, "ask-later": 0}

    @contextmanager
    def local_transaction(self, order_id: str) -> Iterator[None]:
        """Mark an order as inside its local transaction in this process."""
        with self.lock:
            self.inflight.add(order_id)
        try:
            yield
        finally:
            with self.lock:
                self.inflight.discard(order_id)

    def check(self, message: Message) -> Any:
        order_id = json.loads(message.body)["order_id"]
        with self.lock:
            running = order_id in self.inflight
        if running:
            # Neither answer is true yet. An unspecified resolution is refused by the broker,
            # which keeps the transaction pending and asks again at the next interval.
            self.answers["ask-later"] += 1
            return TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED
        committed = self.db.exists(order_id)
        born_ms = message.born_timestamp or 0
        if not committed and time.time() * 1000 - born_ms < self.local_txn_max_ms:
            # Maybe still running in another instance of this service (this check may reach
            # any live instance): answering ROLLBACK now could contradict its commit.
            self.answers["ask-later"] += 1
            return TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED
        self.answers["commit" if committed else "rollback"] += 1
        return TransactionResolution.COMMIT if committed else TransactionResolution.ROLLBACK


def order_message(order: Order, topic: str) -> Message:
    msg = Message()
    msg.topic = topic
    msg.tag = TAG
    msg.keys = order.order_id
    msg.body = json.dumps(
        {
            "order_id": order.order_id,
            "sku": order.sku,
            "qty": order.qty,
            "ts": int(time.time() * 1000),
        }
    ).encode()
    return msg


class OrderService:
    """One instance of the order service: a transactional producer and the order database."""

    def __init__(
        self, endpoints: str, db: OrderDb, *, topic: str = TOPIC, slow_s: float = 2.5
    ) -> None:
        self.db = db
        self.topic = topic
        # How long a slow-local order's transaction takes: longer than the broker's
        # transaction timeout, so a check-back arrives while it runs.
        self.slow_s = slow_s
        self.checker = OrderChecker(db)
        # Credentials and TLS from TXMQ_ACCESS_KEY/TXMQ_SECRET_KEY/TXMQ_TLS/TXMQ_CA_FILE, as the
        # txmq CLI reads them (set by `txmq demo --secure`); none by default.
        security = ClientSecurity.from_env(os.environ)
        self.producer = Producer(
            ClientConfiguration(endpoints, Credentials(*security.official_credentials)),
            (topic,),
            self.checker,
            tls_enable=security.tls,
        )

    def start(self) -> None:
        self.db.create()
        self.producer.startup()

    def stop(self) -> None:
        self.producer.shutdown()

    def place(self, order: Order) -> Placed:
        """Half message, local transaction, decision (unless the fate says otherwise)."""
        started = time.perf_counter()
        with self.checker.local_transaction(order.order_id):
            tx = self.producer.begin_transaction()
            self.producer.send(order_message(order, self.topic), tx)
            try:
                self._local_transaction(order)
            except PaymentDeclined:
                tx.rollback()
                return Placed(order, "rollback", time.time() * 1000, _ms_since(started))
        if order.fate == HANG:
            return Placed(order, None, 0.0, _ms_since(started))
        tx.commit()
        return Placed(order, "commit", time.time() * 1000, _ms_since(started))

    def _local_transaction(self, order: Order) -> None:
        with closing(self.db.connect()) as conn:
            self.db.insert(conn, order)
            if order.fate == LOCAL_ERROR:
                conn.rollback()
                raise PaymentDeclined(f"order {order.order_id}: payment declined")
            if order.fate == SLOW:
                time.sleep(self.slow_s)  # e.g. a slow payment provider, inside the transaction
            conn.commit()

    def crash_midway(self, orders: list[Order]) -> None:
        """The crash fates, then SIGKILL: decisions never sent, one local transaction open.

        Until it dies this instance is a live producer of the topic, so a check-back may reach
        it first; its checker must then answer as truthfully as the surviving instance's.
        """
        for order in orders:
            if order.fate == CRASH_AFTER_DB:
                with self.checker.local_transaction(order.order_id):
                    tx = self.producer.begin_transaction()
                    self.producer.send(order_message(order, self.topic), tx)
                    with closing(self.db.connect()) as conn:
                        self.db.insert(conn, order)
                        conn.commit()
        conn = self.db.connect()
        with ExitStack() as running:
            for order in orders:
                if order.fate == CRASH_BEFORE_DB:
                    # Inside an open local transaction until the process dies.
                    running.enter_context(self.checker.local_transaction(order.order_id))
                    tx = self.producer.begin_transaction()
                    self.producer.send(order_message(order, self.topic), tx)
                    self.db.insert(conn, order)  # never committed: the process dies first
            print("crashing now", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)


def _ms_since(started: float) -> float:
    return (time.perf_counter() - started) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--endpoints", default=os.environ.get("TXMQ_ENDPOINTS", "127.0.0.1:8081"))
    ap.add_argument("--db", default="orders.db", help="SQLite path or postgresql:// URL")
    ap.add_argument("--topic", default=TOPIC)
    ap.add_argument("--orders", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--settle-s", type=float, default=15.0, help="Stay up for check-back.")
    ap.add_argument(
        "--crash-batch", type=Path, help="JSON list of orders to run, then die (used by the demo)."
    )
    args = ap.parse_args()
    service = OrderService(args.endpoints, OrderDb(args.db), topic=args.topic)
    service.start()
    if args.crash_batch is not None:
        orders = [Order(**o) for o in json.loads(args.crash_batch.read_text())]
        service.crash_midway(orders)
    run_id = f"{int(time.time()) % 10**8:08d}"
    plan = [o for o in plan_orders(args.orders, args.seed, run_id) if o.fate not in CRASH_FATES]
    placed = [service.place(o) for o in plan]
    time.sleep(args.settle_s)  # stay reachable: undecided orders are resolved by check-back
    service.stop()
    decisions = [p.decision or "left to check-back" for p in placed]
    summary = {d: decisions.count(d) for d in sorted(set(decisions))}
    print(json.dumps({"placed": summary, "check-back answers": service.checker.answers}))


if __name__ == "__main__":
    main()
