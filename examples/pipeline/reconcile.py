"""Reconciliation: join the order service's orders, the topic's committed messages and the
inventory service's deductions, and report every mismatch.

    .venv/bin/python examples/pipeline/reconcile.py --endpoints 127.0.0.1:8081 \
        --orders-db orders.db --inventory-db inventory.db
"""

from __future__ import annotations

import argparse
import json
import sqlite3
from pathlib import Path

from txmq.demo.orders import TOPIC
from txmq.spark.session import local_session


def reconcile(endpoints: str, orders_db: Path, inventory_db: Path) -> dict[str, list[str]]:
    spark = local_session("txmq-reconcile")
    msgs = (
        spark.read.format("txmq")
        .option("endpoints", endpoints)
        .option("topic", TOPIC)
        .load()
        .selectExpr("cast(body as string) as body")
        .collect()
    )
    in_topic = {json.loads(r.body)["order_id"] for r in msgs}
    orders = {r[0] for r in sqlite3.connect(orders_db).execute("SELECT id FROM orders")}
    deducted = {
        r[0] for r in sqlite3.connect(inventory_db).execute("SELECT order_id FROM processed")
    }
    return {
        "ordered but no message": sorted(orders - in_topic),
        "message without an order (leaked rollback)": sorted(in_topic - orders),
        "deducted without an order": sorted(deducted - orders),
        "ordered but not deducted": sorted(orders - deducted),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoints", default="127.0.0.1:8081")
    ap.add_argument("--orders-db", type=Path, required=True)
    ap.add_argument("--inventory-db", type=Path, required=True)
    args = ap.parse_args()
    for name, ids in reconcile(args.endpoints, args.orders_db, args.inventory_db).items():
        print(f"{name}: {len(ids)} {ids[:5]}")


if __name__ == "__main__":
    main()
