"""The demo's Spark pipelines (txmq.demo.pipeline) against a real broker and the shared session.

Goal: the per-SKU-per-minute aggregate counts each committed order once, also when run again
after more orders arrive; the reconciliation names each planted mismatch and nothing else.
Method: order messages over raw gRPC (one rolled back), two SQLite databases shaped like the
demo services' tables with one mismatch of each kind planted.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.integration.conftest import BrokerProcess
from txmq.demo.pipeline import aggregate_orders, reconcile
from txmq.spark.client import BrokerClient, build_message

pytestmark = pytest.mark.spark
MINUTE_MS = 60_000
BASE_MS = 1_790_000_000_000 // MINUTE_MS * MINUTE_MS


def _order(
    broker: BrokerClient, topic: str, oid: str, sku: str, qty: int, ts: int, *, commit: bool = True
) -> None:
    body = json.dumps({"order_id": oid, "sku": sku, "qty": qty, "ts": ts}).encode()
    [half] = broker.send([build_message(topic, body, keys=[oid], transactional=True)])
    broker.end_transaction(half, commit=commit)


def test_orders_per_sku_per_minute(spark_broker: BrokerProcess, spark: Any, tmp_path: Path) -> None:
    ep, topic = spark_broker.endpoints, "orders-agg"
    out, ckpt = tmp_path / "agg.parquet", tmp_path / "ckpt"
    with BrokerClient(ep) as broker:
        _order(broker, topic, "o1", "apple", 2, BASE_MS + 1_000)
        _order(broker, topic, "o2", "apple", 3, BASE_MS + 59_000)
        _order(broker, topic, "o3", "pear", 1, BASE_MS + 61_000)
        _order(broker, topic, "gone", "pear", 9, BASE_MS + 62_000, commit=False)
        assert aggregate_orders(ep, out, ckpt, topic, spark=spark) == 2
        _order(broker, topic, "o4", "pear", 4, BASE_MS + 65_000)
    assert aggregate_orders(ep, out, ckpt, topic, spark=spark) == 2  # only o4 is new
    rows = {(r["sku"], r["qty"], r["orders"]) for r in pq.read_table(out).to_pylist()}
    assert rows == {("apple", 5, 2), ("pear", 5, 2)}


def test_reconcile_names_each_mismatch(
    spark_broker: BrokerProcess, spark: Any, tmp_path: Path
) -> None:
    ep, topic = spark_broker.endpoints, "orders-rec"
    with BrokerClient(ep) as broker:
        for oid, qty in [("ok", 1), ("leak", 1), ("twice", 1), ("qty", 5), ("undeducted", 1)]:
            _order(broker, topic, oid, "fig", qty, BASE_MS)
        _order(broker, topic, "twice", "fig", 1, BASE_MS)
    orders_db, inventory_db = tmp_path / "orders.db", tmp_path / "inventory.db"
    with sqlite3.connect(orders_db) as db:
        db.execute(
            "CREATE TABLE orders (id TEXT PRIMARY KEY, sku TEXT, qty INTEGER, created_ms INTEGER)"
        )
        for oid, qty in [("ok", 1), ("twice", 1), ("qty", 2), ("undeducted", 1), ("lost", 1)]:
            db.execute("INSERT INTO orders VALUES (?, 'fig', ?, 0)", (oid, qty))
    with sqlite3.connect(inventory_db) as db:
        db.execute(
            "CREATE TABLE processed (message_id TEXT PRIMARY KEY, order_id TEXT, received_ms REAL)"
        )
        for i, oid in enumerate(["ok", "twice", "twice", "qty", "lost", "ghost"]):
            db.execute("INSERT INTO processed VALUES (?, ?, 0)", (f"m{i}", oid))
    report = reconcile(ep, orders_db, inventory_db, topic, spark=spark)
    assert (report.orders, report.messages, report.deductions) == (5, 6, 6)
    assert report.mismatches == {
        "ordered but no message": ["lost"],
        "message without an order (leaked rollback)": ["leak"],
        "duplicate messages for one order": ["twice"],
        "quantity differs from the order": ["qty"],
        "deducted without an order": ["ghost"],
        "ordered but not deducted": ["undeducted"],
        "deducted more than once": ["twice"],
    }
    assert not report.consistent and json.loads(report.to_json())["consistent"] is False
