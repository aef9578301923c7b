"""Reconciliation: join the order service's orders (SQLite), the topic's committed messages and
the inventory service's deductions (SQLite), and report every mismatch. Exit code 1 when any.

    .venv/bin/python examples/pipeline/reconcile.py --endpoints 127.0.0.1:8081 \
        --orders-db orders.db --inventory-db inventory.db
    .venv/bin/python -m examples.pipeline.reconcile ...             (from the repository root)
"""

from __future__ import annotations

import argparse
from pathlib import Path

from txmq.spark.pipeline import ORDER_TOPIC_DEFAULT, Reconciliation, reconcile

__all__ = ["Reconciliation", "main", "reconcile"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--endpoints", default="127.0.0.1:8081")
    ap.add_argument("--topic", default=ORDER_TOPIC_DEFAULT)
    ap.add_argument("--orders-db", type=Path, required=True)
    ap.add_argument("--inventory-db", type=Path, required=True)
    args = ap.parse_args()
    report = reconcile(args.endpoints, args.orders_db, args.inventory_db, args.topic)
    print(f"orders {report.orders}, messages {report.messages}, deductions {report.deductions}")
    for kind, ids in report.mismatches.items():
        print(f"{kind}: {len(ids)} {ids[:5]}")
    print("CONSISTENT" if report.consistent else "MISMATCHES FOUND")
    return 0 if report.consistent else 1


if __name__ == "__main__":
    raise SystemExit(main())
